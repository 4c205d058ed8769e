// OutputChannel: hands one request's engine outputs from the engine thread to its HTTP thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

#include "runtime/engine.h"

namespace dspark {

class OutputChannel {
 public:
  // The engine's OutputFn: never blocks beyond a short lock.
  void push(RequestOutput&& out) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(out));
    }
    cv_.notify_one();
  }

  // Waits up to `timeout` for outputs and takes all that are queued (none on a timeout), so the
  // caller can check for a stopping server or a departed client between waits.
  std::vector<RequestOutput> take(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !queue_.empty(); });
    std::vector<RequestOutput> out(std::make_move_iterator(queue_.begin()),
                                   std::make_move_iterator(queue_.end()));
    queue_.clear();
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
};

}  // namespace dspark
