// The model runner: carries out a step's plan. It drafts for the decoding requests in one
// batched pass per drafter version, lets the verification-length policy choose how many drafts
// each verifies, builds one flat batch (prompt chunks, then every anchor with its drafts), runs
// the target forward, samples first tokens, verifies drafts and commits what survived, and feeds
// the drafter its context. It holds no queues: requests come from the plan, tokens go to the
// output processor. Engine thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/buffer.h"
#include "model/forward.h"
#include "runtime/engine_options.h"
#include "runtime/held_rows.h"
#include "runtime/output_processor.h"
#include "runtime/request_scheduler.h"
#include "runtime/request_state.h"
#include "sample/sampler.h"
#include "spec_decode/drafter.h"
#include "spec_decode/spec_config.h"
#include "spec_decode/verify_length.h"

namespace dspark {

// Drafts a round verifies at most: the config's num_speculative_tokens, else the drafter's block.
int speculation_length(const Drafter* drafter, const SpecConfig& spec);

class ModelRunner {
 public:
  // `drafter` (null: plain decoding) is version 1; `policy` chooses verification lengths (needed
  // with a drafter); `spec` has num_speculative_tokens resolved. Checks the export layers.
  ModelRunner(Forward& fwd, const EngineOptions& opt, std::unique_ptr<Drafter> own,
              Drafter* drafter, const SpecConfig& spec, VerifyLengthPolicy* policy,
              OutputProcessor& out);

  // The drafter new requests get (null without one).
  Drafter* drafter() const { return drafter_; }
  int drafts_per_round() const { return drafter_ ? spec_.num_speculative_tokens : 0; }
  // Hot reload: `d` becomes the current version; older versions go once no request holds them.
  void install_drafter(std::unique_ptr<Drafter> d, int version);
  void free_unused_drafters();

  // A request got its place (again): it drafts with the version it was first admitted with.
  void admitted(RequestState& r);
  // Prefix caching: r's target KV starts with n cached positions of `tokens`; its drafter context
  // starts from as many of them as the drafter holds, which is returned.
  int prefix_attached(RequestState& r, std::span<const int32_t> tokens, int n);
  // A request lost its place: its drafter state and captured hidden states go; with prefix
  // caching its held rows are parked for a request that continues its tokens (the next turn of a
  // chat, or itself after preemption).
  void released(RequestState& r);

  // Drafts for the plan's decoding requests and sets each one's verify_len. Returns whether it
  // drafted (the policy may judge a plain step faster).
  bool propose(const StepPlan& plan);
  // The target forward over the plan's batch, then first tokens, verification and commits.
  void execute(const StepPlan& plan, bool drafted, double t_step);
  // After the step's outputs were delivered: the policy learns what the step yielded and what it
  // took from its start (t_step) to now. Delivering costs a step about a tenth of a plain step's
  // forward on the demo models (detokenizing, stop strings, each request's output), once per
  // step whatever the step yields, so it weighs for drafting and belongs in both rates.
  void step_delivered();

 private:
  void build_batch(const StepPlan& plan);
  void prefill_results(const StepPlan& plan, const ForwardOutput& out);
  void verify_and_commit(const StepPlan& plan, const ForwardOutput& out);
  // The rows r samples or verifies from: `logits` itself, or with a logits processor the rows
  // after each prefix of `drafts` processed (1 + drafts.size() consecutive rows of the vocab).
  const float* processed_rows(RequestState& r, const float* logits,
                              std::span<const int32_t> drafts);
  // The seconds a flush spent on rows held before the last step, counted pro rata: the prompt's
  // (the drafter's prefill, paid once by a request that drafts at all) and the generated rows
  // held through plain steps (paid again each time a request switches to drafting).
  struct CatchUp {
    double prompt = 0, plain = 0;
    double total() const { return prompt + plain; }
  };
  // Gives the drafter the rows each of `rs` holds (one accept_batch per version), then empties
  // them; steady drafting gives only the last step's rows, which count in no catch-up.
  CatchUp flush_held(std::span<RequestState* const> rs);
  // Holds rows for the drafter: `tokens` from position `pos` on, with their feature rows (token
  // i's dwidth floats at feats + i * stride; null without features).
  void hold(RequestState& r, std::span<const int32_t> tokens, int pos, const float* feats,
            int64_t stride, int dwidth);
  // Whether a backbone drafter (DSpark, DFlash) is used: its context waits until it drafts.
  bool defers_context() const;
  // Rows a request holds at most (kHeldBytes of features, at least kHeldRows) before they go to
  // the drafter whether it drafts or not.
  int held_cap(int dwidth) const;
  static constexpr int kHeldRows = 32;
  static constexpr size_t kHeldBytes = size_t(2) << 20;
  // The pages every held and parked row lives in (made at the first row held; declared before
  // parked_, which gives its pages back when destroyed).
  std::unique_ptr<FeaturePool> pool_;
  // Rows that requests released without giving them to the drafter, newest last, at most
  // parked_cap() bytes and kParkedEntries, kParkMin rows or more each (fewer cost the target at
  // most a KV block to recompute): the drafter version, the first row's position, a hash of the
  // tokens before it, and the request's own rows and tokens, moved. A request that continues a
  // whole entry takes them; one that continues part of it gets a copy of that part, and the entry
  // stays.
  struct Parked {
    int version = 0, start = 0, width = 0, rows = 0;
    uint64_t prefix_hash = 0;
    HeldRows feats;
    std::vector<int32_t> tokens;
    size_t bytes() const { return feats.bytes() + tokens.capacity() * 4; }
  };
  std::deque<Parked> parked_;
  size_t parked_bytes_ = 0;
  static constexpr size_t kParkedBytes = size_t(64) << 20;
  static constexpr size_t kParkedEntries = 256;
  // The parked rows' budget for rows `width` floats wide: kParkedBytes, or the features of as many
  // positions as the target's KV cache holds where that is more, so that a prompt whose blocks the
  // target still caches finds its drafter context too (with a smaller budget, repeated MT-Bench
  // prompts at 16 users prefilled 25-41 rows a step against the plain server's 8).
  size_t parked_cap(int width) const;
  static constexpr int kParkMin = 16;
  void park(RequestState& r);
  // Requests that hold rows: another request's prefix may need them in the drafter's cache.
  std::vector<RequestState*> holders_;
  void drop_holder(RequestState& r);
  // A parked entry that continues r's drafter context from m (the drafter's cached prefix of
  // `tokens`, the target's n cached positions) becomes r's held rows; returns where r's drafter
  // context then ends (m when none applies).
  int unpark(RequestState& r, std::span<const int32_t> tokens, int m, int n);
  // This step's catch-up (flush_held). The learned drafting cost leaves all of it out; the
  // measured step time leaves out the prompt's part only: under a load that moves between one
  // where drafting loses and one where it gains (4 and 3 users), each switch to drafting pays
  // for the rows of the plain steps before it, and that cost belongs to the drafted rounds (at 3
  // users on MT-Bench they measured 1.10x plain without it and 0.83x with it).
  CatchUp catch_up_;
  // What execute() saw of a step with decoding requests, for step_delivered().
  struct StepSeen {
    int requests = 0, emitted = 0, rows = 0, other_rows = 0;
    bool drafted = false;
    double t_step = 0;
  };
  std::optional<StepSeen> seen_;
  // Keeps the export layers of the forward's output row `out_row` (position `pos`) for `r`.
  void capture_row(RequestState& r, const ForwardOutput& out, int out_row, int pos);

  Forward& fwd_;
  KvCache& kv_;
  const ModelConfig& cfg_;
  const EngineOptions& opt_;
  OutputProcessor& out_;
  std::vector<std::unique_ptr<DrafterVersion>> drafters_;  // the current one last
  Drafter* drafter_ = nullptr;
  SpecConfig spec_;
  VerifyLengthPolicy* policy_ = nullptr;
  // Layers every forward taps: the drafter's, then the export layers it lacks; export_slot_[k]:
  // export layer k's index among them; drafter_taps_: how many of them the drafter reads.
  std::vector<int> tap_layers_, export_slot_;
  int drafter_taps_ = 0;
  // Step scratch, reused.
  Batch batch_;
  Sampler sampler_;
  Buffer<float> probs_, gathered_, processed_, flushed_;
  std::vector<DraftJob> jobs_;
  std::vector<AcceptJob> accepts_;
  std::vector<RequestState*> flush_rows_;
  std::vector<const Draft*> draft_ptrs_;
  std::vector<int> lengths_, positions_;
  std::vector<int32_t> committed_, tail_rows_, decode_rows_, score_rows_;
  int n_head_ = 0;  // this step's output rows before the prompts' last rows
};

}  // namespace dspark
