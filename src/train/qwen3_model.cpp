#include "train/qwen3_model.h"

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/mmap_file.h"
#include "core/safetensors.h"

namespace dspark::train {

namespace fs = std::filesystem;
using torch::indexing::Slice;

RMSNormImpl::RMSNormImpl(int64_t dim, double e) : eps(e) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  auto xf = x.to(torch::kFloat32);
  auto r = xf * torch::rsqrt(xf.pow(2).mean(-1, true) + eps);
  return (r * weight).to(x.scalar_type());
}

torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  auto x1 = x.index({"...", Slice(0, half)});
  auto x2 = x.index({"...", Slice(half, torch::indexing::None)});
  auto rotated = torch::cat({-x2, x1}, -1);
  return x * cos + rotated * sin;
}

AttentionImpl::AttentionImpl(const ModelConfig& c)
    : n_heads(c.num_heads), n_kv(c.num_kv_heads), head_dim(c.head_dim), qk_norm(c.qk_norm) {
  auto lin = [](int64_t in, int64_t out, bool bias = false) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
  };
  q_proj = register_module("q_proj", lin(c.hidden_size, c.q_dim(), c.attention_bias));
  k_proj = register_module("k_proj", lin(c.hidden_size, c.kv_dim(), c.attention_bias));
  v_proj = register_module("v_proj", lin(c.hidden_size, c.kv_dim(), c.attention_bias));
  o_proj = register_module("o_proj", lin(c.q_dim(), c.hidden_size));
  if (qk_norm) {
    q_norm = register_module("q_norm", RMSNorm(c.head_dim, c.rms_norm_eps));
    k_norm = register_module("k_norm", RMSNorm(c.head_dim, c.rms_norm_eps));
  }
}

namespace {
// y [..., n * hd] viewed as [..., n, hd].
torch::Tensor split_heads(const torch::Tensor& y, int64_t n, int64_t hd) {
  std::vector<int64_t> shape = y.sizes().vec();
  shape.back() = n;
  shape.push_back(hd);
  return y.view(shape);
}
}  // namespace

torch::Tensor AttentionImpl::q_heads(const torch::Tensor& x) {
  auto q = split_heads(q_proj(x), n_heads, head_dim);
  return qk_norm ? q_norm(q) : q;
}

std::pair<torch::Tensor, torch::Tensor> AttentionImpl::kv_heads(const torch::Tensor& x) {
  auto k = split_heads(k_proj(x), n_kv, head_dim);
  return {qk_norm ? k_norm(k) : k, split_heads(v_proj(x), n_kv, head_dim)};
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                     const torch::Tensor& mask) {
  const int64_t B = x.size(0), T = x.size(1);
  auto q = q_heads(x);
  auto [k, v] = kv_heads(x);
  q = apply_rope(q.transpose(1, 2), cos, sin);
  k = apply_rope(k.transpose(1, 2), cos, sin);
  v = v.transpose(1, 2);
  if (n_heads != n_kv) {
    k = k.repeat_interleave(n_heads / n_kv, 1);
    v = v.repeat_interleave(n_heads / n_kv, 1);
  }
  // The softmax scale goes on q (B*H*T*D elements) rather than on the scores (B*H*T*T), which
  // saves a pass over the largest activation forward and backward. With a power-of-two scale
  // (head_dim 64, 256, ...) the scores are bit-identical either way. The mask is added in place:
  // the product's output is not saved for its backward.
  auto scores = torch::matmul(q * (1.0 / std::sqrt(double(head_dim))), k.transpose(-2, -1));
  if (mask.defined()) scores.add_(mask);
  auto probs = torch::softmax(scores.to(torch::kFloat32), -1).to(v.scalar_type());
  auto o = torch::matmul(probs, v).transpose(1, 2).reshape({B, T, n_heads * head_dim});
  return o_proj(o);
}

MLPImpl::MLPImpl(const ModelConfig& c) {
  auto lin = [](int64_t in, int64_t out) { return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)); };
  gate_proj = register_module("gate_proj", lin(c.hidden_size, c.intermediate_size));
  up_proj = register_module("up_proj", lin(c.hidden_size, c.intermediate_size));
  down_proj = register_module("down_proj", lin(c.intermediate_size, c.hidden_size));
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x) { return down_proj(torch::silu(gate_proj(x)) * up_proj(x)); }

DecoderLayerParts::DecoderLayerParts(const ModelConfig& c) {
  input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  self_attn = register_module("self_attn", Attention(c));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  mlp = register_module("mlp", MLP(c));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                        const torch::Tensor& mask) {
  auto h = x + self_attn(input_layernorm(x), cos, sin, mask);
  return h + mlp(post_attention_layernorm(h));
}

BodyImpl::BodyImpl(const ModelConfig& c) {
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(c.vocab_size, c.hidden_size));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int i = 0; i < c.num_layers; ++i) layers->push_back(DecoderLayer(c));
  norm = register_module("norm", RMSNorm(c.hidden_size, c.rms_norm_eps));
}

CausalLMImpl::CausalLMImpl(const ModelConfig& c) : cfg_(c) {
  model = register_module("model", Body(c));
  if (!c.tie_word_embeddings)
    lm_head = register_module("lm_head", torch::nn::Linear(torch::nn::LinearOptions(c.hidden_size, c.vocab_size).bias(false)));
  rope_scale_ = c.rope().scale;
  auto inv = c.rope_inv_freq();
  inv_freq_ = register_buffer("inv_freq", torch::from_blob(inv.data(), {int64_t(inv.size())}, torch::kFloat32).clone());
}

torch::Tensor CausalLMImpl::lm_head_weight() const {
  return cfg_.tie_word_embeddings ? model->embed_tokens->weight : lm_head->weight;
}

std::pair<torch::Tensor, torch::Tensor> CausalLMImpl::rope_tables(int64_t T) const {
  // position * inv_freq in f32, as the engine computes it.
  auto pos = torch::arange(T, inv_freq_.options()).unsqueeze(1);
  auto freqs = pos * inv_freq_.unsqueeze(0);
  auto emb = torch::cat({freqs, freqs}, -1);
  return {emb.cos() * rope_scale_, emb.sin() * rope_scale_};  // YaRN's attention factor (1 otherwise)
}

LmOutput CausalLMImpl::forward(const torch::Tensor& tokens, bool want_logits, const std::vector<int>& tap_layers) {
  const int64_t T = tokens.size(1);
  auto [cos, sin] = rope_tables(T);
  auto mask = torch::full({T, T}, -std::numeric_limits<float>::infinity(), inv_freq_.options()).triu(1);
  LmOutput out;
  auto h = model->embed_tokens(tokens);
  auto tap = [&](int id) {
    for (int t : tap_layers)
      if (t == id) out.taps.push_back(h);
  };
  tap(-1);
  int i = 0;
  for (auto& layer : *model->layers) {
    h = layer->as<DecoderLayer>()->forward(h, cos, sin, mask);
    tap(i++);
  }
  out.final_hidden = model->norm(h);
  if (want_logits) out.logits = torch::matmul(out.final_hidden, lm_head_weight().t());
  return out;
}

void CausalLMImpl::init_weights(double std, uint64_t seed) {
  torch::NoGradGuard ng;
  auto gen = at::detail::createCPUGenerator(seed);
  for (auto& p : named_parameters()) {
    if (p.value().dim() == 1) p.value().fill_(1.0);
    else p.value().normal_(0.0, std, gen);
  }
}

int64_t CausalLMImpl::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

void save_hf(CausalLM& model, const std::string& dir, DType stored_as, const std::string& tokenizer_json) {
  fs::create_directories(dir);
  SafetensorsWriter w;
  for (const auto& p : model->named_parameters()) {
    auto t = p.value().detach().to(torch::kFloat32).contiguous();
    std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
    w.add_f32(p.key(), shape, t.data_ptr<float>(), t.dim() == 1 ? DType::F32 : stored_as);
  }
  w.write((fs::path(dir) / "model.safetensors").string());
  nlohmann::json cj = model->config().to_json();
  cj["torch_dtype"] = stored_as == DType::BF16 ? "bfloat16" : "float32";
  std::string text = cj.dump(2) + "\n";
  write_file_atomic((fs::path(dir) / "config.json").string(), text.data(), text.size());
  if (!tokenizer_json.empty()) {
    fs::copy_file(tokenizer_json, fs::path(dir) / "tokenizer.json", fs::copy_options::overwrite_existing);
    fs::path tc = fs::path(tokenizer_json).parent_path() / "tokenizer_config.json";
    if (fs::exists(tc)) fs::copy_file(tc, fs::path(dir) / "tokenizer_config.json", fs::copy_options::overwrite_existing);
  }
}

void load_hf_weights(CausalLM& model, const std::string& dir) { load_parameters(*model, dir); }

void load_parameters(torch::nn::Module& model, const std::string& dir) {
  auto store = TensorStore::open_dir(dir);
  torch::NoGradGuard ng;
  for (auto& p : model.named_parameters()) {
    std::vector<int64_t> shape(p.value().sizes().begin(), p.value().sizes().end());
    const TensorView& t = store->get(p.key(), shape);
    std::vector<float> buf(static_cast<size_t>(t.numel()));
    convert_to_f32(t.dtype, t.data, buf.data(), buf.size());
    p.value().copy_(torch::from_blob(buf.data(), p.value().sizes(), torch::kFloat32));
  }
}

}  // namespace dspark::train
