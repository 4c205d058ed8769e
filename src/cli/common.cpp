#include "cli/common.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/gemm.h"
#include "kernels/quant.h"

namespace dspark {

void add_runtime_flags(Args& args) {
  args.flag("dtype", "weight precision: bf16 or f32 (f32: the exact mode; speculative greedy equals plain in both)", true, "bf16");
  args.flag("quantization",
            "none, q8_0, q4_0, q5_0 or q4_k: quantize the model's matrices on load with llama.cpp's\n"
            "reference rounding (K-quants fall back to Q5_0 on rows not a multiple of 256), held for the\n"
            "quantized kernels (with --dtype f32: dequantized to f32)",
            true, "none");
  args.flag("threads", "compute threads (0: all cores)", true, "0");
  args.flag("hf-overrides", "JSON merged into the model's config.json (or GGUF metadata) before it is read, as vLLM's\n"
                            "--hf-overrides: e.g. '{\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0,\n"
                            "\"original_max_position_embeddings\": 32768}}'");
}

LoadOptions apply_runtime_flags(const Args& args) {
  auto dt = dtype_from_flag(args.str("dtype"));
  if (!dt) fail("flag --dtype must be bf16 or f32, got '", args.str("dtype"), "'");
  LoadOptions load{*dt, std::nullopt};
  const std::string q = args.str("quantization");
  if (q != "none") {
    const auto t = ggml_type_from_name(q);
    if (!t || !can_quantize(*t)) fail("flag --quantization must be none, q8_0, q4_0, q5_0 or q4_k, got '", q, "'");
    load.quantization = *t;
  }
  if (const auto o = args.opt("hf-overrides")) {
    load.hf_overrides = nlohmann::json::parse(*o, nullptr, false);
    if (load.hf_overrides.is_discarded() || !load.hf_overrides.is_object())
      fail("flag --hf-overrides must be a JSON object, got '", *o, "'");
  }
  set_num_threads(int(args.integer("threads", 0, 1024)));
  gemm_backend();  // resolves DSPARK_GEMM now: a bad value is refused before any work
  return load;
}

void add_kv_cache_flag(Args& args) {
  args.flag("kv-cache-dtype",
            "auto (the weights' dtype), bf16, fp8 (= fp8_e4m3), fp8_e4m3 or fp8_e5m2: the KV cache's\n"
            "element type; fp8 keeps an f32 scale per position and KV head (docs/performance.md)",
            true, "auto");
}

DType kv_cache_dtype_from_flag(const Args& args, DType weights) {
  const std::string v = args.str("kv-cache-dtype");
  if (v == "auto") return weights;
  if (v == "bf16" || v == "bfloat16") return DType::BF16;
  if (v == "fp8" || v == "fp8_e4m3") return DType::F8_E4M3;
  if (v == "fp8_e5m2") return DType::F8_E5M2;
  fail("flag --kv-cache-dtype must be auto, bf16, fp8, fp8_e4m3 or fp8_e5m2, got '", v, "'");
}

namespace {
std::string number_text(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}
}  // namespace

void check_tokenizer_vocab(const Tokenizer& tok, const ModelConfig& cfg, const std::string& dir) {
  if (tok.vocab_size() > cfg.vocab_size)
    fail(dir, ": tokenizer.json has ", tok.vocab_size(), " tokens but config.json vocab_size is ", cfg.vocab_size);
}

void add_sampling_flags(Args& args, const SamplingParams& d) {
  args.flag("temperature", "sampling temperature (0: greedy)", true, number_text(d.temperature))
      .flag("top-p", "nucleus sampling mass, in (0, 1]", true, number_text(d.top_p))
      .flag("top-k", "keep only the k most likely tokens (0: off)", true, std::to_string(d.top_k))
      .flag("min-p", "drop tokens below min-p times the most likely one", true, number_text(d.min_p))
      .flag("seed", "random seed", true, std::to_string(d.seed));
}

SamplingParams sampling_from_flags(const Args& args) {
  SamplingParams p;
  p.temperature = float(args.number("temperature", 0, 1e6));
  p.top_p = float(args.number("top-p", 0, 1));
  if (p.top_p <= 0.f) fail("flag --top-p must be in (0, 1], got ", args.str("top-p"));
  p.top_k = int(args.integer("top-k", 0, kFlagIntMax));
  p.min_p = float(args.number("min-p", 0, 1));
  p.seed = uint64_t(args.integer("seed", 0, kFlagInt64Max));
  p.validate();
  return p;
}

void add_penalty_flags(Args& args) {
  args.flag("presence-penalty", "subtracted from the logit of every token the output holds, in [-2, 2]", true, "0")
      .flag("frequency-penalty", "subtracted once per occurrence in the output, in [-2, 2]", true, "0")
      .flag("repetition-penalty",
            "divides positive logits (multiplies negative ones) of tokens in the prompt or output, > 0", true,
            "1");
}

LogitsParams penalties_from_flags(const Args& args) {
  LogitsParams p;
  p.presence_penalty = float(args.number("presence-penalty", -2, 2));
  p.frequency_penalty = float(args.number("frequency-penalty", -2, 2));
  p.repetition_penalty = float(args.number("repetition-penalty", 0, 100));
  if (p.repetition_penalty <= 0.f) fail("flag --repetition-penalty must be > 0, got ", args.str("repetition-penalty"));
  return p;
}

void add_response_format_flag(Args& args) {
  args.flag("response-format",
            "constrain the output as the API's response_format does: '{\"type\": \"json_object\"}' or\n"
            "'{\"type\": \"json_schema\", \"json_schema\": {\"schema\": {...}}}'");
}

nlohmann::json response_format_from_flags(const Args& args, const Tokenizer& tok, std::vector<int32_t> eos,
                                          LogitsParams& lp) {
  const auto rf = args.opt("response-format");
  if (!rf) return nullptr;
  const nlohmann::json j = nlohmann::json::parse(*rf, nullptr, false);
  if (j.is_discarded()) fail("flag --response-format: not valid JSON: ", *rf);
  try {
    lp.grammar = response_format_grammar(j);
  } catch (const Error& e) {
    fail("flag --response-format: ", e.what());
  }
  if (lp.grammar) lp.grammar_vocab = TokenVocab::build(tok, std::move(eos));
  return j;
}

void add_length_flags(Args& args, const std::string& default_max_tokens) {
  args.flag("max-tokens", "tokens to generate at most per prompt (at least 1)", true, default_max_tokens)
      .flag("max-model-len", "prompt + output tokens at most (0: the model's max_position_embeddings)", true, "0");
}

void length_from_flags(const Args& args, GenerateParams& params) {
  params.max_tokens = int(args.integer("max-tokens", 0, kFlagIntMax));
  params.max_model_len = int(args.integer("max-model-len", 0, kFlagIntMax));
}

void validate_flag_params(const GenerateParams& params) {
  try {
    params.validate();
  } catch (const Error& e) {
    std::string flag = e.param();
    std::replace(flag.begin(), flag.end(), '_', '-');
    fail("flag --", flag, ": ", e.what());
  }
}

}  // namespace dspark
