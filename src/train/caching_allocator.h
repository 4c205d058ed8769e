// A caching CPU allocator for libtorch tensors.
//
// A training step allocates and frees the same set of large buffers (activations, logits,
// gradients) every step. Through the default allocator each buffer above glibc's mmap
// threshold (at most 32 MiB) is a fresh mmap: the kernel zeroes and maps it page by page
// on first touch, then unmaps it when the tensor dies. On the demo target that churn took
// 6-40% of a step in the kernel (exc_page_fault, clear_page) depending on the day.
//
// This allocator keeps freed blocks of 256 KiB and more in per-size free lists and hands
// them back to the next request of the same rounded size, so a step's buffers are mapped
// once and reused. Smaller blocks go straight to the C heap. Contents of a reused block are
// undefined, exactly like a fresh allocation; libtorch never reads memory it did not write,
// so results are bit-identical to the default allocator.
//
// The cache is bounded by the working set: it never holds more than the peak of live bytes seen
// so far (a step frees its whole working set back, and more than that is never asked for at
// once), nor more than the hard cap (DSPARK_TRAIN_CACHE_MIB). A free that would push it over the
// bound first returns the blocks cached longest (least recently freed) to the system, never the
// block being freed. Without that, samples of varying lengths (online training) kept adding
// blocks of new size classes while stale blocks of old ones were never evicted, and the process
// grew towards the cap (8 GiB): 1.5 GiB cached after 5 minutes of the demo's online soak, against
// 350 MiB (its peak) now. An evicted block goes back to the kernel at once only because each block
// is a mapping of its own: main.cpp keeps glibc's mmap threshold at 128 KiB.
#pragma once

#include <c10/core/Allocator.h>
#include <torch/version.h>

#include <cstddef>
#include <cstdint>

namespace dspark::train {

struct CachingAllocatorStats {
  std::uint64_t allocations = 0;    // requests of kMinCachedBytes or more
  std::uint64_t reused = 0;         // of those, served from the cache
  std::size_t cached_bytes = 0;     // bytes held in free lists now
  std::size_t live_bytes = 0;       // bytes of cached-size blocks handed out and not yet freed
  std::size_t peak_live_bytes = 0;  // the most live_bytes ever (the cache's bound, below the cap)
  std::uint64_t evicted = 0;        // cached blocks returned to the system to keep the bound
};

class CachingCpuAllocator final : public c10::Allocator {
 public:
  static constexpr std::size_t kMinCachedBytes = std::size_t(256) << 10;
  static constexpr std::size_t kAlignment = 64;  // c10's CPU alignment

  // max_cached_bytes caps the free lists (besides the peak of live bytes); the blocks cached
  // longest go back to the system to keep both bounds.
  explicit CachingCpuAllocator(std::size_t max_cached_bytes);
  ~CachingCpuAllocator() override;

// libtorch 2.3 made allocate() non-const and added copy_data() (a GPU machine's PyTorch; Debian
// 12's libtorch is 1.13).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(std::size_t n) override;
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
#else
  c10::DataPtr allocate(std::size_t n) const override;
#endif
  c10::DeleterFnPtr raw_deleter() const override;

  CachingAllocatorStats stats() const;
  // Returns every cached block to the system.
  void empty_cache() const;

  // Installs one process-wide instance as libtorch's CPU allocator (idempotent). The cap is
  // DSPARK_TRAIN_CACHE_MIB if set, else 8 GiB. Returns the instance.
  static CachingCpuAllocator& install();
  // The installed instance, or nullptr.
  static CachingCpuAllocator* installed();

 private:
  struct State;
  static void release_block(void* data);  // the DataPtr deleter; data follows a block header
  void recycle(void* block) const;        // cache a freed cached-size block, evicting the oldest
  State* state_;
};

}  // namespace dspark::train
