// ThreadPool: the process's one set of compute threads.
//
// parallel_for hands out task indices through one atomic word; the calling thread works too,
// and it waits only for tasks that were actually started. A worker descheduled by another
// process therefore never stalls a step: whoever is running takes the remaining tasks.
#pragma once

#include <atomic>
#include <cstdint>

namespace dspark {

// Number of compute threads, the caller included; set from --threads (0: the
// DSPARK_THREADS environment variable if set, else all cores).
void set_num_threads(int n);
// DSPARK_THREADS as a count (0 when unset); throws Error naming the variable when it is not an
// integer from 0 to 1024.
int env_thread_count();
int num_threads();

namespace detail {
using TaskFn = void (*)(void* ctx, int task);
void run_parallel(int n_tasks, TaskFn fn, void* ctx);
bool in_parallel_region();
}  // namespace detail

// Runs fn(task) for every task in [0, n_tasks), spread over the pool. fn runs on several
// threads at once; calls made from inside a task run serially on that thread.
template <class Fn>
void parallel_for(int n_tasks, Fn&& fn) {
  if (n_tasks <= 0) return;
  if (n_tasks == 1 || num_threads() == 1 || detail::in_parallel_region()) {
    for (int t = 0; t < n_tasks; ++t) fn(t);
    return;
  }
  using F = std::remove_reference_t<Fn>;
  detail::run_parallel(
      n_tasks, [](void* ctx, int task) { (*static_cast<F*>(ctx))(task); }, const_cast<void*>(static_cast<const void*>(&fn)));
}

}  // namespace dspark
