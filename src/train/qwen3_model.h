// Qwen3 (and Llama) decoder in libtorch, with HF parameter names, matching dspark's engine.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"

namespace dspark::train {

struct RMSNormImpl : torch::nn::Module {
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
  double eps;
};
TORCH_MODULE(RMSNorm);

struct AttentionImpl : torch::nn::Module {
  explicit AttentionImpl(const ModelConfig& c);
  // x [B, T, H]; cos/sin [T, hd]; mask [T, T] additive (or undefined for none) -> [B, T, H]
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask);
  // Rows x [..., H] projected to heads: q [..., n_heads, head_dim]; k and v [..., n_kv, head_dim].
  // q and k are normed with qk_norm. (No RoPE.)
  torch::Tensor q_heads(const torch::Tensor& x);
  std::pair<torch::Tensor, torch::Tensor> kv_heads(const torch::Tensor& x);
  int64_t n_heads, n_kv, head_dim;
  bool qk_norm;
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};
};
TORCH_MODULE(Attention);

struct MLPImpl : torch::nn::Module {
  explicit MLPImpl(const ModelConfig& c);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(MLP);

// The modules of a pre-norm decoder layer, under their HF names: the target's layer and the
// DSpark/DFlash draft layer run them, each its own way.
struct DecoderLayerParts : torch::nn::Module {
  explicit DecoderLayerParts(const ModelConfig& c);
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  Attention self_attn{nullptr};
  MLP mlp{nullptr};
};

struct DecoderLayerImpl : DecoderLayerParts {
  explicit DecoderLayerImpl(const ModelConfig& c) : DecoderLayerParts(c) {}
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask);
};
TORCH_MODULE(DecoderLayer);

// The "model." part of an HF causal LM: embeddings, layers, final norm.
struct BodyImpl : torch::nn::Module {
  explicit BodyImpl(const ModelConfig& c);
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers;
  RMSNorm norm{nullptr};
};
TORCH_MODULE(Body);

struct LmOutput {
  torch::Tensor logits;               // [B, T, V] (when requested)
  torch::Tensor final_hidden;         // [B, T, H] after the final norm
  std::vector<torch::Tensor> taps;    // per requested layer id: [B, T, H] (-1 = embeddings)
};

class CausalLMImpl : public torch::nn::Module {
 public:
  explicit CausalLMImpl(const ModelConfig& c);
  // tokens [B, T] (int64), positions start at 0. Causal attention.
  LmOutput forward(const torch::Tensor& tokens, bool logits = true, const std::vector<int>& tap_layers = {});
  torch::Tensor lm_head_weight() const;  // [V, H] (the embedding when tied)
  // Initialises weights like HF (normal(0, std) for matrices, ones for norms).
  void init_weights(double std, uint64_t seed);
  const ModelConfig& config() const { return cfg_; }
  // Rotary tables for positions [0, T): cos, sin [T, head_dim] (HF rotate_half layout).
  std::pair<torch::Tensor, torch::Tensor> rope_tables(int64_t T) const;
  int64_t num_parameters() const;

  Body model{nullptr};
  torch::nn::Linear lm_head{nullptr};  // absent when tied

 private:
  ModelConfig cfg_;
  torch::Tensor inv_freq_;  // [hd/2]
  double rope_scale_ = 1.0;
};
TORCH_MODULE(CausalLM);

// Applies RoPE in the HF rotate_half convention. x [B, heads, T, hd], cos/sin [T, hd].
torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// Writes an HF directory (config.json, model.safetensors with `stored_as` matrices) that
// dspark's engine loads; copies tokenizer.json (and tokenizer_config.json) if given.
void save_hf(CausalLM& model, const std::string& dir, DType stored_as, const std::string& tokenizer_json = "");
// Loads weights of an HF directory into `model` (shapes must match the config).
void load_hf_weights(CausalLM& model, const std::string& dir);
// Loads every parameter of `model` from the tensor of the same name in the safetensors of `dir`
// (shapes must match; any stored dtype is converted to f32).
void load_parameters(torch::nn::Module& model, const std::string& dir);

}  // namespace dspark::train
