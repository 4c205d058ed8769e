#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace dspark {
namespace {

// Back-to-back jobs of alternating sizes: every task of every job runs exactly once, and no
// task runs for a job that has already returned (a worker reading a stale job's function or
// task count). Each job's state stays allocated afterwards and is marked finished, so a stale
// call is counted instead of touching freed memory.
TEST(ThreadPool, EveryTaskRunsOnceAndNeverAfterItsJobReturned) {
  // More threads than cores: the OS preempts threads at arbitrary points, which widens every
  // race window between publishing a job and a worker reading it.
  set_num_threads(int(std::thread::hardware_concurrency()) * 2 + 2);
  struct JobState {
    std::atomic<bool> finished{false};
    std::vector<std::atomic<int>> hits;
  };
  constexpr int kJobs = 60000;
  std::mt19937 rng(11);
  std::vector<JobState> jobs(kJobs);
  std::atomic<long> stale{0}, out_of_range{0};
  for (int j = 0; j < kJobs; ++j) {
    // Small jobs after large ones and the reverse: a worker holding an exhausted small job's
    // state must not take the next, larger job's count for its own.
    const int n = (j % 2 == 0) ? 1 + int(rng() % 3) : 8 + int(rng() % 56);
    JobState& js = jobs[size_t(j)];
    js.hits = std::vector<std::atomic<int>>(size_t(n));
    parallel_for(n, [&js, n, &stale, &out_of_range](int t) {
      if (js.finished.load(std::memory_order_relaxed)) stale.fetch_add(1);
      if (t < 0 || t >= n) {
        out_of_range.fetch_add(1);
        return;
      }
      js.hits[size_t(t)].fetch_add(1, std::memory_order_relaxed);
    });
    js.finished.store(true, std::memory_order_relaxed);
    for (int t = 0; t < n; ++t)
      ASSERT_EQ(js.hits[size_t(t)].load(), 1) << "job " << j << " task " << t;
    std::vector<std::atomic<int>>().swap(js.hits);
  }
  EXPECT_EQ(stale.load(), 0);
  EXPECT_EQ(out_of_range.load(), 0);
  set_num_threads(0);
}

// More tasks than one job word can count still run, each once.
TEST(ThreadPool, HugeTaskCountsRunInRounds) {
  const int n = (1 << 20) + 77;
  std::vector<std::atomic<unsigned char>> hit(static_cast<size_t>(n));
  parallel_for(n, [&](int t) { hit[size_t(t)].fetch_add(1, std::memory_order_relaxed); });
  for (int t = 0; t < n; ++t) ASSERT_EQ(hit[size_t(t)].load(), 1) << t;
}

}  // namespace
}  // namespace dspark
