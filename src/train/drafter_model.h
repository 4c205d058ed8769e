// Drafters in libtorch, with the tensor names the engine loads: the DSpark/DFlash parallel
// backbone (fc + hidden_norm context injection, layers, norm), DSpark's Markov and confidence
// heads, and the EAGLE-3 fused layer. Training-side attention masks reproduce inference.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "spec_decode/drafter_config.h"
#include "train/qwen3_model.h"

namespace dspark::train {

// One draft layer: queries from the block rows; keys/values from the context rows (the fused
// target features, no input norm) followed by the block rows.
struct DraftLayerImpl : DecoderLayerParts {
  explicit DraftLayerImpl(const ModelConfig& c) : DecoderLayerParts(c) {}
  // h [Nb, H] block rows; ctx [T, H]; cos/sin for block [Nb, hd] and context [T, hd];
  // mask [Nb, T + Nb] additive (0 or -inf).
  torch::Tensor forward(const torch::Tensor& h, const torch::Tensor& ctx, const torch::Tensor& bcos,
                        const torch::Tensor& bsin, const torch::Tensor& ccos, const torch::Tensor& csin,
                        const torch::Tensor& mask);
};
TORCH_MODULE(DraftLayer);

struct MarkovHeadImpl : torch::nn::Module {
  MarkovHeadImpl(int64_t vocab, int64_t hidden, int64_t rank, const std::string& type);
  // Logit bias [Nb, V] from previous tokens [Nb] (and, for gated / rnn, the hidden rows and
  // the block length gamma, rows grouped by block).
  torch::Tensor bias(const torch::Tensor& prev, const torch::Tensor& h, int64_t gamma);
  torch::Tensor embed(const torch::Tensor& prev) { return markov_w1(prev); }
  std::string type;
  int64_t rank;
  torch::nn::Embedding markov_w1{nullptr};
  torch::nn::Linear markov_w2{nullptr}, gate_proj{nullptr}, joint_proj{nullptr};
};
TORCH_MODULE(MarkovHead);

struct ConfidenceHeadImpl : torch::nn::Module {
  ConfidenceHeadImpl(int64_t in);
  torch::nn::Linear proj{nullptr};
};
TORCH_MODULE(ConfidenceHead);

// DSpark (and, with no heads, DFlash) drafter.
struct BlockDrafterImpl : torch::nn::Module {
  explicit BlockDrafterImpl(const DrafterConfig& cfg, int64_t target_hidden);
  // features [T, n_taps * Ht] (target layers), block tokens [N, gamma] at positions
  // block_pos [N, gamma], anchors [N] (context visible: positions < anchor). Returns h [N*gamma, H].
  torch::Tensor backbone(const torch::Tensor& features, const torch::Tensor& block_embeds,
                         const torch::Tensor& block_pos, const torch::Tensor& anchors);
  DrafterConfig cfg;
  torch::nn::Linear fc{nullptr};
  RMSNorm hidden_norm{nullptr}, norm{nullptr};
  torch::nn::ModuleList layers;
  MarkovHead markov_head{nullptr};
  ConfidenceHead confidence_head{nullptr};
  torch::Tensor inv_freq;
};
TORCH_MODULE(BlockDrafter);

// The block-attention mask: query (block j, slot k) sees context t < anchor_j and every slot
// of block j; nothing of other blocks. [N*gamma, T + N*gamma], 0 or -inf.
// With window > 0 a block sees only the last `window` context positions before its anchor.
torch::Tensor block_attention_mask(const torch::Tensor& anchors, int64_t T, int64_t gamma, int64_t window = 0);

// The first EAGLE-3 layer: its attention input is [input_norm(embed(x)) ; hidden_norm(g)].
struct Eagle3LayerImpl : torch::nn::Module {
  explicit Eagle3LayerImpl(const ModelConfig& c);
  RMSNorm hidden_norm{nullptr}, input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  Attention self_attn{nullptr};
  MLP mlp{nullptr};
};
TORCH_MODULE(Eagle3Layer);

// EAGLE-3 drafter: layers[0] is an Eagle3Layer; layers[1..] (multi-layer EAGLE-3, as vLLM
// loads it) are DraftLayers used as plain causal decoder layers (input_layernorm, self_attn,
// post_attention_layernorm, mlp).
struct Eagle3DrafterImpl : torch::nn::Module {
  Eagle3DrafterImpl(const DrafterConfig& cfg, int64_t target_hidden, int64_t draft_vocab);
  DrafterConfig cfg;
  torch::nn::Linear fc{nullptr}, lm_head{nullptr};
  torch::nn::ModuleList layers;
  RMSNorm norm{nullptr};
  torch::Tensor inv_freq;
};
TORCH_MODULE(Eagle3Drafter);

std::pair<torch::Tensor, torch::Tensor> rope_at(const torch::Tensor& inv_freq, const torch::Tensor& positions);

}  // namespace dspark::train
