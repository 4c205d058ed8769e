// Engine: one loop that owns the target, its paged KV cache and the drafter, and serves many
// requests at once. Each step is ONE target forward over a flat batch: chunks of new prompts
// (chunked prefill under max_num_batched_tokens) and, for every running request, its anchor plus
// the l_r drafts the verification-length policy chose for it. Drafting is batched across requests.
//
// The loop ties three parts together (docs/serving.md, "One step"): the request scheduler
// (queues, admission, preemption, the step's plan), the model runner (drafting, the forward pass,
// verification) and the output processor (text, stops, outputs, metrics). The engine itself takes
// requests in, drains and runs the loop's thread.
//
// A request's output depends only on the request: its random draws come from streams keyed by
// its seed and the token position (core/rng.h), so in --dtype f32 a greedy request's tokens are
// the ones `dspark generate` gives for it alone, at any concurrency.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "model/forward.h"
#include "runtime/engine_options.h"
#include "runtime/metrics.h"
#include "runtime/model_runner.h"
#include "runtime/output_processor.h"
#include "runtime/request.h"
#include "runtime/request_scheduler.h"
#include "spec_decode/drafter.h"
#include "spec_decode/spec_config.h"
#include "spec_decode/verify_length.h"
#include "tokenizer/tokenizer.h"

namespace dspark {

class Engine {
 public:
  // `drafter` may be null (plain decoding); with it, `spec` gives the method and length and
  // `policy` the verification lengths (null: every draft).
  Engine(const Model& model, const Tokenizer& tok, EngineOptions opt,
         std::unique_ptr<Drafter> drafter = nullptr, SpecConfig spec = {},
         std::unique_ptr<VerifyLengthPolicy> policy = nullptr);
  // The same on a borrowed forward (and its KV cache, whose sequences the requests use; kv_tokens
  // and kv_dtype are then the cache's), drafter and policy, which must outlive the engine.
  Engine(Forward& fwd, const Tokenizer& tok, EngineOptions opt, Drafter* drafter, SpecConfig spec,
         VerifyLengthPolicy* policy);
  ~Engine();  // stop()

  // Checks the request (sampling ranges, max_tokens, a prompt that leaves room under
  // max_model_len) and queues it. Throws Error for a request it can never run, its kind
  // (InvalidRequest, ContextLengthExceeded; Unavailable once stopping) and param (the field, in
  // the engine's names: "prompt", "max_tokens", "temperature", ...) set; a request that does not
  // fit now waits. Thread-safe. Returns a handle for abort().
  uint64_t submit(EngineRequest req, OutputFn on_output);
  // submit()'s checks alone: throws the Error submit() would for a request it can never run.
  void check(const EngineRequest& req) const;
  // The request ends with finish_reason "abort" in the next step; its KV blocks and drafter state
  // are freed then. Unknown or finished handles are ignored. Thread-safe.
  void abort(uint64_t handle);

  // Runs the loop on its own thread until stop().
  void start();
  // Stops admitting, lets running and waiting requests finish, then returns (SIGTERM).
  void drain();
  // Aborts everything left and joins the loop thread.
  void stop();
  // One step on the caller's thread (tests, when start() was not called). Returns false when idle.
  bool step();
  bool idle() const;

  // Hot reload: `d` serves the requests admitted from the next step on; requests already
  // running finish on the drafter they started with (lossless either way: verification keeps
  // the target's distribution whatever the drafter proposes). Thread-safe. It must read the same
  // target layers as the current drafter, be of its method and draft at least
  // num_speculative_tokens; otherwise an Error naming what differs. Returns the new version.
  int swap_drafter(std::unique_ptr<Drafter> d);

  EngineMetrics metrics() const;  // a snapshot
  // Also adds every round's figures to *m (engine thread; read it when the engine is idle).
  void collect_spec_metrics(SpecMetrics* m) { out_->collect_spec_metrics(m); }
  int max_model_len() const { return max_model_len_; }
  int64_t kv_capacity_tokens() const;
  const Model& model() const { return model_; }
  const Tokenizer& tokenizer() const { return tok_; }
  const SpecConfig* spec() const { return has_drafter_ ? &spec_ : nullptr; }
  bool accepting() const { return accepting_; }

 private:
  // Prompt + output positions a request may have: max_model_len within the KV pool's room.
  int length_limit() const;
  // SchedulerHooks, through which the request scheduler reports admissions and releases.
  class Hooks final : public SchedulerHooks {
   public:
    explicit Hooks(Engine& e) : e_(e) {}
    void admitted(RequestState& r, double now) override;
    void released(RequestState& r) override;
    int prefix_attached(RequestState& r, std::span<const int32_t> tokens, int n) override;

   private:
    Engine& e_;
  };
  void init(std::unique_ptr<Drafter> own, Drafter* drafter);
  // New requests and aborts, from other threads.
  void take_intake();
  void install_next_drafter();
  // Hands out pending outputs, frees finished requests; returns whether any request remains.
  bool retire();
  void publish_metrics();
  void fail_all(const std::string& why);

  const Model& model_;
  const Tokenizer& tok_;
  EngineOptions opt_;
  int max_model_len_ = 0;
  SpecConfig spec_;
  std::unique_ptr<VerifyLengthPolicy> own_policy_;
  VerifyLengthPolicy* policy_ = nullptr;
  std::unique_ptr<KvCache> own_kv_;
  std::unique_ptr<Forward> own_fwd_;
  KvCache* kv_ = nullptr;
  Forward* fwd_ = nullptr;
  // What every drafter version must share with the first (swap_drafter checks it on any thread).
  bool has_drafter_ = false;
  SpecMethod drafter_method_{};
  std::vector<int> drafter_layers_;
  // The three parts of a step, in this order: the requests (the scheduler's queues) are destroyed
  // before the drafter versions they hold (the runner's).
  Hooks hooks_{*this};
  std::unique_ptr<OutputProcessor> out_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<RequestScheduler> scheduler_;

  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::vector<std::unique_ptr<RequestState>> incoming_;  // submitted, not yet seen by the loop
  std::vector<uint64_t> aborts_;
  std::unique_ptr<Drafter> next_drafter_;  // swap_drafter's, installed by the loop (under mu_)
  int next_version_ = 1;
  EngineMetrics metrics_;  // the published snapshot (under mu_)
  uint64_t next_handle_ = 1;
  std::atomic<bool> accepting_{true};
  bool stopping_ = false;
  // Whether the scheduler holds requests: those belong to the loop's thread; other threads
  // (idle(), drain()) read this copy, which the loop writes under mu_ after each step.
  bool has_work_ = false;
  std::thread thread_;
};

}  // namespace dspark
