#include "train/drafter_losses.h"

#include <algorithm>
#include <cmath>

namespace dspark::train {

std::vector<int64_t> sample_anchors(const std::vector<uint8_t>& loss_mask, int n, Rng& rng) {
  std::vector<int64_t> cand;
  for (size_t a = 0; a + 1 < loss_mask.size(); ++a)
    if (loss_mask[a] && loss_mask[a + 1]) cand.push_back(int64_t(a));
  // Partial Fisher-Yates: the first n entries become a uniform sample without replacement.
  const size_t take = std::min(cand.size(), size_t(std::max(n, 0)));
  for (size_t i = 0; i < take; ++i) {
    const size_t j = i + size_t(rng.next() % uint64_t(cand.size() - i));
    std::swap(cand[i], cand[j]);
  }
  cand.resize(take);
  std::sort(cand.begin(), cand.end());
  return cand;
}

Blocks build_blocks(const std::vector<int32_t>& tokens, const std::vector<uint8_t>& loss_mask,
                    const std::vector<int64_t>& anchors, int gamma, int mask_token, BlockLayout layout) {
  const int64_t N = int64_t(anchors.size()), T = int64_t(tokens.size());
  Blocks b;
  auto opt = torch::TensorOptions().dtype(torch::kInt64);
  b.inputs = torch::full({N, gamma}, mask_token, opt);
  b.positions = torch::zeros({N, gamma}, opt);
  b.labels = torch::zeros({N, gamma}, opt);
  b.valid = torch::zeros({N, gamma}, torch::kFloat32);
  b.target_pos = torch::zeros({N, gamma}, opt);
  b.prev = torch::zeros({N, gamma}, opt);
  b.slot = torch::zeros({N, gamma}, opt);
  auto in = b.inputs.accessor<int64_t, 2>();
  auto pos = b.positions.accessor<int64_t, 2>();
  auto lab = b.labels.accessor<int64_t, 2>();
  auto val = b.valid.accessor<float, 2>();
  auto tp = b.target_pos.accessor<int64_t, 2>();
  auto prev = b.prev.accessor<int64_t, 2>();
  auto slot = b.slot.accessor<int64_t, 2>();
  for (int64_t j = 0; j < N; ++j) {
    const int64_t a = anchors[size_t(j)];
    in[j][0] = tokens[size_t(a)];
    bool ok = true;  // the supervised part is a contiguous prefix
    for (int k = 0; k < gamma; ++k) {
      pos[j][k] = a + k;
      // The token slot k predicts, and the position whose target distribution predicts it.
      const int64_t y = layout == BlockLayout::AnchorFirst ? a + k + 1 : a + k;
      const bool predicts = layout == BlockLayout::AnchorFirst || k > 0;
      if (!predicts) continue;
      slot[j][k] = layout == BlockLayout::AnchorFirst ? k + 1 : k;
      ok = ok && y < T && loss_mask[size_t(y)];
      if (!ok) continue;
      lab[j][k] = tokens[size_t(y)];
      val[j][k] = 1.f;
      tp[j][k] = y - 1;
      prev[j][k] = tokens[size_t(y - 1)];  // teacher forcing: the ground-truth previous token
    }
  }
  return b;
}

LossParts block_loss(const torch::Tensor& draft_logits, const torch::Tensor& target_logits, const torch::Tensor& labels,
                     const torch::Tensor& valid, const torch::Tensor& slot, const torch::Tensor& conf_logits,
                     const LossWeights& w) {
  auto weight = torch::exp(-(slot.to(torch::kFloat32) - 1.0) / w.decay) * valid;
  const double wsum = weight.sum().item<double>();
  LossParts out;
  out.weight_sum = wsum;
  const double denom = std::max(wsum, 1e-12);
  auto logq = torch::log_softmax(draft_logits.to(torch::kFloat32), -1);
  auto ce = -logq.gather(1, labels.unsqueeze(1)).squeeze(1);
  auto q = logq.exp();
  auto p = torch::softmax(target_logits.to(torch::kFloat32), -1).detach();
  auto l1 = (q - p).abs().sum(-1);
  out.ce = (weight * ce).sum() / denom;
  out.l1 = (weight * l1).sum() / denom;
  out.total = w.ce * out.ce + w.l1 * out.l1;
  if (conf_logits.defined() && w.conf != 0) {
    auto label = (1.0 - 0.5 * l1).clamp(0.0, 1.0).detach();
    auto bce = torch::binary_cross_entropy_with_logits(conf_logits, label, {}, {}, at::Reduction::None);
    out.conf = (weight * bce).sum() / denom;
    out.total = out.total + w.conf * out.conf;
  }
  return out;
}

}  // namespace dspark::train
