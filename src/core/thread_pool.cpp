#include "core/thread_pool.h"

#include "core/error.h"

#include <immintrin.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace dspark {
namespace detail {
namespace {

thread_local bool t_in_task = false;

// The current job. `state` packs generation (24 bits) | number of tasks (20) | next task index
// (20); a worker may run a task only after a successful compare-exchange on a state of the
// job's own generation whose next index is below that state's own task count.
//
// The task count must live in the same word as the index: read from a separate field, a worker
// that loaded an exhausted state of job g could see the count of job g+1 (whose fields run()
// writes before publishing its state), take the stale state's next index as a valid task, and
// call job g's finished (destroyed) function. That race crashed a pool worker inside a gemm.
constexpr int kCountBits = 20;
constexpr uint64_t kCountMask = (uint64_t(1) << kCountBits) - 1;
constexpr int kMaxTasks = int(kCountMask);
inline uint64_t state_gen(uint64_t s) { return s >> (2 * kCountBits); }
inline int state_count(uint64_t s) { return int((s >> kCountBits) & kCountMask); }
inline int state_next(uint64_t s) { return int(s & kCountMask); }

struct Job {
  std::atomic<uint64_t> state{0};
  std::atomic<TaskFn> fn{nullptr};
  std::atomic<void*> ctx{nullptr};
  std::atomic<int> done{0};
};

class Pool {
 public:
  explicit Pool(int n) : n_(n) {
    for (int i = 1; i < n; ++i) workers_.emplace_back([this] { worker_loop(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int size() const { return n_; }

  void run(int n_tasks, TaskFn fn, void* ctx) {
    if (n_tasks > kMaxTasks) {  // beyond the state word's count: run in rounds
      for (int t0 = 0; t0 < n_tasks; t0 += kMaxTasks) {
        struct Offset {
          TaskFn fn;
          void* ctx;
          int t0;
        } o{fn, ctx, t0};
        run(std::min(kMaxTasks, n_tasks - t0),
            [](void* c, int t) {
              auto* p = static_cast<Offset*>(c);
              p->fn(p->ctx, p->t0 + t);
            },
            &o);
      }
      return;
    }
    std::lock_guard<std::mutex> serial(run_mu_);  // one job at a time
    const uint64_t gen = (state_gen(job_.state.load(std::memory_order_relaxed)) + 1) & 0xffffff;
    job_.fn.store(fn, std::memory_order_relaxed);
    job_.ctx.store(ctx, std::memory_order_relaxed);
    job_.done.store(0, std::memory_order_relaxed);
    job_.state.store((gen << (2 * kCountBits)) | (uint64_t(n_tasks) << kCountBits), std::memory_order_release);
    if (sleepers_.load(std::memory_order_acquire) > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_.notify_all();
    }
    t_in_task = true;
    work(gen);
    t_in_task = false;
    while (job_.done.load(std::memory_order_acquire) < n_tasks) _mm_pause();
  }

 private:
  // Grabs and runs tasks of generation `gen` until none are left.
  void work(uint64_t gen) {
    for (;;) {
      uint64_t s = job_.state.load(std::memory_order_acquire);
      if (state_gen(s) != gen) return;
      const int next = state_next(s);
      if (next >= state_count(s)) return;
      // Job `gen` still has unclaimed tasks, so its caller is waiting and the next job has not
      // begun: fn and ctx (published before this state) are this job's.
      const TaskFn fn = job_.fn.load(std::memory_order_relaxed);
      void* ctx = job_.ctx.load(std::memory_order_relaxed);
      if (!job_.state.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) continue;
      fn(ctx, next);
      job_.done.fetch_add(1, std::memory_order_release);
    }
  }

  void worker_loop() {
    uint64_t seen = state_gen(job_.state.load(std::memory_order_acquire));
    for (;;) {
      // Spin briefly: within a forward pass the next job follows within microseconds.
      uint64_t gen = seen;
      for (int i = 0; i < 20000 && gen == seen; ++i) {
        _mm_pause();
        gen = state_gen(job_.state.load(std::memory_order_acquire));
      }
      if (gen == seen) {
        std::unique_lock<std::mutex> lock(mu_);
        sleepers_.fetch_add(1, std::memory_order_acq_rel);
        cv_.wait(lock, [&] {
          return stop_ || state_gen(job_.state.load(std::memory_order_acquire)) != seen;
        });
        sleepers_.fetch_sub(1, std::memory_order_acq_rel);
        if (stop_) return;
        gen = state_gen(job_.state.load(std::memory_order_acquire));
      }
      seen = gen;
      t_in_task = true;
      work(gen);
      t_in_task = false;
    }
  }

  int n_;
  Job job_;
  std::vector<std::thread> workers_;
  std::mutex run_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> sleepers_{0};
  bool stop_ = false;
};

std::mutex g_pool_mu;
Pool* g_pool = nullptr;

Pool& pool() {
  Pool* p = g_pool;
  if (p) return *p;
  set_num_threads(0);
  return *g_pool;
}

}  // namespace

void run_parallel(int n_tasks, TaskFn fn, void* ctx) { pool().run(n_tasks, fn, ctx); }
bool in_parallel_region() { return t_in_task; }

}  // namespace detail

int env_thread_count() {
  const char* env = std::getenv("DSPARK_THREADS");
  if (!env || !*env) return 0;
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(env, &end, 10);
  if (*end || errno == ERANGE || v < 0 || v > 1024)
    fail("environment variable DSPARK_THREADS must be an integer from 0 to 1024 (0: every core), got '", env, "'");
  return int(v);
}

void set_num_threads(int n) {
  if (n <= 0) {
    // Default: DSPARK_THREADS if set, else every core.
    n = env_thread_count();
    if (n <= 0) n = int(std::max(1u, std::thread::hardware_concurrency()));
  }
  std::lock_guard<std::mutex> lock(detail::g_pool_mu);
  if (detail::g_pool && detail::g_pool->size() == n) return;
  delete detail::g_pool;
  detail::g_pool = new detail::Pool(n);
}

int num_threads() { return detail::pool().size(); }

}  // namespace dspark
