// The parallel backbone shared by DSpark and DFlash: target features fused by `fc` and
// `hidden_norm` are injected as K/V of every draft layer (context rows only, kept in the
// draft KV cache); a block of [anchor, MASK x (n-1)] runs through the layers in one pass,
// attending bidirectionally to itself and to all context before it.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/buffer.h"
#include "model/kv_cache.h"
#include "model/layer.h"
#include "model/model.h"
#include "model/weight_source.h"
#include "spec_decode/drafter.h"
#include "spec_decode/drafter_config.h"

namespace dspark {

class DflashBackbone {
 public:
  // Reads fc, hidden_norm, layers.*, norm (and embed_tokens / lm_head when the checkpoint has
  // them; otherwise the target's are used) from `src`; `arena_extra` bytes are reserved for
  // the caller's own matrices (e.g. the Markov head).
  // With a draft vocabulary (`to_target[i]`: the target id of draft id i, see draft_vocab_map)
  // the head's rows at those ids are copied at load unless the checkpoint's head holds only them
  // (cfg.keeps_full_head false).
  DflashBackbone(const DrafterConfig& cfg, const Model& target, const WeightSource& src,
                 DType dtype, size_t arena_extra, int64_t kv_tokens,
                 std::vector<int32_t> to_target = {});

  const DrafterConfig& config() const { return cfg_; }
  WeightArena& arena() { return *arena_; }
  const WeightMatrix& embed() const { return *embed_; }
  int hidden() const { return cfg_.layers.hidden_size; }
  int target_vocab() const { return target_vocab_; }
  bool has_full_head() const { return full_head_ != nullptr; }
  bool has_draft_vocab() const { return draft_head_ != nullptr; }
  // Whether a round drafts over the draft vocabulary: whenever there is one, greedy or sampled.
  // A sampled round's q is then zero outside it, and verification stays exact: a rejection
  // samples from the residual max(p - q, 0), which holds every token the drafter cannot propose
  // (docs/speculative.md, "Draft vocabulary"). The full head, when the checkpoint keeps it, is
  // not used for drafting.
  bool drafts_over_draft_vocab(const DraftSampling&) const { return draft_head_ != nullptr; }
  // The head of the draft vocabulary (draft_vocab true) or of the target's; its rows are the
  // logits.
  const WeightMatrix& head(bool draft_vocab) const {
    return draft_vocab ? *draft_head_ : *full_head_;
  }
  // Draft id -> target id (the identity for the full head).
  int32_t to_target(bool draft_vocab, int id) const {
    return draft_vocab ? to_target_[size_t(id)] : id;
  }
  // One draft from the logits z of head(draft_vocab): the argmax, or (ds.dense_q()) a draw from
  // the sampling distribution, whose target-vocabulary form is written to q_row (zero outside the
  // draft vocabulary). Returns the target id.
  int32_t draw(const float* z, bool draft_vocab, const DraftSampling& ds, Sampler& sampler,
               float* q_row);
  int32_t draw_processed(const float* z, bool draft_vocab, const DraftSampling& ds,
                         Sampler& sampler, float* q_row);

  int new_sequence();
  void free_sequence(int seq);
  // Appends each job's context rows, at positions [pos, pos + feats.rows) (features: taps
  // concatenated; `committed`: their tokens), in one pass (one fc product, one injection per
  // layer).
  void add_contexts(std::span<const AcceptJob> jobs);
  // Prefix caching of the context rows (KvCache::attach_prefix): rows are cached under their
  // tokens as they are added.
  void enable_prefix_caching() { kv_.set_prefix_caching(true); }
  int attach_prefix(int seq, std::span<const int32_t> tokens, int max_len) {
    return kv_.attach_prefix(seq, tokens, max_len);
  }
  // One drafting round for many sequences in one pass: each job's block [anchor, MASK x (n-1)]
  // (n = block_size) at the job's position runs through the layers together with the others',
  // then the head scores rows [first_row, first_row + job.k) of each block, one matrix product
  // per head for the whole batch. logits[j] points to job j's k rows of head(dv[j]) logits
  // (writable; valid until the next call; each job's draft is cleared), hidden[j] to the final-normed hidden states of those
  // rows ([k, H]), dv[j] whether it drafts over the draft vocabulary. Jobs with k = 0 get null.
  void draft_logits(std::span<const DraftJob> jobs, int first_row, std::vector<float*>& logits,
                    std::vector<const float*>& hidden, std::vector<bool>& dv);

 private:
  DrafterConfig cfg_;
  std::unique_ptr<WeightArena> arena_;
  WeightMatrix fc_;
  const float* hidden_norm_ = nullptr;
  const float* norm_ = nullptr;
  std::vector<LayerWeights> layers_;
  WeightMatrix own_embed_, own_lm_head_, draft_lm_head_;
  const WeightMatrix* embed_ = nullptr;
  const WeightMatrix* full_head_ =
      nullptr;  // [target vocab, H]; null when only the draft one exists
  const WeightMatrix* draft_head_ = nullptr;  // [draft vocab, H]; null without a draft vocabulary
  Rope rope_;
  int target_vocab_ = 0;
  std::vector<int32_t> to_target_;
  Buffer<float> qd_, full_;
  KvCache kv_;
  LayerScratch scratch_;
  Buffer<float> ctx_, h_, out_, head_in_[2], head_out_[2];
  std::vector<int32_t> block_tokens_;
  std::vector<SeqRows::Block> blocks_;
  Buffer<float> ctx_in_;
  SeqRows rows_;
};

// The Drafter glue DSpark and DFlash share around the backbone: the target layers it reads,
// sequences, context rows (the prompt's and each round's accepted rows, batched), propose() as a
// batch of one, and the draw of each draft. A method drafts a batch in propose_batch, from the
// logits draft_logits leaves in logits_ / hidden_ / dv_.
class DflashBackboneDrafter : public Drafter {
 public:
  DflashBackboneDrafter(const DrafterConfig& cfg, const Model& target, const WeightSource& src,
                        DType dtype, size_t arena_extra, std::vector<int32_t> to_target);

  const std::vector<int>& target_layers() const override { return bb_.config().target_layer_ids; }
  int begin() override { return bb_.new_sequence(); }
  void extend(int seq, std::span<const int32_t> tokens, int pos,
              const TargetFeatures& feats) override {
    accept(seq, tokens, pos, feats);
  }
  void accept(int seq, std::span<const int32_t> tokens, int pos,
              const TargetFeatures& feats) override {
    const AcceptJob job{seq, tokens, pos, feats};
    bb_.add_contexts(std::span<const AcceptJob>(&job, 1));
  }
  void accept_batch(std::span<const AcceptJob> jobs) override { bb_.add_contexts(jobs); }
  void enable_prefix_caching() override { bb_.enable_prefix_caching(); }
  int attach_prefix(int seq, std::span<const int32_t> tokens, int max_len) override {
    return bb_.attach_prefix(seq, tokens, max_len);
  }
  void end(int seq) override { bb_.free_sequence(seq); }
  void propose(int seq, int32_t anchor, int pos, int k, const DraftSampling& ds,
               Draft& out) override;

 protected:
  // Every job's block through the backbone, scoring rows from first_row (DflashBackbone::
  // draft_logits): logits_[j], hidden_[j] and dv_[j] are job j's.
  void draft_logits(std::span<const DraftJob> jobs, int first_row) {
    bb_.draft_logits(jobs, first_row, logits_, hidden_, dv_);
  }
  // The job's next draft from the logits z of head(dv): appended to its tokens, with its q row
  // when the round samples a dense q. Returns the target id.
  int32_t draw_next(const DraftJob& job, const float* z, bool dv);

  DflashBackbone bb_;
  std::vector<float*> logits_;
  std::vector<const float*> hidden_;
  std::vector<bool> dv_;

 private:
  Sampler sampler_;
};

// The tensor names a DSpark/DFlash checkpoint may hold for the backbone.
std::vector<std::string> dflash_backbone_names(const DrafterConfig& cfg);

}  // namespace dspark
