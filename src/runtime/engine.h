// Engine: one loop that owns the target, its paged KV cache and the drafter, and serves many
// requests at once. Each step is ONE target forward over a flat batch: chunks of new prompts
// (chunked prefill under max_num_batched_tokens) and, for every running request, its anchor plus
// the l_r drafts the verification policy chose for it. Drafting is batched across requests.
//
// A request's output depends only on the request: its random draws come from streams keyed by
// its seed and the token position (sample/rng.h), so in --dtype f32 a greedy request's tokens are
// the ones `dspark generate` gives for it alone, at any concurrency.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model/forward.h"
#include "runtime/generate.h"
#include "runtime/metrics.h"
#include "spec_decode/drafter.h"
#include "spec_decode/length_policy.h"
#include "spec_decode/spec_config.h"
#include "tokenizer/tokenizer.h"

namespace dspark {

struct EngineOptions {
  int max_num_seqs = 16;              // requests running at once (vLLM --max-num-seqs)
  int max_num_batched_tokens = 2048;  // tokens in one step (vLLM --max-num-batched-tokens)
  int64_t kv_tokens = 0;  // KV cache capacity in positions (0: what the memory default gives)
  int max_model_len = 0;  // 0: the model's max_position_embeddings
  DType kv_dtype = DType::BF16;
  // Steps with prompts to prefill run only those (vLLM V0's order): the lowest TTFT, at the cost
  // of one step's delay to the decoding requests per arrival. Off: chunks of prompts share each
  // step with the decoding rounds (vLLM V1's chunked prefill).
  bool prefill_first = false;
  // Hidden-state export (the hidden-states connector): the outputs of these target layers
  // (dspark's ids: 0-based decoder-layer outputs, -1 the embeddings; vLLM's id i is our i - 1)
  // are kept for every position of a request that asks (EngineRequest::export_hidden), and
  // handed to on_export when it finishes. With a drafter that taps them already (export while
  // speculating) they cost a copy; the others are tapped from the same forward pass.
  std::vector<int> export_layers;
  bool export_bf16 = true;  // the export's dtype: bf16, else f32
  std::function<void(struct HiddenExport&&)> on_export;  // engine thread; must not block
};

// What the engine hands the connector for a finished request that asked for export.
struct HiddenExport {
  std::string handle;              // EngineRequest::export_handle
  std::string request_id;
  std::vector<int32_t> token_ids;  // the prompt, and with export_output_tokens the output but the last
  int prompt_tokens = 0;
  int output_tokens = 0;
  std::vector<int> layers;         // EngineOptions::export_layers
  int hidden = 0;
  bool bf16 = true;
  std::string bytes;               // [token_ids.size()][layers.size()][hidden], little-endian
  std::string error;               // non-empty: capture failed (write an error manifest)
};

struct EngineRequest {
  EngineRequest() = default;
  EngineRequest(std::string id, std::vector<int32_t> prompt_ids, GenerateParams p)
      : request_id(std::move(id)), prompt(std::move(prompt_ids)), params(std::move(p)) {}
  std::string request_id;       // the client's x-request-id, or one the server made
  std::vector<int32_t> prompt;  // token ids (chat template already applied)
  // Sampling (with seed), stop ids and stop strings; max_tokens -1 means as many as fit under
  // max_model_len (vLLM's default), else prompt + max_tokens must fit (submit() refuses it).
  GenerateParams params;
  // Export this request's target hidden states when it finishes (needs EngineOptions::
  // export_layers): every prompt position, and the output's too (all but the last token, which
  // no forward pass has seen) with export_output_tokens (vLLM's include_output_tokens).
  bool export_hidden = false;
  bool export_output_tokens = false;
  std::string export_handle;
};

// What the engine hands a request's owner after each step that advanced it (engine thread).
struct RequestOutput {
  std::string text;  // new text since the previous output (held back near stop strings)
  std::vector<int32_t> token_ids;  // new token ids since the previous output
  bool finished = false;
  std::string finish_reason;  // when finished: "stop", "length" or "abort"
  // What stopped a "stop" (vLLM's stop_reason): a stop string, or a stop token that is not one of
  // the model's end-of-sequence ids (-1: neither, as for the end of sequence).
  std::string stop_string;
  int32_t stop_token = -1;
  std::string error;      // why an "abort" the client did not ask for happened (shutdown, failure)
  int prompt_tokens = 0;  // totals so far
  int completion_tokens = 0;
};
// Called on the engine thread; must not block (push to a queue and return).
using OutputFn = std::function<void(RequestOutput&&)>;

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
  // max_model_len) and queues it. Throws Error, naming the field, for a request it can never run;
  // a request that does not fit now waits. Thread-safe. Returns a handle for abort().
  uint64_t submit(EngineRequest req, OutputFn on_output);
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
  void collect_spec_metrics(SpecMetrics* m) { spec_metrics_ = m; }
  int max_model_len() const { return max_model_len_; }
  int64_t kv_capacity_tokens() const;
  const Model& model() const { return model_; }
  const Tokenizer& tokenizer() const { return tok_; }
  const SpecConfig* spec() const { return drafter_ ? &spec_ : nullptr; }
  bool accepting() const { return accepting_; }

 private:
  struct Seq;
  void init();
  bool emit(Seq& s, int32_t token);
  void finish(Seq& s, const char* reason);
  void release(Seq& s);
  // Gives the drafter the rows each of `seqs` holds (one accept_batch), then empties them.
  void flush_held(std::span<Seq* const> seqs);
  static constexpr int kHeldRows = 32;
  // Keeps the export layers of the forward's output row `out_row` (position `pos`) for `s`.
  void capture_row(Seq& s, const ForwardOutput& out, int out_row, int pos);
  void export_finished(Seq& s);
  // Frees the most recently admitted running request and puts it first in the queue, to be
  // recomputed (vLLM's order).
  void preempt_newest();
  bool retire();
  void publish_metrics();
  void fail_all(const std::string& why);
  double kv_usage() const;

  const Model& model_;
  const Tokenizer& tok_;
  EngineOptions opt_;
  int max_model_len_ = 0;
  // Drafter versions in use: the current one (back) and older ones that running requests still
  // draft with (freed when their last request ends). drafter_ is the current one's.
  struct DrafterVersion {
    std::unique_ptr<Drafter> own;
    Drafter* d = nullptr;
    int version = 1;
    int users = 0;  // requests that hold it
  };
  std::vector<std::unique_ptr<DrafterVersion>> drafters_;
  std::unique_ptr<Drafter> next_drafter_;  // swap_drafter's, installed by the loop (under mu_)
  int next_version_ = 1;
  void install_next_drafter();
  std::unique_ptr<VerifyLengthPolicy> own_policy_;
  std::unique_ptr<KvCache> own_kv_;
  std::unique_ptr<Forward> own_fwd_;
  Drafter* drafter_ = nullptr;
  SpecConfig spec_;
  VerifyLengthPolicy* policy_ = nullptr;
  KvCache* kv_ = nullptr;
  Forward* fwd_ = nullptr;
  SpecMetrics* spec_metrics_ = nullptr;

  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::vector<std::unique_ptr<Seq>> incoming_;  // submitted, not yet seen by the loop
  std::vector<uint64_t> aborts_;
  std::vector<std::unique_ptr<Seq>> waiting_, running_;
  EngineMetrics metrics_;  // the published snapshot (under mu_)
  EngineMetrics live_;     // the engine thread's own copy
  // Step scratch, reused.
  Batch batch_;
  Sampler sampler_;
  Buffer<float> probs_, gathered_;
  std::vector<DraftJob> jobs_;
  std::vector<AcceptJob> accepts_;
  std::vector<Seq*> flush_rows_;
  std::vector<const Draft*> draft_ptrs_;
  std::vector<int> lengths_;
  std::vector<int> positions_;  // the decoding requests' cached positions (set_contexts)
  std::vector<int32_t> committed_, tail_rows_, decode_rows_;
  // Layers every forward taps: the drafter's, then the export layers it lacks; export_slot_[k]:
  // export layer k's index among them; drafter_taps_: how many of them the drafter reads.
  std::vector<int> tap_layers_, export_slot_;
  int drafter_taps_ = 0;
  std::vector<Seq*> dec_, pre_;
  uint64_t next_handle_ = 1;
  std::atomic<bool> accepting_{true};
  bool stopping_ = false;
  // Whether waiting_ or running_ hold requests: those belong to the loop's thread; other threads
  // (idle(), drain()) read this copy, which the loop writes under mu_ after each step.
  bool has_work_ = false;
  std::thread thread_;
};

// Serves one request alone on `fwd` (generate() and spec_generate()): max_tokens is cut to what
// fits (finish_reason "length") instead of refused; on_text returning false aborts it.
GenerateResult run_alone(Forward& fwd, const Tokenizer& tok, std::span<const int32_t> prompt,
                         const GenerateParams& params, Drafter* drafter, const SpecConfig* spec,
                         VerifyLengthPolicy* policy, SpecMetrics* metrics,
                         const TextCallback& on_text);

}  // namespace dspark
