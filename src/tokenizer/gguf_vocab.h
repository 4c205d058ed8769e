// The tokenizer of a GGUF file: its tokenizer.ggml.* metadata as the equivalent tokenizer.json,
// so that one loader reads both (ids equal those of the model's own tokenizer.json).
#pragma once

#include <nlohmann/json.hpp>

#include "core/gguf.h"

namespace dspark::tokenizer_detail {

// Byte-level BPE ("gpt2") only. tokenizer.ggml.pre names the split regex: qwen2, llama-bpe (and
// llama3), gpt-2 (and default). Errors name the file and the key.
nlohmann::json tokenizer_json_from_gguf(const GgufFile& f);

}  // namespace dspark::tokenizer_detail
