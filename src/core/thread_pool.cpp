#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <thread>

namespace dspark {
namespace {
std::atomic<int> g_threads{0};
}

void set_num_threads(int n) {
  if (n <= 0) n = int(std::max(1u, std::thread::hardware_concurrency()));
  g_threads = n;
  omp_set_num_threads(n);
}

int num_threads() {
  int n = g_threads.load(std::memory_order_relaxed);
  if (n == 0) {
    set_num_threads(0);
    n = g_threads.load();
  }
  return n;
}

}  // namespace dspark
