// dspark serve: an OpenAI-compatible HTTP server over the continuous-batching engine.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "runtime/engine.h"
#include "runtime/spec_generate.h"
#include "server/hidden_export.h"
#include "server/http_server.h"
#include "spec_decode/drafter.h"
#include "spec_decode/verify_length.h"

namespace dspark {

namespace {

// cmd_serve's steps, in the order it runs them.

void add_serve_flags(Args& args) {
  args.flag("model", "model: an HF directory (config.json, safetensors, tokenizer.json) or a GGUF file", true,
            "models/demo")
      .flag("speculative-config",
            "vLLM-style JSON: {\"method\": \"dspark\", \"model\": DIR, \"num_speculative_tokens\": "
            "8, ...} "
            "(default: plain decoding)")
      .flag("kv-transfer-config",
            "vLLM-style JSON: {\"kv_connector\": \"HiddenStatesConnector\", \"kv_role\": "
            "\"kv_producer\", \"kv_connector_extra_config\": {\"store\": \"redis://HOST:PORT/DB\" "
            "or \"file:DIR\", \"export_fraction\": 0, ...}}: export requests' target hidden "
            "states (docs/online-training.md)")
      .flag("host", "address to listen on", true, "127.0.0.1")
      .flag("port", "TCP port (0: any free port; the one chosen is printed)", true, "8000")
      .flag("api-key", "require 'Authorization: Bearer KEY' on /v1, /tokenize and /detokenize")
      .flag("served-model-name", "the model id clients name (default: the --model argument)")
      .flag("enable-drafter-reload",
            "allow POST /v1/load_drafter {\"path\": DIR} (hot drafter reload, as online training uses): off "
            "by default, as vLLM gates runtime LoRA loading; needs --allowed-drafter-root",
            false)
      .flag("allowed-drafter-root", "with --enable-drafter-reload: the only directory (and its subdirectories, "
                                    "symlinks resolved) a reload may open")
      .flag("max-num-seqs", "requests running at once", true, "16")
      .flag("max-num-batched-tokens", "tokens in one engine step (chunked prefill budget)", true,
            "2048")
      .flag("kv-cache-memory", "KV cache size in GiB (default: what fits)")
      .flag("max-model-len",
            "prompt + output tokens at most (0: the model's max_position_embeddings)", true, "0")
      .flag("max-body-mib", "largest request body in MiB (larger ones get 413)", true, "8")
      .flag("idle-timeout", "seconds a connection may send nothing, between requests (keep-alive) or within one", true, "5")
      .flag("prefill-first",
            "steps with prompts to prefill run only those (lower TTFT; decoding requests wait one "
            "step per arrival). Default: prompt chunks share each step with the decoding rounds",
            false)
      .flag("enable-prefix-caching",
            "automatic prefix caching (the default): full KV blocks are kept under their tokens, "
            "and a request whose prompt starts with cached blocks prefills only the rest",
            false)
      .flag("no-enable-prefix-caching", "turn automatic prefix caching off", false);
  add_runtime_flags(args);
  add_kv_cache_flag(args);
}

// The HTTP server's options from the flags (model `dir`).
ServerOptions server_options(const Args& args, const std::string& dir) {
  ServerOptions so;
  so.host = args.str("host");
  if (so.host.empty()) fail("flag --host must not be empty");
  so.port = int(args.integer("port", 0, 65535));
  if (auto key = args.opt("api-key")) {
    if (key->empty()) fail("flag --api-key must not be empty");
    so.api_key = *key;
  }
  so.drafter_reload = args.on("enable-drafter-reload");
  if (auto root = args.opt("allowed-drafter-root")) {
    if (!so.drafter_reload) fail("flag --allowed-drafter-root needs --enable-drafter-reload");
    std::error_code ec;
    if (!std::filesystem::is_directory(*root, ec))
      fail("flag --allowed-drafter-root: '", *root, "' is not a directory");
    so.drafter_root = std::filesystem::canonical(*root).string();
  } else if (so.drafter_reload) {
    fail("flag --enable-drafter-reload needs --allowed-drafter-root DIR (the directories a reload may open)");
  }
  so.served_model_name = args.opt("served-model-name").value_or(dir);
  if (so.served_model_name.empty()) fail("flag --served-model-name must not be empty");
  so.model_root = dir;
  so.max_body_bytes = size_t(args.integer("max-body-mib", 1, 4096)) << 20;
  so.idle_timeout_s = int(args.integer("idle-timeout", 1, 3600));
  return so;
}

// The engine's options from the flags; the KV cache's size is set once the model is loaded
// (set_kv_cache_size).
EngineOptions engine_options(const Args& args, DType dtype) {
  EngineOptions eo;
  eo.max_num_seqs = int(args.integer("max-num-seqs", 1, 4096));
  eo.max_num_batched_tokens = int(args.integer("max-num-batched-tokens", 1, 1 << 20));
  eo.max_model_len = int(args.integer("max-model-len", 0, kFlagIntMax));
  eo.kv_dtype = kv_cache_dtype_from_flag(args, dtype);
  eo.prefill_first = args.on("prefill-first");
  if (args.on("enable-prefix-caching") && args.on("no-enable-prefix-caching"))
    fail("flags --enable-prefix-caching and --no-enable-prefix-caching contradict each other");
  eo.enable_prefix_caching = !args.on("no-enable-prefix-caching");
  return eo;
}

// --kv-cache-memory GiB as KV positions of this model.
void set_kv_cache_size(EngineOptions& eo, double kv_gib, const ModelConfig& cfg, DType dtype, const Args& args) {
  // K and V of every layer for one position.
  const double per_token =
      double(KvCache::bytes_per_token(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, dtype));
  eo.kv_tokens = int64_t(std::floor(kv_gib * double(1 << 30) / per_token));
  if (eo.kv_tokens < kKvBlock)
    fail("flag --kv-cache-memory ", args.str("kv-cache-memory"), " GiB holds fewer than ",
         kKvBlock, " positions of this model");
}

// The hidden-state export of --kv-transfer-config, wired into the engine's and the server's
// options. Which layers: the config's, extract_hidden_states' aux ids, or the drafter's own plus L
// (export while speculating: the drafter's taps are computed anyway).
std::unique_ptr<HiddenExportSink> make_exports(const KvTransferConfig& kvt, const std::vector<int>& aux_layers,
                                               const Drafter* drafter, const ModelConfig& cfg, DType dtype,
                                               EngineOptions& eo, ServerOptions& so) {
  std::vector<int> ids = !kvt.layer_ids.empty() ? kvt.layer_ids : aux_layers;
  if (ids.empty()) {
    if (!drafter || drafter->target_layers().empty())
      fail("flag --kv-transfer-config: give kv_connector_extra_config.layer_ids (vLLM's ids), or "
           "serve with a DSpark, DFlash or EAGLE-3 drafter (its layers are exported) or with "
           "method extract_hidden_states");
    ids = default_export_layers(drafter->target_layers(), cfg.num_layers);
  }
  KvTransferConfig k = kvt;
  k.export_all = !aux_layers.empty();  // extract_hidden_states: every request, with its handle
  auto exports = std::make_unique<HiddenExportSink>(k, ids, cfg.num_layers);
  eo.export_layers = exports->engine_layers();
  eo.export_bf16 = dtype != DType::F32;
  eo.on_export = [sink = exports.get()](HiddenExport&& e) { sink->on_export(std::move(e)); };
  so.exports = exports.get();
  return exports;
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  Args args;
  add_serve_flags(args);
  if (!args.parse(argc, argv, "serve",
                  "Serves the model over an OpenAI-compatible HTTP API (/v1/completions, "
                  "/v1/chat/completions, /v1/models, /tokenize, /detokenize, /health, /metrics)."))
    return 0;
  const LoadOptions load = apply_runtime_flags(args);
  const DType dtype = load.dtype;
  const std::string dir = args.str("model");
  ServerOptions so = server_options(args, dir);
  EngineOptions eo = engine_options(args, dtype);
  std::optional<double> kv_gib;
  if (args.opt("kv-cache-memory")) kv_gib = args.number("kv-cache-memory", 1.0 / 1024, 1 << 20);

  std::optional<SpecConfig> spec;
  if (auto sc = args.opt("speculative-config")) spec = SpecConfig::parse(*sc);
  std::optional<KvTransferConfig> kvt;
  if (auto kc = args.opt("kv-transfer-config")) kvt = KvTransferConfig::parse(*kc);
  // extract_hidden_states: no drafter, plain decoding, the aux layers exported (vLLM's method).
  std::vector<int> aux_layers;
  if (spec && spec->extract_hidden_states) {
    if (!kvt)
      fail("flag --speculative-config: method extract_hidden_states needs a --kv-transfer-config "
           "(where to write the hidden states)");
    aux_layers = spec->aux_layer_ids;
    spec.reset();
  }

  auto tok = Tokenizer::from_dir(dir);
  auto model = Model::load(dir, load);
  const ModelConfig& cfg = model->config();
  check_tokenizer_vocab(*tok, cfg, dir);
  if (kv_gib) set_kv_cache_size(eo, *kv_gib, cfg, eo.kv_dtype, args);

  std::unique_ptr<Drafter> drafter;
  std::unique_ptr<VerifyLengthPolicy> policy;
  if (spec) {
    drafter = load_drafter(*spec, *model, dtype);
    // SPS(B) over the step sizes this engine runs (profiled at start-up unless the config has it).
    policy = make_verify_policy(*spec, *model, eo.kv_dtype, eo.max_num_batched_tokens);
  }
  std::unique_ptr<HiddenExportSink> exports;
  if (kvt) exports = make_exports(*kvt, aux_layers, drafter.get(), cfg, dtype, eo, so);
  Engine engine(*model, *tok, eo, std::move(drafter), spec.value_or(SpecConfig{}),
                std::move(policy));
  engine.start();
  if (spec)
    so.load_drafter = [&engine, &model, sc = *spec, dtype](const std::string& path) {
      SpecConfig c = sc;
      c.model = path;
      return engine.swap_drafter(load_drafter(c, *model, dtype));
    };

  HttpServer server(engine, so);
  server.bind();
  server.serve_until_signal([&](int port) {
    if (exports)
      std::fprintf(stderr, "dspark serve: exporting hidden states of %zu layers to %s\n",
                   exports->layer_ids().size(), exports->store_url().c_str());
    if (spec)
      std::fprintf(stderr, "dspark serve: speculative decoding with %s, %d tokens per round%s\n",
                   spec_method_name(spec->method), engine.spec()->num_speculative_tokens,
                   spec->adaptive_verification ? ", adaptive verification" : "");
    // Tests and scripts wait for this line; with --port 0 it carries the port chosen.
    std::fprintf(stderr, "dspark serve: listening on http://%s:%d (model %s)\n", so.host.c_str(),
                 port, so.served_model_name.c_str());
  });
  engine.stop();
  if (exports) exports->close();  // the finished requests' samples reach the store first
  std::fprintf(stderr, "dspark serve: stopped\n");
  return 0;
}

}  // namespace dspark
