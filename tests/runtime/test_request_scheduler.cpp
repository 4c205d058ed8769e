// The request scheduler on its own: a small KV pool and requests, no model. Admission is first
// come first served under max_num_seqs and the KV room; prompt chunks stay within the step's
// token budget; a decoding request gets room for its anchor and drafts, and when the pool is
// short the most recently admitted request is preempted and queued first; prefill-first steps
// run prompts only.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "runtime/request_scheduler.h"
#include "tokenizer/tokenizer.h"

#ifndef DSPARK_MODELS_DIR
#error "DSPARK_MODELS_DIR must name the repository's models/ directory"
#endif

namespace dspark {
namespace {

class Recorder final : public SchedulerHooks {
 public:
  void admitted(RequestState& r, double) override { admitted_ids.push_back(r.req.request_id); }
  void released(RequestState& r) override { released_ids.push_back(r.req.request_id); }
  // A drafter that holds `drafter_holds` positions of any cached prefix.
  int prefix_attached(RequestState&, std::span<const int32_t>, int n) override {
    return std::min(n, drafter_holds);
  }
  std::vector<std::string> admitted_ids, released_ids;
  int drafter_holds = 1 << 30;
};

class RequestSchedulerTest : public ::testing::Test {
 protected:
  // A pool of `blocks` KV blocks of kKvBlock positions.
  void make(int blocks, SchedulerConfig cfg) {
    kv_ = std::make_unique<KvCache>(1, 1, 8, DType::F32, int64_t(blocks) * kKvBlock);
    cfg.max_model_len = cfg.max_model_len ? cfg.max_model_len : 1024;
    sched_ = std::make_unique<RequestScheduler>(cfg, *kv_, hooks_);
  }
  RequestState& add(const std::string& id, int prompt_len, int max_tokens) {
    EngineRequest req(id, std::vector<int32_t>(size_t(prompt_len), 7), GenerateParams{});
    auto r = std::make_unique<RequestState>(next_++, std::move(req), nullptr, *tok_);
    r->max_tokens = max_tokens;
    r->target_len = prompt_len;
    RequestState& ref = *r;
    sched_->add(std::move(r));
    return ref;
  }
  // What the model runner does with a plan: prompt chunks become computed positions (a prompt
  // that completes emits its first token); each decoding request accepts `accepted` drafts.
  void run(const StepPlan& plan, int accepted) {
    for (RequestState* r : plan.prefill) {
      if (kv_->prefix_caching()) {  // the chunk's KV is final: cached by its tokens (all 7)
        kv_->set_length(r->kv_seq, r->computed + r->chunk);
        kv_->commit(r->kv_seq, r->computed, std::vector<int32_t>(size_t(r->chunk), 7));
      }
      r->computed += r->chunk;
      if (r->computed == r->target_len) {
        r->decoding = true;
        if (r->out_tokens.empty()) r->out_tokens.push_back(1);
        r->anchor = r->out_tokens.back();
      }
    }
    for (RequestState* r : plan.decode) {
      const int n = std::min(accepted, r->want) + 1;
      const int pos = r->anchor_pos();
      kv_->truncate(r->kv_seq, pos + n);
      for (int i = 0; i < n; ++i) r->out_tokens.push_back(2);
      r->computed = pos + n;
    }
  }
  static std::vector<std::string> ids(const std::vector<RequestState*>& rs) {
    std::vector<std::string> out;
    for (const RequestState* r : rs) out.push_back(r->req.request_id);
    return out;
  }
  static std::vector<std::string> ids(const RequestQueue& q) {
    std::vector<std::string> out;
    for (const auto& r : q) out.push_back(r->req.request_id);
    return out;
  }

  std::unique_ptr<Tokenizer> tok_ = Tokenizer::from_dir(std::string(DSPARK_MODELS_DIR) + "/demo");
  std::unique_ptr<KvCache> kv_;
  Recorder hooks_;
  std::unique_ptr<RequestScheduler> sched_;
  uint64_t next_ = 1;
};

TEST_F(RequestSchedulerTest, AdmitsFirstComeFirstServedUpToMaxNumSeqs) {
  make(64, SchedulerConfig{.max_num_seqs = 2, .max_num_batched_tokens = 256});
  add("a", 10, 4);
  add("b", 12, 4);
  add("c", 5, 4);
  const StepPlan& plan = sched_->schedule(/*K=*/0, 0.0);
  EXPECT_EQ(hooks_.admitted_ids, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ids(plan.prefill), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(plan.decode.empty());
  EXPECT_EQ(plan.prefill_tokens, 22);
  EXPECT_EQ(ids(sched_->waiting()), (std::vector<std::string>{"c"}));
}

TEST_F(RequestSchedulerTest, PromptChunksStayWithinTheTokenBudget) {
  make(64, SchedulerConfig{.max_num_seqs = 4, .max_num_batched_tokens = 16});
  RequestState& a = add("a", 20, 4);
  RequestState& b = add("b", 20, 4);
  const StepPlan& p1 = sched_->schedule(0, 0.0);
  EXPECT_EQ(ids(p1.prefill), (std::vector<std::string>{"a"}));
  EXPECT_EQ(a.chunk, 16);
  EXPECT_EQ(b.chunk, 0);
  run(p1, 0);
  // a's last 4 prompt tokens, then b's first 12, in one step of 16.
  const StepPlan& p2 = sched_->schedule(0, 1.0);
  EXPECT_EQ(ids(p2.prefill), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(a.chunk, 4);
  EXPECT_EQ(b.chunk, 12);
  EXPECT_EQ(p2.prefill_tokens, 16);
  run(p2, 0);
  // a decodes (its anchor and up to K = 3 drafts), b's prompt takes the rest of the budget.
  const StepPlan& p3 = sched_->schedule(3, 2.0);
  EXPECT_EQ(ids(p3.decode), (std::vector<std::string>{"a"}));
  EXPECT_EQ(a.want, 3);
  EXPECT_EQ(p3.decode_tokens, 4);
  EXPECT_EQ(ids(p3.prefill), (std::vector<std::string>{"b"}));
  EXPECT_EQ(b.chunk, 8);
  EXPECT_EQ(p3.prefill_tokens + p3.decode_tokens, 12);
}

TEST_F(RequestSchedulerTest, DraftsNeverExceedTheTokensLeft) {
  make(64, SchedulerConfig{.max_num_seqs = 4, .max_num_batched_tokens = 256, .max_model_len = 24});
  RequestState& a = add("a", 16, 3);
  run(sched_->schedule(8, 0.0), 0);  // prefilled; 1 of its 3 tokens emitted
  const StepPlan& p = sched_->schedule(8, 1.0);
  ASSERT_EQ(ids(p.decode), (std::vector<std::string>{"a"}));
  EXPECT_EQ(a.want, 2) << "2 tokens are left: the anchor's round drafts at most 2";
  RequestState& b = add("b", 20, 100);
  run(p, 0);
  run(sched_->schedule(8, 2.0), 0);  // b prefilled: position 20 of max_model_len 24
  const StepPlan& q = sched_->schedule(8, 3.0);
  ASSERT_EQ(ids(q.decode).back(), "b");
  EXPECT_EQ(b.want, 24 - b.anchor_pos() - 1) << "drafts stop at max_model_len";
}

TEST_F(RequestSchedulerTest, ShortPoolPreemptsTheNewestWhichIsQueuedFirst) {
  // 4 blocks of 16: two prompts of 16 take one block each, admitted while a round fits.
  make(4, SchedulerConfig{.max_num_seqs = 4, .max_num_batched_tokens = 256});
  RequestState& a = add("a", 16, 200);
  RequestState& b = add("b", 16, 200);
  run(sched_->schedule(8, 0.0), 8);
  EXPECT_EQ(ids(sched_->running()), (std::vector<std::string>{"a", "b"}));
  // Each round needs its anchor and 8 drafts; accepting all keeps growing both sequences until
  // the pool cannot hold both: b, the newest, is preempted and queued first.
  int steps = 0;
  while (sched_->preemptions() == 0 && steps++ < 20) run(sched_->schedule(8, 1.0 + steps), 8);
  ASSERT_EQ(sched_->preemptions(), 1);
  EXPECT_EQ(hooks_.released_ids, (std::vector<std::string>{"b"}));
  EXPECT_EQ(ids(sched_->running()), (std::vector<std::string>{"a"}));
  EXPECT_EQ(ids(sched_->waiting()), (std::vector<std::string>{"b"}));
  // b keeps its output; it is prefilled again up to (not including) its anchor.
  EXPECT_FALSE(b.out_tokens.empty());
  EXPECT_EQ(b.target_len, b.anchor_pos());
  EXPECT_EQ(b.computed, 0);
  EXPECT_FALSE(b.decoding);
  EXPECT_EQ(b.kv_seq, -1);
  EXPECT_GE(a.kv_seq, 0);
  // Releasing a frees its blocks: b is admitted again.
  sched_->release(a);
  sched_->running().clear();
  const StepPlan& p = sched_->schedule(8, 50.0);
  EXPECT_EQ(ids(p.prefill), (std::vector<std::string>{"b"}));
  EXPECT_EQ(hooks_.admitted_ids.back(), "b");
}

TEST_F(RequestSchedulerTest, PrefillFirstStepsRunPromptsOnly) {
  make(64, SchedulerConfig{.max_num_seqs = 4, .max_num_batched_tokens = 256, .prefill_first = true});
  add("a", 10, 50);
  run(sched_->schedule(4, 0.0), 0);
  add("b", 10, 50);
  const StepPlan& p = sched_->schedule(4, 1.0);
  EXPECT_TRUE(p.decode.empty()) << "a decodes only once no prompt waits";
  EXPECT_EQ(ids(p.prefill), (std::vector<std::string>{"b"}));
  run(p, 0);
  const StepPlan& q = sched_->schedule(4, 2.0);
  EXPECT_EQ(ids(q.decode), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(q.prefill.empty());
}

TEST_F(RequestSchedulerTest, ARequestWaitsWhileItsPromptAndOneRoundDoNotFitAndSoDoThoseBehindIt) {
  make(1, SchedulerConfig{.max_num_seqs = 4, .max_num_batched_tokens = 256});
  add("a", 10, 100);  // 10 + 8 + 1 positions do not fit in one block of 16
  add("b", 4, 100);   // would fit, but waits behind a (first come, first served)
  const StepPlan& p = sched_->schedule(8, 0.0);
  EXPECT_TRUE(p.empty());
  EXPECT_TRUE(hooks_.admitted_ids.empty());
  EXPECT_EQ(ids(sched_->waiting()), (std::vector<std::string>{"a", "b"}));
  // A request that cannot use a whole round needs only its prompt and output: 10 + 2 fit.
  make(1, SchedulerConfig{.max_num_seqs = 4, .max_num_batched_tokens = 256});
  add("c", 10, 2);
  EXPECT_EQ(ids(sched_->schedule(8, 0.0).prefill), (std::vector<std::string>{"c"}));
}

TEST_F(RequestSchedulerTest, ACachedPrefixIsNotPrefilledAgainAndTheLastPositionAlwaysIs) {
  make(16, SchedulerConfig{.max_num_seqs = 4, .max_num_batched_tokens = 256});
  kv_->set_prefix_caching(true);
  RequestState& a = add("a", 40, 4);
  run(sched_->schedule(0, 0.0), 0);
  EXPECT_EQ(a.computed, 40);
  EXPECT_EQ(a.cached_tokens, 0);
  sched_->release(a);
  sched_->running().clear();

  // The same 40 tokens: two whole blocks are cached, 8 positions are prefilled.
  RequestState& b = add("b", 40, 4);
  const StepPlan& plan = sched_->schedule(0, 0.0);
  EXPECT_EQ(b.cached_tokens, 32);
  ASSERT_EQ(ids(plan.prefill), (std::vector<std::string>{"b"}));
  EXPECT_EQ(b.chunk, 8);
  EXPECT_EQ(sched_->prefix_queries(), 80);
  EXPECT_EQ(sched_->prefix_hits(), 32);
  run(plan, 0);
  sched_->release(b);
  sched_->running().clear();

  // A prompt of exactly two blocks: its last position is computed again, so one block is used.
  RequestState& c = add("c", 32, 4);
  sched_->schedule(0, 0.0);
  EXPECT_EQ(c.cached_tokens, 16);
  EXPECT_EQ(c.chunk, 16);
  sched_->release(c);
  sched_->running().clear();

  // A drafter that holds less: both resume where the drafter's context ends.
  hooks_.drafter_holds = 16;
  RequestState& d = add("d", 40, 4);
  sched_->schedule(0, 0.0);
  EXPECT_EQ(d.cached_tokens, 16);
  EXPECT_EQ(d.chunk, 24);
  EXPECT_EQ(kv_->length(d.kv_seq), 16);
}

}  // namespace
}  // namespace dspark
