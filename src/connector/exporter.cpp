#include "connector/exporter.h"

#include <algorithm>

namespace dspark::connector {

namespace {

using clock = std::chrono::steady_clock;
enum class Outcome { Written, StoreFull, Failed };

constexpr std::chrono::milliseconds kFirstBackoff{50}, kMaxBackoff{1000};

int64_t tensor_bytes(const HiddenSample& s) {
  return int64_t(s.hidden_bytes.size() + s.token_ids.size() * sizeof(int64_t));
}

}  // namespace

Exporter::Exporter(std::function<std::unique_ptr<HiddenStatesStore>()> open, ExporterOptions opt)
    : opt_(opt) {
  if (!open) fail("hidden-states exporter: no store to open");
  const int n = std::max(1, opt_.threads);
  for (int i = 0; i < n; ++i) {
    stores_.push_back(open());
    if (!stores_.back()) fail("hidden-states exporter: the store factory returned no store");
  }
  try {
    for (auto& store : stores_) threads_.emplace_back([this, s = store.get()] { run(s); });
  } catch (...) {
    close(std::chrono::milliseconds(0));
    throw;
  }
}

Exporter::~Exporter() {
  close();
}

bool Exporter::submit(HiddenSample s) {
  const int64_t bytes = int64_t(s.hidden_bytes.size());
  {
    std::lock_guard<std::mutex> lk(mu_);
    const int64_t pending = int64_t(queue_.size()) + busy_;
    if (closing_ || pending >= opt_.max_pending ||
        pending_bytes_ + bytes > opt_.max_pending_bytes) {
      ++counts_.dropped_full;
      return false;
    }
    queue_.push_back(Job{std::move(s), {}});
    pending_bytes_ += bytes;
  }
  cv_.notify_all();  // writers also wait on cv_ between retries: notify_one could wake one of those
  return true;
}

bool Exporter::submit_error(std::string handle, std::string message) {
  if (message.empty()) message = "hidden-state extraction failed";  // an empty error is a sample
  {
    std::lock_guard<std::mutex> lk(mu_);
    const int64_t pending = int64_t(queue_.size()) + busy_;
    if (closing_ || pending >= opt_.max_pending) {
      ++counts_.dropped_full;
      return false;
    }
    Job job;
    job.sample.handle = std::move(handle);
    job.error = std::move(message);
    queue_.push_back(std::move(job));
  }
  cv_.notify_all();
  return true;
}

ExportCounts Exporter::counts() const {
  std::lock_guard<std::mutex> lk(mu_);
  ExportCounts c = counts_;
  c.pending = int64_t(queue_.size()) + busy_;
  return c;
}

void Exporter::run(HiddenStatesStore* store) {
  // One attempt after another until written, refused for memory, or retry_for has passed; a
  // close() that timed out (abandon_) ends the waits between attempts.
  auto write = [&](const Job& job) {
    const auto give_up = clock::now() + opt_.retry_for;
    auto backoff = kFirstBackoff;
    for (;;) {
      try {
        if (job.error.empty())
          store->put_sample(job.sample);
        else
          store->put_error(job.sample.handle, job.error);
        return Outcome::Written;
      } catch (const StoreFull&) {
        return Outcome::StoreFull;
      } catch (const StoreError&) {
        if (clock::now() >= give_up) return Outcome::Failed;
        store->reconnect();
        std::unique_lock<std::mutex> lk(mu_);
        if (cv_.wait_until(lk, std::min(clock::now() + backoff, give_up), [&] { return abandon_; }))
          return Outcome::Failed;
        backoff = std::min(backoff * 2, kMaxBackoff);
      } catch (const std::exception&) {  // a sample that cannot be written (check_sample)
        return Outcome::Failed;
      }
    }
  };
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return !queue_.empty() || closing_; });
      if (queue_.empty() || abandon_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      ++busy_;
    }
    const Outcome o = write(job);
    {
      std::lock_guard<std::mutex> lk(mu_);
      --busy_;
      pending_bytes_ -= int64_t(job.sample.hidden_bytes.size());
      if (o == Outcome::Written && job.error.empty()) {
        ++counts_.written;
        counts_.bytes_written += tensor_bytes(job.sample);
      } else if (o == Outcome::Written) {
        ++counts_.errors_written;
      } else if (o == Outcome::StoreFull) {
        ++counts_.dropped_store_full;
      } else {
        ++counts_.failed;
      }
    }
    done_cv_.notify_all();
  }
}

void Exporter::close(std::chrono::milliseconds timeout) {
  std::vector<std::thread> threads;
  std::deque<Job> abandoned;  // freed outside the lock
  {
    std::unique_lock<std::mutex> lk(mu_);
    closing_ = true;
    cv_.notify_all();
    done_cv_.wait_for(lk, timeout, [&] { return queue_.empty() && busy_ == 0; });
    abandon_ = true;
    counts_.failed += int64_t(queue_.size());
    for (const Job& j : queue_) pending_bytes_ -= int64_t(j.sample.hidden_bytes.size());
    abandoned.swap(queue_);
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (std::thread& t : threads) t.join();  // a write under way ends within the store's timeout
}

}  // namespace dspark::connector
