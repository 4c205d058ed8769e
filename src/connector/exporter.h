// Exporter: writes finished requests' hidden states to the store off the engine loop, so that a
// slow or dead store never stalls serving. submit() never blocks: past the pending bound (count
// or bytes) the sample is dropped and counted; a store out of memory (StoreFull) drops it too.
// A store that cannot be reached is retried (reconnecting, with backoff) until `retry_for`
// passes, then the sample is counted failed. Requests are never failed or delayed for it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "connector/hidden_states_store.h"

namespace dspark::connector {

struct ExporterOptions {
  int max_pending = 64;                  // samples queued or being written
  int64_t max_pending_bytes = 1ll << 30;  // their hidden-state bytes
  int threads = 2;                        // writer threads
  std::chrono::milliseconds retry_for{10000};
};

struct ExportCounts {
  int64_t written = 0;         // committed (manifest written)
  int64_t errors_written = 0;  // error manifests written
  int64_t dropped_full = 0;    // the pending bound was hit
  int64_t dropped_store_full = 0;  // the store refused for lack of memory
  int64_t failed = 0;          // the store could not be reached within retry_for
  int64_t pending = 0;
  int64_t bytes_written = 0;   // tensor bytes (hidden states and token ids) of written samples
};

class Exporter {
 public:
  // `open` makes one store connection per writer thread.
  Exporter(std::function<std::unique_ptr<HiddenStatesStore>()> open, ExporterOptions opt);
  ~Exporter();  // close()

  // Queues the sample; false when it was dropped (counted in dropped_full).
  bool submit(HiddenSample s);
  // Queues an error manifest for `handle` (extraction failed); never dropped for the byte bound.
  bool submit_error(std::string handle, std::string message);
  ExportCounts counts() const;
  // Waits up to `timeout` for the pending samples to be written, then stops the writers.
  void close(std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));

 private:
  struct Job {
    HiddenSample sample;
    std::string error;  // non-empty: an error manifest for sample.handle
  };
  void run(HiddenStatesStore* store);
  ExporterOptions opt_;
  std::vector<std::unique_ptr<HiddenStatesStore>> stores_;
  mutable std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<Job> queue_;
  int64_t pending_bytes_ = 0;
  int busy_ = 0;
  bool closing_ = false;
  bool abandon_ = false;  // close() timed out: writers stop retrying and leave the queue
  ExportCounts counts_;
  std::vector<std::thread> threads_;
};

}  // namespace dspark::connector
