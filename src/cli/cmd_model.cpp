// dspark model: create and inspect model directories.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/crc32.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/mmap_file.h"
#include "core/safetensors.h"
#include "kernels/qgemm.h"
#include "model/model.h"
#include "data/token_shards.h"
#include "runtime/perplexity.h"
#include "runtime/step_profile.h"
#include "tokenizer/tokenizer.h"

namespace dspark {

namespace {

using json = nlohmann::json;

// GPT-2's byte-to-unicode map: printable bytes map to themselves, the rest to U+0100 onward.
std::string byte_token(int b) {
  static std::vector<int> map = [] {
    std::vector<int> m(256, -1);
    int next = 256;
    for (int c = 0; c < 256; ++c) {
      bool printable = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255);
      m[size_t(c)] = printable ? c : next++;
    }
    return m;
  }();
  int cp = map[size_t(b)];
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// A byte-level tokenizer.json with one token per byte and no merges, plus ChatML specials.
json byte_level_tokenizer(const std::vector<std::string>& specials) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_token(b)] = b;
  json added = json::array();
  for (size_t i = 0; i < specials.size(); ++i)
    added.push_back({{"id", 256 + int(i)}, {"content", specials[i]}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                     {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                     {"ignore_merges", false}, {"vocab", vocab}, {"merges", json::array()}}}};
}

int model_init(int argc, char** argv) {
  Args args;
  args.flag("shape", "qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b, llama-3.2-1b, tiny-qwen3, tiny-llama")
      .flag("out", "directory to write")
      .flag("seed", "random seed", true, "0")
      .flag("std", "standard deviation of the random matrices", true, "0.02")
      .flag("dtype", "stored weight type: bf16 or f32", true, "bf16")
      .flag("force", "overwrite a model already in --out", false);
  if (!args.parse(argc, argv, "model init",
                  "Writes an HF model directory with random weights of a real shape and a byte-level\n"
                  "tokenizer.json (one token per byte, ChatML specials). For tests and benchmarks:\n"
                  "its text is noise."))
    return 0;
  ModelConfig cfg = shape_config(args.str("shape"));
  const std::vector<std::string> specials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  if (cfg.vocab_size < 256 + int(specials.size()))
    fail("shape ", args.str("shape"), " has too small a vocabulary for a byte-level tokenizer");
  cfg.vocab_size = 256 + int(specials.size());  // every id decodes
  cfg.bos_token_id = -1;
  cfg.eos_token_ids = {256, 258};  // <|endoftext|>, <|im_end|>
  auto dt = dtype_from_flag(args.str("dtype"));
  if (!dt) fail("flag --dtype must be bf16 or f32");
  const std::string out = args.str("out");
  const uint64_t seed = uint64_t(args.integer("seed", 0, kFlagInt64Max));
  const float std_dev = float(args.number("std", 0, 100));
  for (const char* f : {"config.json", "model.safetensors", "model.safetensors.index.json", "tokenizer.json"})
    if (std::filesystem::exists(std::filesystem::path(out) / f) && !args.on("force"))
      fail("flag --out: ", out, " already holds a model (", f, "); give --force to overwrite it");
  save_model_dir(cfg, *random_source(seed, std_dev), out, *dt);
  std::string tok = byte_level_tokenizer(specials).dump(1) + "\n";
  write_file_atomic((std::filesystem::path(out) / "tokenizer.json").string(), tok.data(), tok.size());
  Tokenizer::from_dir(out);  // what we wrote must load
  std::fprintf(stderr, "wrote %s: %s, %.1fM parameters, random weights\n", out.c_str(), cfg.architecture.c_str(),
               double(cfg.num_parameters()) / 1e6);
  return 0;
}

int model_info(int argc, char** argv) {
  Args args;
  args.flag("model", "model directory, or a GGUF file").flag("json", "print JSON", false);
  add_runtime_flags(args);
  if (!args.parse(argc, argv, "model info",
                  "Validates a model (an HF directory or a GGUF file) and prints its shape, how its tensors are\n"
                  "stored and the bytes of weights a decoded token reads."))
    return 0;
  const std::string dir = args.str("model");
  const LoadOptions load = apply_runtime_flags(args);
  auto m = Model::load(dir, load);
  const ModelConfig& c = m->config();
  json j = c.to_json();
  j["parameters"] = c.num_parameters();
  j["max_model_len"] = c.max_position_embeddings;  // with rope scaling: the pretrained length x factor
  const Rope rope = c.rope();
  j["rope_attention_factor"] = rope.scale;
  const auto gguf = find_gguf(dir);
  if (gguf || std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json"))
    j["tokenizer_vocab"] = Tokenizer::from_dir(dir)->vocab_size();
  // How the file stores the tensors (count per type), and what a decoded token reads as held.
  std::map<std::string, int> types;
  int64_t file_bytes = 0;
  if (gguf) {
    const GgufFile f(*gguf);
    for (const GgufTensor& t : f.tensors()) ++types[ggml_type_name(t.type)], file_bytes += int64_t(t.nbytes);
    j["source_format"] = "gguf v" + std::to_string(f.version());
  } else {
    const auto store = TensorStore::open_dir(dir);
    for (const auto& [name, t] : store->tensors())
      ++types[dtype_name(t.dtype)], file_bytes += int64_t(t.nbytes);
    j["source_format"] = "safetensors";
  }
  j["tensor_types"] = types;
  // --quantization: what each matrix became (a K-quant falls back to Q5_0 on rows not a multiple
  // of 256; the output head is kept at 6 or 8 bits).
  std::map<std::string, int> quantized;
  std::vector<std::string> fallbacks;
  const std::string output = output_head_tensor(m->config());
  std::string output_type;
  for (const auto& [name, t] : m->quantized_types()) {
    ++quantized[ggml_type_name(t)];
    if (name == output) output_type = ggml_type_name(t);
    else if (t != *load.quantization) fallbacks.push_back(name);
  }
  if (!quantized.empty()) {
    j["quantized_to"] = quantized;
    j["quantization_fallbacks"] = fallbacks;
    if (!output_type.empty()) j["output_head_type"] = output_type;
  }
  j["tensor_bytes"] = file_bytes;
  // How the matrices a step reads (checkpoint tensors: q, k and v count as three) are held:
  // quantized for the quantized kernels, by type, or in the run's dtype.
  std::map<std::string, int> held;
  auto count = [&](const WeightMatrix& w, int tensors) {
    if (!w.quantized()) return void(held[dtype_name(m->dtype())] += tensors);
    for (int p = 0; p < w.nparts; ++p) ++held[ggml_type_name(w.parts[p].type)];
  };
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& L = m->layer(l);
    count(L.qkv, 3), count(L.o, 1), count(L.gate_up, 2), count(L.down, 1);
  }
  count(m->lm_head(), 1);
  j["held_as"] = held;
  j["quantized_kernel"] = qgemm_kernel_name();
  // Every layer matrix and the lm_head are read once per step (a token reads one row of the embedding).
  const int64_t per_token = int64_t(streamed_weight_bytes(*m));
  j["weight_bytes_per_token"] = per_token;
  if (args.on("json")) {
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf("%s: %s, %d layers, hidden %d, heads %d/%d x %d, vocab %d, %.1fM parameters\n", dir.c_str(),
                c.architecture.c_str(), c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim,
                c.vocab_size, double(c.num_parameters()) / 1e6);
    std::string list;
    for (const auto& [t, n] : types) list += (list.empty() ? "" : ", ") + t + " x " + std::to_string(n);
    std::string held_list;
    bool any_quantized = false;
    for (const auto& [t, n] : held) {
      held_list += (held_list.empty() ? "" : ", ") + t + " x " + std::to_string(n);
      any_quantized = any_quantized || t != dtype_name(m->dtype());
    }
    if (any_quantized) held_list += std::string(" (quantized kernel: ") + qgemm_kernel_name() + ")";
    std::printf("  %s, tensors %s (%.1f MB)\n  held as %s: %.1f MB of weights read per decoded token\n",
                j["source_format"].get<std::string>().c_str(), list.c_str(), double(file_bytes) / 1e6,
                held_list.c_str(), double(per_token) / 1e6);
    if (!quantized.empty()) {
      std::string q;
      for (const auto& [t, n] : quantized) q += (q.empty() ? "" : ", ") + t + " x " + std::to_string(n);
      std::printf("  quantized on load: %s; the output head %s; %zu fell back from %s (rows not a multiple of its block)\n",
                  q.c_str(), output_type.c_str(), fallbacks.size(), ggml_type_name(*load.quantization));
    }
  }
  return 0;
}

// Windows of seq_len + 1 tokens spread evenly over each domain of a tokenized split, at the
// starts `dspark train eval` uses, so the two commands score the same tokens.
int model_perplexity(int argc, char** argv) {
  Args args;
  args.flag("model", "model directory, or a GGUF file")
      .flag("data", "tokenized corpus directory (dspark corpus tokenize)")
      .flag("split", "corpus split", true, "validation")
      .flag("windows", "windows per domain", true, "64")
      .flag("seq-len", "tokens predicted per window", true, "512")
      .flag("agreement-with", "a reference model (loaded in bf16, never quantized): adds the share of positions "
                              "where both models choose the same greedy token")
      .flag("json", "print JSON", false);
  add_runtime_flags(args);
  add_kv_cache_flag(args);
  if (!args.parse(argc, argv, "model perplexity",
                  "Per-domain next-token loss and perplexity of a model, as the engine runs it (any --dtype,\n"
                  "--quantization or GGUF type), on a tokenized corpus split."))
    return 0;
  const std::string dir = args.str("model");
  const int windows = int(args.integer("windows", 1, kFlagIntMax));
  const int seq_len = int(args.integer("seq-len", 1, kFlagIntMax));
  const LoadOptions load = apply_runtime_flags(args);
  const DType kv_dtype = kv_cache_dtype_from_flag(args, load.dtype);
  TokenShards all = TokenShards::open(args.str("data"), args.str("split"));
  const ModelConfig cfg = ModelConfig::from_dir(dir, load.hf_overrides);
  if (seq_len + 1 > cfg.max_position_embeddings)
    fail("flag --seq-len ", seq_len, " needs ", seq_len + 1, " positions; ", dir, " has max_position_embeddings ",
         cfg.max_position_embeddings);
  if (all.vocab_size() > cfg.vocab_size)
    fail(args.str("data"), ": its tokenizer has ", all.vocab_size(), " ids; ", dir, " embeds ", cfg.vocab_size);
  if (const auto tj = std::filesystem::path(dir) / "tokenizer.json"; !find_gguf(dir) && std::filesystem::exists(tj))
    if (crc32_file(tj.string()) != all.tokenizer_crc())
      fail(args.str("data"), " was tokenized with another tokenizer than ", tj.string(), " (CRC32 differs)");
  auto m = Model::load(dir, load);
  std::unique_ptr<Model> base;
  if (const auto ref = args.opt("agreement-with")) {
    base = Model::load(*ref, LoadOptions{DType::BF16});
    if (base->config().vocab_size != m->config().vocab_size)
      fail("flag --agreement-with: ", *ref, " has a vocabulary of ", base->config().vocab_size, ", ", dir, " of ",
           m->config().vocab_size);
  }
  PerplexityScorer scorer(*m, seq_len + 1, 64, kv_dtype);
  std::unique_ptr<PerplexityScorer> base_scorer;
  if (base) base_scorer = std::make_unique<PerplexityScorer>(*base, seq_len + 1);
  json out = json::object();
  std::vector<int32_t> win(size_t(seq_len) + 1);
  for (const auto& [domain, size] : all.domain_sizes()) {
    TokenShards d = TokenShards::open(args.str("data"), args.str("split"), {domain});
    const int64_t span = seq_len + 1;
    double losses = 0;
    int64_t same = 0, predicted = 0;
    int count = 0;
    for (const int64_t start : d.window_starts(span, windows)) {
      d.copy(start, span, win.data());
      const WindowScore s = scorer.score(win);
      losses += s.nll_sum / s.predicted;  // mean per window, averaged over windows as train eval does
      predicted += s.predicted;
      if (base_scorer) {
        const WindowScore b = base_scorer->score(win);
        for (size_t i = 0; i < b.greedy.size(); ++i) same += b.greedy[i] == s.greedy[i];
      }
      ++count;
    }
    if (!count) continue;
    json r = {{"loss", losses / count}, {"perplexity", std::exp(losses / count)}, {"windows", count},
              {"tokens", predicted}};
    if (base_scorer) r["greedy_agreement"] = double(same) / double(predicted);
    out[domain] = r;
  }
  if (out.empty()) fail(args.str("data"), ": no domain of split '", args.str("split"), "' holds ", seq_len + 2, " tokens");
  if (args.on("json")) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("%-14s %8s %11s %8s%s\n", "domain", "loss", "perplexity", "windows",
              base_scorer ? "  greedy agreement" : "");
  for (const auto& [domain, r] : out.items()) {
    std::printf("%-14s %8.4f %11.3f %8d", domain.c_str(), r["loss"].get<double>(), r["perplexity"].get<double>(),
                r["windows"].get<int>());
    if (r.contains("greedy_agreement")) std::printf("  %.4f", r["greedy_agreement"].get<double>());
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int cmd_model(int argc, char** argv) {
  static const Subcommand kWhat[] = {
      {"init", "write a random model of a real shape (with a byte-level tokenizer)", model_init},
      {"info", "validate a model directory and print its shape", model_info},
      {"perplexity", "per-domain loss and perplexity of a model on a tokenized corpus split", model_perplexity},
  };
  return run_subcommand("dspark model", kWhat, argc, argv);
}

}  // namespace dspark
