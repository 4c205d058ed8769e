#include "train/caching_allocator.h"

#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace dspark::train {
namespace {

// Every block starts with this header, one alignment unit long; the tensor's data follows it,
// so the data pointer alone finds its block (the raw-deleter contract: context == data). While a
// block is cached, the links put it on two intrusive lists (no allocation per block): the cache's
// age order, oldest first, and its size class's stack, newest on top.
struct Header {
  std::size_t cls;  // size class in bytes (0: an uncached block that goes back to free())
  CachingCpuAllocator* owner;
  Header* older;  // age order (by the time the block was freed)
  Header* newer;
  Header* below;  // the class's stack (within a class, the same order as the age order)
  Header* above;
};
static_assert(sizeof(Header) <= CachingCpuAllocator::kAlignment);

// Size classes: 8 per power of two (at most 12.5% slack), so buffers whose shapes vary a little
// from step to step (drafter samples of different lengths) still find a cached block.
std::size_t size_class(std::size_t n) {
  const int k = std::bit_width(n) - 1;  // 2^k <= n < 2^(k+1)
  const std::size_t step = std::size_t(1) << (k - 3);
  return (n + step - 1) / step * step;
}

Header* header_of(void* data) {
  return reinterpret_cast<Header*>(static_cast<char*>(data) - CachingCpuAllocator::kAlignment);
}

void* system_alloc(std::size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, CachingCpuAllocator::kAlignment, bytes) != 0) return nullptr;
  return p;
}

CachingCpuAllocator* g_installed = nullptr;

}  // namespace

struct CachingCpuAllocator::State {
  struct Stack {
    Header* top = nullptr;     // the newest block of the class: reused first (its pages are warm)
    Header* bottom = nullptr;  // its oldest: evicted first
  };
  std::size_t max_cached;
  mutable std::mutex mu;
  std::unordered_map<std::size_t, Stack> free;  // by size class; no empty stacks
  Header* oldest = nullptr;                     // the age order's ends
  Header* newest = nullptr;
  CachingAllocatorStats stats;

  // Unlinks cached block h from both lists. Caller holds mu.
  void unlink(Header* h) {
    (h->older ? h->older->newer : oldest) = h->newer;
    (h->newer ? h->newer->older : newest) = h->older;
    auto it = free.find(h->cls);
    Stack& st = it->second;
    (h->below ? h->below->above : st.bottom) = h->above;
    (h->above ? h->above->below : st.top) = h->below;
    if (!st.top) free.erase(it);
    stats.cached_bytes -= h->cls;
  }
  // Caches h as the newest block, of the age order and of its class. Caller holds mu.
  void push(Header* h) {
    h->older = newest;
    h->newer = nullptr;
    (newest ? newest->newer : oldest) = h;
    newest = h;
    Stack& st = free[h->cls];
    h->below = st.top;
    h->above = nullptr;
    (st.top ? st.top->above : st.bottom) = h;
    st.top = h;
    stats.cached_bytes += h->cls;
  }
};

CachingCpuAllocator::CachingCpuAllocator(std::size_t max_cached_bytes) : state_(new State{}) {
  state_->max_cached = max_cached_bytes;
}

CachingCpuAllocator::~CachingCpuAllocator() {
  empty_cache();
  delete state_;
}

void CachingCpuAllocator::release_block(void* data) {
  if (!data) return;
  Header* h = header_of(data);
  if (h->cls == 0)
    std::free(h);
  else
    h->owner->recycle(h);
}

// The bound is the smaller of the cap and the peak of live bytes. All a step holds at once fits,
// and so do its blocks of sizes that are never live together (a temporary freed before a buffer
// of another size is taken) as far as the long-lived tensors leave room: weights, gradients and
// optimizer state count in the peak but are never freed (150 of a 354 MiB peak in the demo's
// online soak, where 90-100% of a step's requests came from the cache at varying lengths, 100% at
// steady ones). Blocks of sizes that stopped coming (another sample length) age out instead of
// piling up to the cap.
void CachingCpuAllocator::recycle(void* block) const {
  Header* h = static_cast<Header*>(block);
  Header* evicted = nullptr;  // chained through `newer`, freed outside the lock
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    State& s = *state_;
    s.stats.live_bytes -= h->cls;
    const std::size_t bound = std::min(s.max_cached, s.stats.peak_live_bytes);
    if (h->cls <= bound) {
      while (s.stats.cached_bytes + h->cls > bound) {
        Header* old = s.oldest;
        s.unlink(old);
        old->newer = evicted;
        evicted = old;
        ++s.stats.evicted;
      }
      s.push(h);
      h = nullptr;
    }
  }
  if (h) std::free(h);
  while (evicted) {
    Header* next = evicted->newer;
    std::free(evicted);
    evicted = next;
  }
}

c10::DeleterFnPtr CachingCpuAllocator::raw_deleter() const {
  return &release_block;
}

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
c10::DataPtr CachingCpuAllocator::allocate(std::size_t n) {
#else
c10::DataPtr CachingCpuAllocator::allocate(std::size_t n) const {
#endif
  const c10::Device cpu(c10::DeviceType::CPU);
  if (n == 0) return {nullptr, nullptr, &release_block, cpu};
  Header* h = nullptr;
  if (n < kMinCachedBytes) {
    h = static_cast<Header*>(system_alloc(n + kAlignment));
    if (!h) throw std::bad_alloc();
    h->cls = 0;
  } else {
    const std::size_t cls = size_class(n);
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      ++state_->stats.allocations;
      auto it = state_->free.find(cls);
      if (it != state_->free.end()) {
        h = it->second.top;
        state_->unlink(h);
        ++state_->stats.reused;
      }
      state_->stats.live_bytes += cls;
      state_->stats.peak_live_bytes =
          std::max(state_->stats.peak_live_bytes, state_->stats.live_bytes);
    }
    if (!h) {
      h = static_cast<Header*>(system_alloc(cls + kAlignment));
      if (!h) {  // give the cache back to the system and try once more
        empty_cache();
        h = static_cast<Header*>(system_alloc(cls + kAlignment));
      }
      if (!h) {
        std::lock_guard<std::mutex> lock(state_->mu);
        state_->stats.live_bytes -= cls;
        throw std::bad_alloc();
      }
      h->cls = cls;
    }
    h->owner = const_cast<CachingCpuAllocator*>(this);
  }
  void* data = reinterpret_cast<char*>(h) + kAlignment;
  return {data, data, &release_block, cpu};
}

CachingAllocatorStats CachingCpuAllocator::stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->stats;
}

void CachingCpuAllocator::empty_cache() const {
  Header* blocks;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    blocks = state_->oldest;
    state_->oldest = state_->newest = nullptr;
    state_->free.clear();
    state_->stats.cached_bytes = 0;
  }
  while (blocks) {
    Header* next = blocks->newer;
    std::free(blocks);
    blocks = next;
  }
}

CachingCpuAllocator& CachingCpuAllocator::install() {
  static CachingCpuAllocator* instance = [] {
    std::size_t mib = 8192;
    if (const char* env = std::getenv("DSPARK_TRAIN_CACHE_MIB")) {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(env, &end, 10);
      if (end == env || *end != '\0' || v > (std::size_t(1) << 40))
        throw std::runtime_error(
            std::string("DSPARK_TRAIN_CACHE_MIB: expected a whole number of MiB, got '") + env +
            "'");
      mib = v;
    }
    // Never destroyed: tensors may outlive static destruction.
    auto* a = new CachingCpuAllocator(mib << 20);
    c10::SetCPUAllocator(a, /*priority=*/1);
    g_installed = a;
    return a;
  }();
  return *instance;
}

CachingCpuAllocator* CachingCpuAllocator::installed() {
  return g_installed;
}

}  // namespace dspark::train
