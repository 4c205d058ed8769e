// dspark generate: stream a completion of a prompt from a local HF checkpoint.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/mmap_file.h"
#include "model/forward.h"
#include "runtime/generate.h"
#include "runtime/spec_generate.h"
#include "spec_decode/drafter.h"
#include "spec_decode/verify_length.h"

namespace dspark {

int cmd_generate(int argc, char** argv) {
  Args args;
  args.flag("model", "model: an HF directory (config.json, safetensors, tokenizer.json) or a GGUF file")
      .flag("prompt", "prompt text")
      .flag("prompt-file", "read the prompt from this file")
      .flag("chat", "wrap the prompt in the model's chat template", false)
      .flag("system", "system message for --chat")
      .flag("stop", "stop before this string (repeatable)")
      .flag("kv-tokens", "KV cache capacity in tokens", true, "32768")
      .flag("speculative-config", "vLLM-style JSON: {\"method\": \"dspark\", \"model\": DIR, \"num_speculative_tokens\": 8, ...}")
      .flag("json", "print one JSON object instead of streaming text", false);
  add_length_flags(args, "128");
  add_sampling_flags(args, SamplingParams{});
  add_penalty_flags(args);
  add_response_format_flag(args);
  add_runtime_flags(args);
  add_kv_cache_flag(args);
  if (!args.parse(argc, argv, "generate", "Generates text from a prompt, streaming it to stdout."))
    return 0;
  const LoadOptions load = apply_runtime_flags(args);
  const DType dtype = load.dtype;
  const DType kv_dtype = kv_cache_dtype_from_flag(args, dtype);
  const std::string dir = args.str("model");
  if (args.on("prompt") == args.on("prompt-file")) fail("give exactly one of --prompt and --prompt-file");
  if (args.on("system") && !args.on("chat")) fail("flag --system needs --chat (the system message goes into the chat template)");
  GenerateParams gp;
  length_from_flags(args, gp);
  gp.sampling = sampling_from_flags(args);
  gp.logits_params = penalties_from_flags(args);
  gp.stop_strings = args.list("stop");
  validate_flag_params(gp);
  const int64_t kv_tokens = args.integer("kv-tokens", kKvBlock, int64_t(1) << 28);
  const std::string prompt_text = args.on("prompt") ? args.str("prompt") : read_text_file(args.str("prompt-file"));

  auto tok = Tokenizer::from_dir(dir);
  auto model = Model::load(dir, load);
  const ModelConfig& cfg = model->config();
  check_tokenizer_vocab(*tok, cfg, dir);

  gp.stop_token_ids = cfg.eos_token_ids;

  std::vector<int32_t> prompt;
  if (args.on("chat")) {
    ChatFormat fmt = detect_chat_format(*tok);
    std::vector<ChatMessage> msgs;
    if (args.on("system")) msgs.push_back({"system", args.str("system")});
    msgs.push_back({"user", prompt_text});
    prompt = tok->encode(apply_chat_template(fmt, msgs, true));
    for (int32_t id : chat_stop_tokens(*tok, fmt)) gp.stop_token_ids.push_back(id);
  } else {
    prompt = tok->encode(prompt_text, /*add_special_tokens=*/true);
  }
  if (prompt.empty()) fail(args.on("prompt") ? "flag --prompt" : "flag --prompt-file", ": the prompt encodes to no tokens");
  response_format_from_flags(args, *tok, gp.stop_token_ids, gp.logits_params);

  KvCache kv(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, kv_dtype, kv_tokens);
  Forward fwd(*model, kv);
  output_budget(fwd, prompt.size(), gp);  // refuses a prompt over the limits before the drafter loads
  const bool json_out = args.on("json");
  auto stream = [&](const std::string& piece) {
    if (!json_out) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
  GenerateResult r;
  SpecMetrics metrics;
  std::optional<SpecConfig> spec;
  if (auto sc = args.opt("speculative-config")) {
    spec = SpecConfig::parse(*sc);
    auto drafter = load_drafter(*spec, *model, dtype);
    auto policy = make_verify_policy(*spec, *model, kv_dtype);
    r = spec_generate(fwd, *tok, prompt, gp, *drafter, *spec, *policy, metrics, stream);
  } else {
    r = generate(fwd, *tok, prompt, gp, stream);
  }
  const double prefill_tok_s = r.prefill_seconds > 0 ? r.prompt_tokens / r.prefill_seconds : 0;
  const double decode_tok_s = r.decode_seconds > 0 ? double(r.tokens.size()) / r.decode_seconds : 0;
  if (json_out) {
    nlohmann::json j;
    j["text"] = r.text;
    j["token_ids"] = r.tokens;
    j["prompt_tokens"] = r.prompt_tokens;
    j["completion_tokens"] = r.tokens.size();
    j["finish_reason"] = r.finish_reason;
    j["prefill_tok_s"] = prefill_tok_s;
    j["decode_tok_s"] = decode_tok_s;
    if (spec) {
      j["speculative"] = metrics.to_json();
      j["speculative"]["method"] = spec_method_name(spec->method);
      j["speculative"]["num_speculative_tokens"] = spec->num_speculative_tokens;
    }
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    // The answer ends its line before the statistics start theirs (stderr is unbuffered; a
    // piped stdout is not).
    std::cout.flush();
    std::fprintf(stdout, "\n");
    std::fflush(stdout);
    std::fprintf(stderr, "[%d prompt tokens, %.1f tok/s prefill; %zu tokens, %.2f tok/s decode; %s]\n",
                 r.prompt_tokens, prefill_tok_s, r.tokens.size(), decode_tok_s, r.finish_reason.c_str());
    if (spec)
      std::fprintf(stderr, "[%s: %ld rounds, %.2f tokens per round, %.0f%% of drafts accepted]\n",
                   spec_method_name(spec->method), long(metrics.rounds), metrics.mean_accepted_length(),
                   metrics.drafted ? 100.0 * double(metrics.accepted) / double(metrics.drafted) : 0.0);
  }
  return 0;
}

}  // namespace dspark
