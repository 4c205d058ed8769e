#include "train/drafter_model.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace dspark::train {

using torch::indexing::Slice;

std::pair<torch::Tensor, torch::Tensor> rope_at(const torch::Tensor& inv_freq, const torch::Tensor& positions) {
  auto freqs = positions.to(torch::kFloat32).unsqueeze(-1) * inv_freq;  // [..., hd/2]
  auto emb = torch::cat({freqs, freqs}, -1);
  return {emb.cos(), emb.sin()};
}

torch::Tensor DraftLayerImpl::forward(const torch::Tensor& h, const torch::Tensor& ctx, const torch::Tensor& bcos,
                                      const torch::Tensor& bsin, const torch::Tensor& ccos, const torch::Tensor& csin,
                                      const torch::Tensor& mask) {
  auto& at = *self_attn;
  const int64_t Nb = h.size(0), nh = at.n_heads, nkv = at.n_kv, hd = at.head_dim;
  auto a = input_layernorm(h);
  auto q = at.q_heads(a);
  auto [kb, vb] = at.kv_heads(a);
  auto [kc, vc] = at.kv_heads(ctx);
  // [heads, rows, hd]; RoPE at each row's own position.
  q = apply_rope(q.transpose(0, 1), bcos, bsin);
  kb = apply_rope(kb.transpose(0, 1), bcos, bsin);
  kc = apply_rope(kc.transpose(0, 1), ccos, csin);
  auto k = torch::cat({kc, kb}, 1);
  auto v = torch::cat({vc.transpose(0, 1), vb.transpose(0, 1)}, 1);
  if (nh != nkv) {
    k = k.repeat_interleave(nh / nkv, 0);
    v = v.repeat_interleave(nh / nkv, 0);
  }
  auto scores = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(hd))) + mask;
  auto probs = torch::softmax(scores.to(torch::kFloat32), -1).to(v.scalar_type());
  auto o = torch::matmul(probs, v).transpose(0, 1).reshape({Nb, nh * hd});
  auto x = h + at.o_proj(o);
  return x + mlp(post_attention_layernorm(x));
}

MarkovHeadImpl::MarkovHeadImpl(int64_t vocab, int64_t hidden, int64_t r, const std::string& t) : type(t), rank(r) {
  markov_w1 = register_module("markov_w1", torch::nn::Embedding(vocab, r));
  markov_w2 = register_module("markov_w2", torch::nn::Linear(torch::nn::LinearOptions(r, vocab).bias(false)));
  if (type == "gated") gate_proj = register_module("gate_proj", torch::nn::Linear(hidden + r, r));
  else if (type == "rnn") joint_proj = register_module("joint_proj", torch::nn::Linear(2 * r + hidden, 3 * r));
}

torch::Tensor MarkovHeadImpl::bias(const torch::Tensor& prev, const torch::Tensor& h, int64_t gamma) {
  auto e = markov_w1(prev);  // [Nb, r]
  if (type == "gated") return markov_w2(torch::sigmoid(gate_proj(torch::cat({h, e}, -1))) * e);
  if (type == "rnn") {
    // Teacher-forced recurrence along each block: s_k = sig(g) s_{k-1} + (1 - sig(g)) tanh(c).
    const int64_t N = prev.size(0) / gamma;
    auto e3 = e.view({N, gamma, rank});
    auto h3 = h.view({N, gamma, h.size(-1)});
    auto s = torch::zeros({N, rank}, e.options());
    std::vector<torch::Tensor> outs;
    for (int64_t k = 0; k < gamma; ++k) {
      auto j = joint_proj(torch::cat({s, e3.select(1, k), h3.select(1, k)}, -1));
      auto parts = j.chunk(3, -1);
      auto g = torch::sigmoid(parts[0]);
      s = g * s + (1 - g) * torch::tanh(parts[1]);
      outs.push_back(torch::tanh(parts[2]));
    }
    return markov_w2(torch::stack(outs, 1).view({N * gamma, rank}));
  }
  return markov_w2(e);
}

ConfidenceHeadImpl::ConfidenceHeadImpl(int64_t in) { proj = register_module("proj", torch::nn::Linear(in, 1)); }

BlockDrafterImpl::BlockDrafterImpl(const DrafterConfig& c, int64_t target_hidden) : cfg(c) {
  const ModelConfig& L = c.layers;
  const int64_t H = L.hidden_size, feat = int64_t(c.target_layer_ids.size()) * target_hidden;
  fc = register_module("fc", torch::nn::Linear(torch::nn::LinearOptions(feat, H).bias(false)));
  hidden_norm = register_module("hidden_norm", RMSNorm(H, L.rms_norm_eps));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int i = 0; i < L.num_layers; ++i) layers->push_back(DraftLayer(L));
  norm = register_module("norm", RMSNorm(H, L.rms_norm_eps));
  if (c.method == SpecMethod::DSpark && c.markov_rank > 0)
    markov_head = register_module("markov_head", MarkovHead(L.vocab_size, H, c.markov_rank, c.markov_head_type));
  if (c.method == SpecMethod::DSpark && c.confidence_head)
    confidence_head =
        register_module("confidence_head", ConfidenceHead(H + (c.confidence_with_markov ? c.markov_rank : 0)));
  if (L.rope().scale != 1.0) fail("drafter layer config: YaRN's attention factor is not trained (rope_scaling of type yarn)");
  auto inv = L.rope_inv_freq();
  inv_freq = register_buffer("inv_freq", torch::from_blob(inv.data(), {int64_t(inv.size())}, torch::kFloat32).clone());
}

torch::Tensor block_attention_mask(const torch::Tensor& anchors, int64_t T, int64_t gamma, int64_t window) {
  const int64_t N = anchors.size(0);
  const auto i64 = anchors.options().dtype(torch::kInt64);
  auto ctx_pos = torch::arange(T, i64).unsqueeze(0);                               // [1, T]
  auto anchor_rows = anchors.repeat_interleave(gamma).unsqueeze(1);                // [N*g, 1]
  auto ctx_visible = ctx_pos < anchor_rows;                                        // [N*g, T]
  if (window > 0) ctx_visible = ctx_visible & (ctx_pos >= anchor_rows - window);
  auto block_id = torch::arange(N, i64).repeat_interleave(gamma);                  // [N*g]
  auto blk_visible = block_id.unsqueeze(1) == block_id.unsqueeze(0);               // [N*g, N*g]
  auto visible = torch::cat({ctx_visible, blk_visible}, 1);
  auto mask = torch::zeros(visible.sizes(), anchors.options().dtype(torch::kFloat32));
  return mask.masked_fill(visible.logical_not(), -std::numeric_limits<float>::infinity());
}

torch::Tensor BlockDrafterImpl::backbone(const torch::Tensor& features, const torch::Tensor& block_embeds,
                                         const torch::Tensor& block_pos, const torch::Tensor& anchors) {
  const int64_t T = features.size(0), N = block_pos.size(0), gamma = block_pos.size(1);
  auto ctx = hidden_norm(fc(features));  // computed once, shared by every layer
  auto [ccos, csin] = rope_at(inv_freq, torch::arange(T, block_pos.options().dtype(torch::kInt64)));
  auto [bcos, bsin] = rope_at(inv_freq, block_pos.reshape({-1}));
  auto mask = block_attention_mask(anchors, T, gamma, cfg.sliding_window);
  auto h = block_embeds.reshape({N * gamma, -1});
  for (auto& layer : *layers) h = layer->as<DraftLayer>()->forward(h, ctx, bcos, bsin, ccos, csin, mask);
  return norm(h);
}

Eagle3LayerImpl::Eagle3LayerImpl(const ModelConfig& c) {
  ModelConfig twice = c;  // q/k/v take [embed ; hidden] (2H) inputs
  hidden_norm = register_module("hidden_norm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  self_attn = register_module("self_attn", Attention(c));
  // Replace the projections' input size by 2H.
  auto lin = [](int64_t in, int64_t out) { return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)); };
  self_attn->q_proj = self_attn->replace_module("q_proj", lin(2 * c.hidden_size, c.q_dim()));
  self_attn->k_proj = self_attn->replace_module("k_proj", lin(2 * c.hidden_size, c.kv_dim()));
  self_attn->v_proj = self_attn->replace_module("v_proj", lin(2 * c.hidden_size, c.kv_dim()));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  mlp = register_module("mlp", MLP(c));
}

Eagle3DrafterImpl::Eagle3DrafterImpl(const DrafterConfig& c, int64_t target_hidden, int64_t draft_vocab) : cfg(c) {
  const ModelConfig& L = c.layers;
  const int64_t H = L.hidden_size, feat = int64_t(c.target_layer_ids.size()) * target_hidden;
  fc = register_module("fc", torch::nn::Linear(torch::nn::LinearOptions(feat, H).bias(false)));
  layers = register_module("layers", torch::nn::ModuleList());
  // Layer 0 reads [embed ; hidden] (2H); later layers are plain decoder layers over its output.
  layers->push_back(Eagle3Layer(L));
  for (int i = 1; i < L.num_layers; ++i) layers->push_back(DraftLayer(L));
  norm = register_module("norm", RMSNorm(H, L.rms_norm_eps));
  lm_head = register_module("lm_head", torch::nn::Linear(torch::nn::LinearOptions(H, draft_vocab).bias(false)));
  if (L.rope().scale != 1.0) fail("drafter layer config: YaRN's attention factor is not trained (rope_scaling of type yarn)");
  auto inv = L.rope_inv_freq();
  inv_freq = register_buffer("inv_freq", torch::from_blob(inv.data(), {int64_t(inv.size())}, torch::kFloat32).clone());
}

}  // namespace dspark::train
