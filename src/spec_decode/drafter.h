// Drafter: what every drafting method implements (DSpark, DFlash, EAGLE-3, n-gram), in the
// begin / propose / accept shape of llama.cpp's common/speculative.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/model.h"
#include "sample/logits_processor.h"
#include "sample/sampler.h"
#include "spec_decode/spec_config.h"

namespace dspark {

// Target hidden states for consecutive rows: the taps of the drafter's target_layers(),
// concatenated per row in that order: [rows][n_taps * hidden].
struct TargetFeatures {
  const float* data = nullptr;
  int rows = 0;
  int width = 0;
  const float* row(int i) const { return data + int64_t(i) * width; }
};

// How a round samples its drafts.
struct DraftSampling {
  bool probabilistic = false;  // sample from q (else argmax, q one-hot)
  SamplingParams params;       // the request's temperature / top-k / top-p / min-p
  Rng* rng = nullptr;          // the draft stream (independent of acceptance and residual draws)
  // The request's grammar mask, logit_bias and penalties (null: none). A drafter that samples
  // from its own logits applies it to each row over the target's vocabulary first (draw) and
  // pushes each draft it picks (the caller pops them after the round).
  LogitsProcessor* processor = nullptr;
  // Whether drafters build and sample a dense q. At temperature 0 probabilistic drafting is the
  // argmax with a one-hot q, which Draft::q leaves implicit (empty), so it is skipped.
  bool dense_q() const { return probabilistic && !params.greedy(); }
  // One draft from `row`, logits over the target's vocabulary (V of them; -inf where the drafter
  // cannot propose), processed in place by `processor` when there is one: the argmax, or with
  // dense_q() a draw from the sampling distribution, which is written to q_row[V]. The draft is
  // pushed to `processor`.
  int32_t draw(float* row, int V, Sampler& sampler, float* q_row) const;
};

// One round's proposal for one sequence.
struct Draft {
  std::vector<int32_t> tokens;  // x_1..x_k
  std::vector<float>
      q;  // [k][vocab] the exact distributions sampled from; empty: one-hot on tokens
  std::vector<float>
      confidence;  // c_1..c_k, P(x_k accepted | x_1..x_{k-1} accepted); empty without a head
  std::vector<float> confidence_logit;  // the raw logits s_k behind them (calibration input)
  int vocab = 0;

  const float* q_row(int i) const { return q.data() + int64_t(i) * vocab; }
  void clear() {
    tokens.clear();
    q.clear();
    confidence.clear();
    confidence_logit.clear();
  }
};

// One sequence's part of a batched drafting pass (Drafter::propose_batch).
struct DraftJob {
  int seq = -1;
  int32_t anchor = 0;
  int pos = 0;
  int k = 0;
  DraftSampling sampling;
  Draft* out = nullptr;
};

// One sequence's part of a batched accept (Drafter::accept_batch).
struct AcceptJob {
  int seq = -1;
  std::span<const int32_t> committed;
  int pos = 0;
  TargetFeatures feats;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual SpecMethod method() const = 0;
  // Target layers whose outputs the drafter needs (0-based decoder-layer outputs, -1 = embeddings).
  virtual const std::vector<int>& target_layers() const = 0;
  virtual int max_draft_tokens() const = 0;  // the most one round can propose
  virtual bool has_confidence() const { return false; }

  // A new, empty sequence; returns its id.
  virtual int begin() = 0;
  // Prompt tokens (a chunk of them) at positions pos, pos+1, ... with their target features.
  virtual void extend(int seq, std::span<const int32_t> tokens, int pos,
                      const TargetFeatures& feats) = 0;
  // Proposes k tokens to follow `anchor`, the last token the target produced, at position `pos`
  // (its own target features do not exist yet).
  virtual void propose(int seq, int32_t anchor, int pos, int k, const DraftSampling& sampling,
                       Draft& out) = 0;
  // propose() for many sequences in one pass. Each job's draft must be what propose() gives it
  // alone. The default runs them one by one (n-gram); DSpark and DFlash run every block through
  // the backbone together, EAGLE-3 each chained step for every sequence at once.
  virtual void propose_batch(std::span<const DraftJob> jobs) {
    for (const DraftJob& j : jobs) propose(j.seq, j.anchor, j.pos, j.k, j.sampling, *j.out);
  }
  // After verification: `committed` (the anchor and the accepted drafts) now hold positions
  // pos, pos+1, ..., with their target features (one row each).
  virtual void accept(int seq, std::span<const int32_t> committed, int pos,
                      const TargetFeatures& feats) = 0;
  // accept() for many sequences; the default runs them one by one, DSpark and DFlash fuse and
  // inject every sequence's context rows in one pass.
  virtual void accept_batch(std::span<const AcceptJob> jobs) {
    for (const AcceptJob& j : jobs) accept(j.seq, j.committed, j.pos, j.feats);
  }
  virtual void end(int seq) = 0;

  // Prefix caching. Once enabled, a drafter may keep the context of ended sequences, keyed by
  // their tokens, and start a new, empty sequence from it: attach_prefix gives `seq` the context
  // of the longest prefix of tokens[0, max_len) it holds, as if extend() had been given those
  // positions, and returns its length (a multiple of the KV block, for the target's cache to cut
  // to). The default keeps none: requests prefill from position 0.
  virtual void enable_prefix_caching() {}
  virtual int attach_prefix(int /*seq*/, std::span<const int32_t> /*tokens*/, int /*max_len*/) {
    return 0;
  }
};

// Loads the drafter a SpecConfig names, for `target`. Drafter matrices are held as `dtype`.
// Errors name the drafter's file and the offending field or tensor.
std::unique_ptr<Drafter> load_drafter(SpecConfig& cfg, const Model& target, DType dtype);

}  // namespace dspark
