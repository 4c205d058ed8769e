// The sample stream of `dspark train drafter --online` (docs/online-training.md): prompts go to
// the serving engines, which export the hidden states of every answer to a store; verified
// samples come back in a bounded queue for the training loop, each exactly once across crashes
// and --resume (train/online_ledger.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "connector/hidden_states_store.h"
#include "datagen/hidden_dataset.h"
#include "datagen/prompts.h"
#include "tokenizer/tokenizer.h"
#include "train/online_ledger.h"
#include "train/online_sample.h"
#include "train/server_client.h"

namespace dspark::train {

struct OnlineOptions {
  bool enabled = false;              // --online
  std::string prompts;               // --prompts: JSONL (datagen::load_prompt_file)
  std::vector<std::string> servers;  // --servers
  std::string store;                 // --store: redis://HOST:PORT/DB or file:DIR
  int max_tokens = 128;              // --max-tokens
  int in_flight = 0;                 // --in-flight: requests at once in total (0: 2 per server)
  int queue = 0;                     // --queue: verified samples held for training (0: 2 x --batch)
  std::string api_key;               // --api-key
  double sample_timeout = 120;       // --sample-timeout: seconds to wait for a sample's manifest
  double request_timeout = 600;      // --request-timeout: seconds per HTTP request
  double server_wait = 120;          // --server-wait: seconds to wait for a server at the start
  int64_t reload_every = 0;          // --reload-every: steps between drafter hot reloads (0: off)
};

// One verified sample, with where it came from.
struct OnlineItem {
  datagen::HiddenDataset::Sample sample;
  int64_t prompt = -1;
  std::string handle, server;
};

class OnlineSource {
 public:
  using EventSink = std::function<void(const nlohmann::json&)>;  // thread-safe: train_log + stderr

  // Reads the prompts, the target's tokenizer and chat format, and asks every server for its
  // model; Error naming the flag or file otherwise. Nothing is requested yet.
  OnlineSource(const OnlineOptions& o, const std::string& out_dir, const std::string& target_dir,
               TargetNorm norm, std::vector<int> drafter_layers, int batch);
  ~OnlineSource();  // stop(false)

  int64_t prompt_count() const { return int64_t(prompts_.size()); }

  // Starts the stream. `resume`: replays OUT/online_journal.jsonl against `state` (the
  // checkpoint's extra.online; null before the first checkpoint); otherwise refuses an --out
  // that already holds an online run. Delivers at most `needed` samples.
  void start(bool resume, const nlohmann::json& state, int64_t needed, EventSink sink);

  // The next verified sample (blocking); nullopt when the stream is exhausted (every prompt
  // trained, failed or not needed). Rethrows a worker's fatal error.
  std::optional<OnlineItem> pop();
  // After the optimizer step that trained `it`: `steps_done` steps are complete.
  void trained(const OnlineItem& it, int64_t steps_done);
  // The state a checkpoint records (fsyncs OUT/online_consumed.jsonl first); then, once the
  // checkpoint is on disk, checkpoint_saved() deletes the samples it includes from the store.
  nlohmann::json checkpoint_state();
  void checkpoint_saved();

  // Stops the workers (aborting requests in flight). `complete`: the run is over, so every sample
  // left under this run's prefix is deleted from the store (the sweep). Idempotent.
  void stop(bool complete);

  // Writes nothing: POST /v1/load_drafter {"path": dir} to every server; one answer each.
  nlohmann::json reload_drafter(const std::string& abs_dir);

  // For the progress line and train_log.jsonl.
  nlohmann::json step_fields() const;
  std::string status_line() const;
  nlohmann::json summary() const;
  const std::string& run_id() const { return run_id_; }
  const std::string& handle_prefix() const { return prefix_; }

  // What the source holds per prompt now (tests: none of it may grow with the prompts sent).
  struct Bookkeeping {
    int64_t pending = 0;            // work items not yet taken (fall as the run goes)
    int64_t in_flight = 0;          // work items a worker holds (at most --in-flight)
    int64_t queued = 0;             // verified samples waiting for the training loop
    int64_t trained_ranges = 0;     // trained_set_'s ranges (1 + gaps)
    int64_t handles_to_delete = 0;  // trained handles not yet deleted from the store
  };
  Bookkeeping bookkeeping() const;

 private:
  // A prompt's work item, with everything this run keeps of the prompt while it is in flight.
  // Its attempt and corrupt counts live here, not in a per-prompt map: only the one worker that
  // holds the item reads or writes them, and once the item is done (the sample queued, the prompt
  // given up, or the run stopping) nothing of the prompt stays in memory but its trained_set_
  // bit. Request ids stay unique across sessions through the journal: a resumed run's counts
  // come from its "sent" entries (plan_resume), not from memory.
  struct Work {
    int64_t prompt = -1;
    bool fetch = false;  // resume: the journaled handle, read from the store again
    std::string handle, server;
    std::vector<int32_t> generated;
    PromptState state;  // the next attempt (a<k> of the request id) and the corrupt samples so far
  };
  struct Reply {
    std::vector<int32_t> prompt_ids, generated;
    std::string handle, server;
  };
  void worker();
  void poller();
  std::optional<Work> take();
  void process(Work w, connector::HiddenStatesStore& store);
  // nullopt: the prompt failed (4xx, counted) or the source is stopping.
  std::optional<Reply> request(int64_t prompt, PromptState& state);
  // Logs, journals and deletes a corrupt sample; true when the prompt is now given up.
  bool corrupt(int64_t prompt, PromptState& state, const std::string& handle,
               const std::string& why, connector::HiddenStatesStore& store, bool wait_for_manifest);
  void give_up(int64_t prompt, const std::string& why);
  void finish_work();
  bool reserve_slot();
  void release_slot();
  void fatal(std::exception_ptr e);
  void event(nlohmann::json j);
  std::vector<ChatMessage> messages(int64_t prompt) const;
  bool sleep_unless_stopped(double seconds);

  OnlineOptions o_;
  std::string out_, target_;
  TargetNorm norm_;
  std::vector<int> layers_;
  int batch_;
  std::vector<datagen::RegenPrompt> prompts_;
  std::unique_ptr<Tokenizer> tok_;
  ChatFormat format_ = ChatFormat::ChatML;
  std::unique_ptr<ServerPool> pool_;
  std::string run_id_, prefix_;
  EventSink sink_;
  std::unique_ptr<SyncedLog> journal_, consumed_;
  std::unique_ptr<connector::HiddenStatesStore> main_store_;  // the training thread's connection

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Work> todo_;
  int64_t need_ = 0;  // samples still to deliver
  int active_ = 0;    // work items taken by workers
  int reserved_ = 0;  // queue slots taken (queued samples and samples being read)
  int capacity_ = 1;
  std::deque<OnlineItem> queue_;
  bool stopping_ = false, stopped_ = false, started_ = false;
  std::exception_ptr error_;
  IndexSet trained_set_;  // ranges: one per gap (a failed prompt, or one still in flight)
  // Trained since the last checkpoint_state(), and included in it but not yet deleted from the
  // store: each at most --save-every x --batch handles.
  std::vector<std::string> trained_handles_, deleting_;
  int64_t n_trained_ = 0, n_trained_session_ = 0, n_corrupt_ = 0, n_failed_ = 0, n_fetched_ = 0;
  double start_time_ = 0;
  std::atomic<int64_t> backlog_{-1};
  std::vector<std::thread> threads_;
  std::thread poller_;
};

}  // namespace dspark::train
