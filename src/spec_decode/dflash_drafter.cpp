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
  void accept_batch(std::span<const AcceptJob> jobs) override { bb_.add_contexts(jobs); }
  void end(int seq) override { bb_.free_sequence(seq); }

  void propose(int seq, int32_t anchor, int pos, int k, const DraftSampling& ds,
               Draft& out) override {
    const DraftJob job{seq, anchor, pos, k, ds, &out};
    propose_batch(std::span<const DraftJob>(&job, 1));
  }

  // Every job's block runs through the backbone together; slot i + 1 predicts draft i.
  void propose_batch(std::span<const DraftJob> jobs) override {
    bb_.draft_logits(jobs, /*first_row=*/1, logits_, hidden_, dv_);
    for (size_t j = 0; j < jobs.size(); ++j) {
      const DraftJob& job = jobs[j];
      if (job.k <= 0) continue;
      const int64_t Vd = bb_.head(dv_[j]).n;
      Draft& out = *job.out;
      if (job.sampling.dense_q()) out.q.resize(size_t(job.k) * size_t(vocab_));
      for (int i = 0; i < job.k; ++i)
        out.tokens.push_back(
            bb_.draw(logits_[j] + int64_t(i) * Vd, dv_[j], job.sampling, sampler_,
                     job.sampling.dense_q() ? out.q.data() + int64_t(i) * vocab_ : nullptr));
    }
  }

 private:
  DflashBackbone bb_;
  int vocab_;
  std::vector<int> layers_;
  Sampler sampler_;
  std::vector<float*> logits_;
  std::vector<const float*> hidden_;
  std::vector<bool> dv_;
};

}  // namespace

std::unique_ptr<Drafter> make_dflash_drafter(const DrafterConfig& cfg, const Model& target,
                                             const WeightSource& src, DType dtype,
                                             std::vector<int32_t> to_target) {
  return std::make_unique<DflashDrafter>(cfg, target, src, dtype, std::move(to_target));
}

}  // namespace dspark
