// Model: the weights of a Qwen3 or Llama decoder, laid out for the kernels.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "kernels/gemm.h"
#include "model/config.h"
#include "model/weight_source.h"
#include "model/weights.h"

namespace dspark {

struct LoadOptions {
  DType dtype = DType::BF16;  // how matrices are held: BF16 (default) or F32
};

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
  const std::vector<float>& rope_inv_freq() const { return inv_freq_; }
  size_t weight_bytes() const { return arena_->bytes_used(); }  // bytes of all matrices held

 private:
  ModelConfig cfg_;
  DType dtype_ = DType::BF16;
  std::string path_;
  std::unique_ptr<WeightArena> arena_;
  std::vector<LayerWeights> layers_;
  WeightMatrix embed_, lm_head_;
  const float* final_norm_ = nullptr;
  std::vector<float> inv_freq_;
};

// The tensor names a checkpoint of this config must contain (HF naming), in load order.
std::vector<std::string> expected_tensor_names(const ModelConfig& cfg);

// Writes an HF directory: config.json and model.safetensors holding the model's weights.
void save_model_dir(const ModelConfig& cfg, const WeightSource& src, const std::string& dir,
                    DType stored_as = DType::BF16);

}  // namespace dspark
