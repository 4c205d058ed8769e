// Flags and set-up shared by the commands that run a model.
#pragma once

#include <memory>
#include <string>
#include <nlohmann/json.hpp>

#include "core/flags.h"
#include "model/model.h"
#include "runtime/generate.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

namespace dspark {

// Declares --dtype, --quantization and --threads.
void add_runtime_flags(Args& args);
// Applies --threads and returns how the model is loaded (--dtype, --quantization).
LoadOptions apply_runtime_flags(const Args& args);

// Declares --kv-cache-dtype (vLLM's names: auto, bf16, fp8, fp8_e4m3, fp8_e5m2).
void add_kv_cache_flag(Args& args);
// The KV cache's element type from --kv-cache-dtype: auto is the weights' dtype (f32 under
// --dtype f32), fp8 is fp8_e4m3.
DType kv_cache_dtype_from_flag(const Args& args, DType weights);

// Refuses a tokenizer with ids the model has no embedding for (naming DIR's two files).
void check_tokenizer_vocab(const Tokenizer& tok, const ModelConfig& cfg, const std::string& dir);

// Declares --temperature, --top-p, --top-k, --min-p and --seed with `defaults`.
void add_sampling_flags(Args& args, const SamplingParams& defaults);
// Reads them, range-checked (each error names its flag).
SamplingParams sampling_from_flags(const Args& args);

// Declares --presence-penalty, --frequency-penalty and --repetition-penalty (all off).
void add_penalty_flags(Args& args);
// Reads them, range-checked (each error names its flag).
LogitsParams penalties_from_flags(const Args& args);
// Declares --response-format JSON (OpenAI's object: {"type": "json_object"} or a json_schema).
void add_response_format_flag(Args& args);
// Sets lp's grammar from it over tok's bytes, with `eos` ending a complete text (nothing without
// the flag); errors name the flag. Returns the flag's object (null without the flag).
nlohmann::json response_format_from_flags(const Args& args, const Tokenizer& tok, std::vector<int32_t> eos,
                                          LogitsParams& lp);

// Declares --max-model-len (prompt + output tokens at most; 0: the config's
// max_position_embeddings) and --max-tokens with `default_max_tokens`.
void add_length_flags(Args& args, const std::string& default_max_tokens);
// Reads them into params (max_model_len is checked against the config when generation starts).
void length_from_flags(const Args& args, GenerateParams& params);
// GenerateParams::validate (the rule each request field has everywhere) for parameters read from
// flags, before any prompt is tokenized: an error names the flag (--max-tokens for max_tokens).
void validate_flag_params(const GenerateParams& params);

}  // namespace dspark
