// DFlash (z-lab): the block [anchor, MASK x (B-1)] runs through the backbone in one pass and
// slot k >= 1 predicts the token at p0 + k; the B - 1 drafts are sampled independently.
#include "spec_decode/dflash_backbone.h"
#include "spec_decode/drafters.h"

namespace dspark {

namespace {

class DflashDrafter : public DflashBackboneDrafter {
 public:
  DflashDrafter(const DrafterConfig& cfg, const Model& target, const WeightSource& src, DType dtype,
                std::vector<int32_t> to_target)
      : DflashBackboneDrafter(cfg, target, src, dtype, 0, std::move(to_target)) {}

  SpecMethod method() const override { return SpecMethod::DFlash; }
  int max_draft_tokens() const override { return bb_.config().block_size - 1; }

  // Every job's block runs through the backbone together; slot i + 1 predicts draft i.
  void propose_batch(std::span<const DraftJob> jobs) override {
    draft_logits(jobs, /*first_row=*/1);
    for (size_t j = 0; j < jobs.size(); ++j) {
      if (jobs[j].k <= 0) continue;
      const int64_t Vd = bb_.head(dv_[j]).n;
      for (int i = 0; i < jobs[j].k; ++i) draw_next(jobs[j], logits_[j] + int64_t(i) * Vd, dv_[j]);
    }
  }
};

}  // namespace

std::unique_ptr<Drafter> make_dflash_drafter(const DrafterConfig& cfg, const Model& target,
                                             const WeightSource& src, DType dtype,
                                             std::vector<int32_t> to_target) {
  return std::make_unique<DflashDrafter>(cfg, target, src, dtype, std::move(to_target));
}

}  // namespace dspark
