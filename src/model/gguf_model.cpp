#include "model/gguf_model.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/quant.h"

namespace dspark {

namespace {

// HF suffix under "model.layers.N." -> GGUF suffix under "blk.N.".
const std::map<std::string, std::string>& layer_names() {
  static const std::map<std::string, std::string> m = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
  return m;
}

const std::map<std::string, std::string>& top_names() {
  static const std::map<std::string, std::string> m = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
  };
  return m;
}

// "<prefix><digits>.<rest>" -> (layer, rest); nullopt if s has another form.
bool split_layer(const std::string& s, const std::string& prefix, std::string* layer, std::string* rest) {
  if (s.compare(0, prefix.size(), prefix) != 0) return false;
  const size_t dot = s.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) return false;
  *layer = s.substr(prefix.size(), dot - prefix.size());
  if (!std::all_of(layer->begin(), layer->end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
  *rest = s.substr(dot + 1);
  return true;
}

}  // namespace

std::string gguf_tensor_name(const std::string& hf) {
  if (auto it = top_names().find(hf); it != top_names().end()) return it->second;
  std::string layer, rest;
  if (!split_layer(hf, "model.layers.", &layer, &rest)) return "";
  auto it = layer_names().find(rest);
  return it == layer_names().end() ? "" : "blk." + layer + "." + it->second;
}

std::string hf_tensor_name(const std::string& g) {
  for (const auto& [hf, gg] : top_names())
    if (gg == g) return hf;
  std::string layer, rest;
  if (!split_layer(g, "blk.", &layer, &rest)) return "";
  for (const auto& [hf, gg] : layer_names())
    if (gg == rest) return "model.layers." + layer + "." + hf;
  return "";
}

ModelConfig gguf_model_config(const GgufFile& f, const nlohmann::json& overrides) {
  const std::string arch = f.str("general.architecture");
  nlohmann::json j;
  if (arch == "qwen3") {
    j["architectures"] = {"Qwen3ForCausalLM"};
  } else if (arch == "qwen2") {
    j["architectures"] = {"Qwen2ForCausalLM"};
  } else if (arch == "llama") {
    j["architectures"] = {"LlamaForCausalLM"};
  } else {
    fail(f.path(), ": key 'general.architecture' is '", arch, "' (dspark reads qwen3, qwen2 and llama GGUF files)");
  }
  const auto key = [&](const std::string& s) { return f.arch_key(s); };
  const GgufTensor* embd = f.tensor("token_embd.weight");
  if (!embd) fail(f.path(), ": missing tensor 'token_embd.weight'");
  if (embd->ne.size() != 2) fail(f.path(), ": tensor 'token_embd.weight' has shape ", embd->shape_str(), ", not 2-D");
  j["vocab_size"] = embd->ne[1];
  j["hidden_size"] = f.integer(key("embedding_length"));
  j["intermediate_size"] = f.integer(key("feed_forward_length"));
  j["num_hidden_layers"] = f.integer(key("block_count"));
  j["num_attention_heads"] = f.integer(key("attention.head_count"));
  if (f.find(key("attention.head_count_kv"))) j["num_key_value_heads"] = f.integer(key("attention.head_count_kv"));
  if (f.find(key("attention.key_length"))) j["head_dim"] = f.integer(key("attention.key_length"));
  if (f.find(key("attention.layer_norm_rms_epsilon")))
    j["rms_norm_eps"] = f.number(key("attention.layer_norm_rms_epsilon"));
  if (f.find(key("rope.freq_base"))) j["rope_theta"] = f.number(key("rope.freq_base"));
  if (f.find(key("context_length"))) j["max_position_embeddings"] = f.integer(key("context_length"));
  if (f.find(key("rope.scaling.type"))) {
    const std::string t = f.str(key("rope.scaling.type"));
    if (t == "yarn" || t == "linear") {
      nlohmann::json rs = {{"rope_type", t}, {"factor", f.number(key("rope.scaling.factor"))}};
      if (f.find(key("rope.scaling.original_context_length")))
        rs["original_max_position_embeddings"] = f.integer(key("rope.scaling.original_context_length"));
      if (f.find(key("rope.scaling.yarn_beta_fast"))) rs["beta_fast"] = f.number(key("rope.scaling.yarn_beta_fast"));
      if (f.find(key("rope.scaling.yarn_beta_slow"))) rs["beta_slow"] = f.number(key("rope.scaling.yarn_beta_slow"));
      if (f.find(key("rope.scaling.attn_factor"))) rs["attention_factor"] = f.number(key("rope.scaling.attn_factor"));
      j["rope_scaling"] = rs;
    } else if (t != "none") {
      fail(f.path(), ": key '", key("rope.scaling.type"), "' is '", t, "' (dspark reads none, linear and yarn)");
    }
  }
  j["tie_word_embeddings"] = f.tensor("output.weight") == nullptr;
  if (f.find("tokenizer.ggml.bos_token_id")) j["bos_token_id"] = f.integer("tokenizer.ggml.bos_token_id");
  std::vector<int64_t> eos;
  for (const char* k : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"})
    if (f.find(k) && std::find(eos.begin(), eos.end(), f.integer(k)) == eos.end()) eos.push_back(f.integer(k));
  if (!eos.empty()) j["eos_token_id"] = eos;
  if (!overrides.is_null()) j.merge_patch(overrides);
  ModelConfig c = ModelConfig::from_json(j, overrides.is_null() ? f.path() : f.path() + " with --hf-overrides");
  if (const GgufTensor* rf = f.tensor("rope_freqs.weight")) {
    if (rf->type != GgmlType::F32 || rf->ne.size() != 1 || rf->ne[0] != c.head_dim / 2)
      fail(f.path(), ": tensor 'rope_freqs.weight' must be F32 [", c.head_dim / 2, "], not ", ggml_type_name(rf->type), " ",
           rf->shape_str());
    c.rope_freq_factors.resize(size_t(rf->ne[0]));
    std::memcpy(c.rope_freq_factors.data(), rf->data, rf->nbytes);
    for (float x : c.rope_freq_factors)
      if (!(x > 0)) fail(f.path(), ": tensor 'rope_freqs.weight' holds ", x, " (factors must be positive)");
  }
  return c;
}

namespace {

class GgufSource : public WeightSource {
 public:
  GgufSource(std::shared_ptr<const GgufFile> f, const ModelConfig& c) : f_(std::move(f)), cfg_(c) {}

  bool has(const std::string& name) const override {
    const std::string g = gguf_tensor_name(name);
    return !g.empty() && f_->tensor(g);
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const GgufTensor& t : f_->tensors())
      if (const std::string hf = hf_tensor_name(t.name); !hf.empty()) out.push_back(hf);
    return out;
  }
  std::string describe() const override { return f_->path(); }

  std::optional<GgmlType> block_type(const std::string& name, const std::vector<int64_t>& shape) const override {
    const GgufTensor* t = tensor(name, shape);
    if (shape.size() != 2 || t->type == GgmlType::F32 || t->type == GgmlType::F16 || t->type == GgmlType::BF16)
      return std::nullopt;
    return t->type;
  }

  void read_blocks(const std::string& name, const std::vector<int64_t>& shape, uint8_t* dst) const override {
    const GgufTensor* t = tensor(name, shape);
    const size_t row_bytes = ggml_row_bytes(t->type, t->ne[0]);
    const int64_t rows = t->rows();
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + size_t(r) * row_bytes, t->data + size_t(source_row(name, r, rows)) * row_bytes, row_bytes);
  }

  void read(const std::string& name, const std::vector<int64_t>& shape, DType dst_dtype, void* dst,
            int64_t dst_ld) const override {
    const GgufTensor* t = tensor(name, shape);
    const int64_t cols = t->ne[0], rows = t->rows();
    const size_t row_bytes = ggml_row_bytes(t->type, cols), dst_esz = dtype_size(dst_dtype);
    const int64_t chunk = 64;
    parallel_for(int((rows + chunk - 1) / chunk), [&](int task) {
      std::vector<float> tmp(static_cast<size_t>(cols));
      for (int64_t r = task * chunk; r < std::min(rows, (task + 1) * chunk); ++r) {
        dequantize_row(t->type, t->data + size_t(source_row(name, r, rows)) * row_bytes, tmp.data(), cols);
        uint8_t* d = static_cast<uint8_t*>(dst) + size_t(r * dst_ld) * dst_esz;
        if (dst_dtype == DType::BF16) convert_f32_to_bf16(tmp.data(), reinterpret_cast<uint16_t*>(d), size_t(cols));
        else std::memcpy(d, tmp.data(), size_t(cols) * 4);
      }
    });
  }

 private:
  // The GGUF tensor of HF tensor `name`, checked against `shape` (HF order).
  const GgufTensor* tensor(const std::string& name, const std::vector<int64_t>& shape) const {
    const std::string g = gguf_tensor_name(name);
    const GgufTensor* t = g.empty() ? nullptr : f_->tensor(g);
    if (!t) fail(f_->path(), ": missing tensor '", g.empty() ? name : g, "' (", name, ")");
    std::vector<int64_t> want(shape.rbegin(), shape.rend());  // ggml order
    if (t->ne != want) {
      GgufTensor expected;
      expected.ne = want;
      fail(f_->path(), ": tensor '", g, "' has shape ", t->shape_str(), ", expected ", expected.shape_str());
    }
    return t;
  }

  // The file row holding HF row r: llama.cpp's converter interleaves the rows of each head of
  // Llama's q_proj and k_proj, so HF row (head h, half t, index j) sits at file row h, j, t.
  int64_t source_row(const std::string& name, int64_t r, int64_t rows) const {
    const int heads = permuted_heads(name);
    if (!heads) return r;
    const int64_t head_rows = rows / heads, h = r / head_rows, i = r % head_rows, half = head_rows / 2;
    return h * head_rows + (i % half) * 2 + i / half;
  }

  // Llama's q_proj and k_proj rows are interleaved per head by llama.cpp's converter; the number
  // of heads to undo it over, or 0.
  int permuted_heads(const std::string& name) const {
    if (cfg_.arch != Arch::Llama) return 0;
    const auto ends = [&](const char* s) {
      const size_t n = std::strlen(s);
      return name.size() >= n && name.compare(name.size() - n, n, s) == 0;
    };
    if (ends("self_attn.q_proj.weight")) return cfg_.num_heads;
    if (ends("self_attn.k_proj.weight")) return cfg_.num_kv_heads;
    return 0;
  }

  std::shared_ptr<const GgufFile> f_;
  ModelConfig cfg_;
};

}  // namespace

std::unique_ptr<WeightSource> gguf_source(std::shared_ptr<const GgufFile> f, const ModelConfig& cfg) {
  return std::make_unique<GgufSource>(std::move(f), cfg);
}

}  // namespace dspark
