#include "train/caching_allocator.h"

#include <c10/core/CPUAllocator.h>

#include <bit>
#include <cstdlib>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace dspark::train {
namespace {

// Every block starts with this header, one alignment unit long; the tensor's data follows it,
// so the data pointer alone finds its block (the raw-deleter contract: context == data).
struct Header {
  std::size_t cls;  // size class in bytes (0: an uncached block that goes back to free())
  CachingCpuAllocator* owner;
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
  std::size_t max_cached;
  mutable std::mutex mu;
  std::unordered_map<std::size_t, std::vector<Header*>> free;  // by size class
  CachingAllocatorStats stats;
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

void CachingCpuAllocator::recycle(void* block) const {
  Header* h = static_cast<Header*>(block);
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stats.live_bytes -= h->cls;
    if (state_->stats.cached_bytes + h->cls <= state_->max_cached) {
      state_->free[h->cls].push_back(h);
      state_->stats.cached_bytes += h->cls;
      return;
    }
  }
  std::free(h);
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
      if (it != state_->free.end() && !it->second.empty()) {
        h = it->second.back();
        it->second.pop_back();
        state_->stats.cached_bytes -= cls;
        ++state_->stats.reused;
      }
      state_->stats.live_bytes += cls;
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
  std::vector<Header*> blocks;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    for (auto& [cls, list] : state_->free) blocks.insert(blocks.end(), list.begin(), list.end());
    state_->free.clear();
    state_->stats.cached_bytes = 0;
  }
  for (Header* h : blocks) std::free(h);
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
