// ModelConfig: the fields of an HF config.json that the engine needs, validated.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dspark {

enum class Arch { Qwen3, Qwen2, Llama };

struct RopeScaling {
  std::string type;  // "" (none), "llama3", "yarn", "linear" or "dynamic"
  float factor = 1.f;
  float low_freq_factor = 1.f;   // llama3
  float high_freq_factor = 4.f;  // llama3
  // llama3 and yarn: the pretrained context (yarn: the config's max_position_embeddings if absent).
  int original_max_position_embeddings = 8192;
  float beta_fast = 32.f, beta_slow = 1.f;  // yarn: the rotations bounding the interpolation ramp
  // yarn: the scale of cos and sin (so attention logits scale by its square). 0: from mscale and
  // mscale_all_dim when both are given, else 0.1 ln(factor) + 1.
  float attention_factor = 0.f;
  float mscale = 0.f, mscale_all_dim = 0.f;
  bool truncate = true;  // yarn: the ramp's ends rounded to whole dimensions
};

// RoPE as the forward applies it: inverse frequencies (float64, so angles stay exact at 128K
// positions) and the scale of cos and sin (YaRN's attention factor; 1 otherwise).
struct Rope {
  std::vector<double> inv_freq;
  double scale = 1.0;
};

struct ModelConfig {
  Arch arch = Arch::Qwen3;
  std::string architecture;  // as written in config.json, e.g. "Qwen3ForCausalLM"
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.f;
  RopeScaling rope_scaling;
  // Per-frequency divisors of RoPE's inverse frequencies (head_dim / 2 values), as a GGUF file's
  // rope_freqs.weight gives them for Llama 3; empty: none.
  std::vector<float> rope_freq_factors;
  bool tie_word_embeddings = false;
  bool qk_norm = false;         // Qwen3's per-head q_norm / k_norm
  bool attention_bias = false;  // Qwen2's q_proj / k_proj / v_proj biases
  // The longest context: the config's max_position_embeddings, or with yarn / linear / dynamic
  // scaling the pretrained length times the factor (as vLLM derives max_model_len).
  int max_position_embeddings = 0;
  int config_max_position_embeddings = 0;  // as written in config.json (to_json writes it back)
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;

  // Parses and validates; errors name `source` (the file) and the field.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source);
  static ModelConfig from_file(const std::string& config_json_path);
  // An HF directory's config.json, or a GGUF file's metadata (see find_gguf).
  // `overrides` (vLLM's --hf-overrides) is merged into the config (JSON merge patch) first.
  static ModelConfig from_dir(const std::string& model_dir, const nlohmann::json& overrides = nullptr);
  nlohmann::json to_json() const;  // HF-style config.json

  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
  // RoPE inverse frequencies (head_dim / 2 values), llama3 scaling applied.
  Rope rope() const;
  // rope().inv_freq in f32 (the trainer's models).
  std::vector<float> rope_inv_freq() const;
  int64_t num_parameters() const;
};

// Shapes of real models, for benchmarks and tests: "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b",
// "qwen3-8b", "llama-3.2-1b", and the tiny "tiny-qwen3" / "tiny-llama". Throws Error listing the known names.
ModelConfig shape_config(const std::string& name);

}  // namespace dspark
