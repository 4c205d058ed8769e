// Model: the weights of a Qwen3 or Llama decoder, laid out for the kernels.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/gguf.h"
#include "kernels/gemm.h"
#include "model/config.h"
#include "model/weight_source.h"
#include "model/weights.h"

namespace dspark {

struct LoadOptions {
  LoadOptions(DType held = DType::BF16, std::optional<GgmlType> quantize = std::nullopt)
      : dtype(held), quantization(quantize) {}
  DType dtype;  // how matrices are held: BF16 (default) or F32
  // Quantize every matrix on load (Q8_0, Q4_0, Q5_0 or Q4_K, llama.cpp's reference rounding) and
  // hold its dequantized values in `dtype`: the quantized model's outputs, at the bf16 model's
  // speed. A K-quant falls back to Q5_0 for matrices whose rows are not a multiple of 256.
  std::optional<GgmlType> quantization;
  // Merged into config.json (or a GGUF file's metadata) before it is read: vLLM's --hf-overrides,
  // e.g. {"rope_scaling": {...}, "max_position_embeddings": N}.
  nlohmann::json hf_overrides;
};

// The checkpoint tensor the output head is read from: the lm_head, or the embedding when tied.
inline const char* output_head_tensor(const ModelConfig& c) {
  return c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
}

class Model {
 public:
  // Loads an HF directory (config.json + safetensors). Errors name the file and tensor.
  static std::unique_ptr<Model> load(const std::string& dir, const LoadOptions& opt = {});
  // Builds a model of the given config from any weight source (e.g. random_source()).
  static std::unique_ptr<Model> build(const ModelConfig& cfg, const WeightSource& src, const LoadOptions& opt);

  const ModelConfig& config() const { return cfg_; }
  DType dtype() const { return dtype_; }
  const std::string& path() const { return path_; }
  const LayerWeights& layer(int i) const { return layers_[size_t(i)]; }
  const WeightMatrix& embed() const { return embed_; }      // [V, H]
  const WeightMatrix& lm_head() const { return lm_head_; }  // [V, H] (the embedding when tied)
  const float* final_norm() const { return final_norm_; }
  const Rope& rope() const { return rope_; }
  size_t weight_bytes() const { return arena_->bytes_used(); }  // bytes of all matrices held
  // With LoadOptions::quantization: the type each matrix was quantized to, by HF tensor name.
  const std::map<std::string, GgmlType>& quantized_types() const { return quantized_; }

 private:
  ModelConfig cfg_;
  DType dtype_ = DType::BF16;
  std::string path_;
  std::unique_ptr<WeightArena> arena_;
  std::vector<LayerWeights> layers_;
  WeightMatrix embed_, lm_head_;
  const float* final_norm_ = nullptr;
  Rope rope_;
  std::map<std::string, GgmlType> quantized_;
};

// The tensor names a checkpoint of this config must contain (HF naming), in load order.
std::vector<std::string> expected_tensor_names(const ModelConfig& cfg);

// Writes an HF directory: config.json and model.safetensors holding the model's weights.
void save_model_dir(const ModelConfig& cfg, const WeightSource& src, const std::string& dir,
                    DType stored_as = DType::BF16);

}  // namespace dspark
