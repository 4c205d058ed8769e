// ThreadPool: the process's one set of compute threads (the OpenMP team, which oneDNN shares).
#pragma once

#include <omp.h>

namespace dspark {

// Number of compute threads; set once from --threads (default: all cores).
void set_num_threads(int n);
int num_threads();

// Runs fn(task) for task in [0, n_tasks) on the pool; tasks are handed out dynamically.
// fn is called from several threads at once. Nested calls run serially.
template <class Fn>
void parallel_for(int n_tasks, Fn&& fn) {
  if (n_tasks <= 0) return;
  if (n_tasks == 1 || num_threads() == 1 || omp_in_parallel()) {
    for (int t = 0; t < n_tasks; ++t) fn(t);
    return;
  }
  int threads = n_tasks < num_threads() ? n_tasks : num_threads();
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int t = 0; t < n_tasks; ++t) fn(t);
}

// Runs fn(thread_index, n_threads) once on each pool thread (static partitioning).
template <class Fn>
void parallel_threads(Fn&& fn) {
  int n = num_threads();
  if (n == 1 || omp_in_parallel()) {
    fn(0, 1);
    return;
  }
#pragma omp parallel num_threads(n)
  fn(omp_get_thread_num(), n);
}

}  // namespace dspark
