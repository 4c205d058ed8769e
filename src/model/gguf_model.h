// A llama.cpp GGUF file as a dspark model: its config from the metadata, its tensors under HF
// names (dequantized on read), for the architectures qwen3 and llama.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "core/gguf.h"
#include "model/config.h"
#include "model/weight_source.h"

namespace dspark {

// The model's config from the file's metadata ("<arch>.block_count", ...), validated as an HF
// config.json is. Errors name the file and the key.
// `overrides` (--hf-overrides) is merged into the HF-style config built from the metadata.
ModelConfig gguf_model_config(const GgufFile& f, const nlohmann::json& overrides = nullptr);

// The GGUF name of an HF tensor name ("model.layers.3.self_attn.q_proj.weight" ->
// "blk.3.attn_q.weight"), or "" when GGUF has none; and back.
std::string gguf_tensor_name(const std::string& hf_name);
std::string hf_tensor_name(const std::string& gguf_name);

// The file's tensors under HF names, dequantized to f32 or bf16 on read. Llama's q/k projections,
// whose rows llama.cpp's converter interleaves for its RoPE, are read back in HF order.
std::unique_ptr<WeightSource> gguf_source(std::shared_ptr<const GgufFile> f, const ModelConfig& cfg);

}  // namespace dspark
