// DFlash (z-lab): the block [anchor, MASK x (B-1)] runs through the backbone in one pass and
// slot k >= 1 predicts the token at p0 + k; the B - 1 drafts are sampled independently.
#include "core/error.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "spec_decode/dflash_backbone.h"
#include "spec_decode/drafters.h"

namespace dspark {

namespace {

class DflashDrafter : public Drafter {
 public:
  DflashDrafter(const DrafterConfig& cfg, const Model& target, const WeightSource& src, DType dtype,
                std::vector<int32_t> to_target)
      : bb_(cfg, target, src, dtype, 0, 1 << 20, std::move(to_target)),
        vocab_(target.config().vocab_size),
        layers_(cfg.target_layer_ids) {}

  SpecMethod method() const override { return SpecMethod::DFlash; }
  const std::vector<int>& target_layers() const override { return layers_; }
  int max_draft_tokens() const override { return bb_.config().block_size - 1; }

  int begin() override { return bb_.new_sequence(); }
  void extend(int seq, std::span<const int32_t>, int pos, const TargetFeatures& feats) override {
    bb_.add_context(seq, feats.data, feats.rows, feats.width, pos);
  }
  void accept(int seq, std::span<const int32_t>, int pos, const TargetFeatures& feats) override {
    bb_.add_context(seq, feats.data, feats.rows, feats.width, pos);
  }
  void end(int seq) override { bb_.free_sequence(seq); }

  void propose(int seq, int32_t anchor, int pos, int k, const DraftSampling& ds, Draft& out) override {
    const DrafterConfig& cfg = bb_.config();
    if (k > cfg.block_size - 1) fail("dflash: ", k, " drafts requested, the block yields ", cfg.block_size - 1);
    out.clear();
    out.vocab = vocab_;
    if (k <= 0) return;
    block_.assign(size_t(cfg.block_size), cfg.mask_token_id);
    block_[0] = anchor;
    const float* h = bb_.run_block(seq, block_, pos);
    const bool dv = bb_.drafts_over_draft_vocab(ds);
    const int64_t H = bb_.hidden(), Vd = bb_.head(dv).n;
    logits_.resize(size_t(k) * size_t(Vd));
    gemm(h + H, k, H, bb_.head(dv), logits_.data(), Vd);  // slots 1..k
    if (ds.dense_q()) out.q.resize(size_t(k) * size_t(vocab_));
    for (int i = 0; i < k; ++i)
      out.tokens.push_back(bb_.draw(logits_.data() + int64_t(i) * Vd, dv, ds, sampler_,
                                    ds.dense_q() ? out.q.data() + int64_t(i) * vocab_ : nullptr));
  }

 private:
  DflashBackbone bb_;
  int vocab_;
  std::vector<int> layers_;
  Sampler sampler_;
  std::vector<int32_t> block_;
  Buffer<float> logits_;
};

}  // namespace

std::unique_ptr<Drafter> make_dflash_drafter(const DrafterConfig& cfg, const Model& target, const WeightSource& src,
                                             DType dtype, std::vector<int32_t> to_target) {
  return std::make_unique<DflashDrafter>(cfg, target, src, dtype, std::move(to_target));
}

}  // namespace dspark
