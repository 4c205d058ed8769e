// The trainer's caching CPU allocator: blocks are reused by size class, the cache stays within
// the peak of live bytes and the cap (evicting the blocks cached longest), small blocks bypass
// it, and a training step computes bit-identical results through it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "train/caching_allocator.h"

namespace dspark::train {
namespace {

TEST(CachingAllocator, ReusesFreedBlocksOfTheSameSizeClass) {
  CachingCpuAllocator a(std::size_t(64) << 20);
  void* first = nullptr;
  {
    c10::DataPtr p = a.allocate((1 << 20) + 1);  // class 1 MiB + 128 KiB
    first = p.get();
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(first) % CachingCpuAllocator::kAlignment, 0u);
    static_cast<char*>(first)[1 << 20] = 1;  // the whole request is usable
  }
  EXPECT_EQ(a.stats().cached_bytes, (std::size_t(1) << 20) + (128 << 10));
  {
    // 1 MiB + 100,000 bytes falls in the same class; it gets the same block back.
    c10::DataPtr p = a.allocate((1 << 20) + 100000);
    EXPECT_EQ(p.get(), first);
    EXPECT_EQ(a.stats().cached_bytes, 0u);
    EXPECT_EQ(a.stats().live_bytes, (std::size_t(1) << 20) + (128 << 10));
  }
  {
    // A different class gets a different block.
    c10::DataPtr p = a.allocate(3 << 20);
    EXPECT_NE(p.get(), first);
  }
  const CachingAllocatorStats s = a.stats();
  EXPECT_EQ(s.allocations, 3u);
  EXPECT_EQ(s.reused, 1u);
  EXPECT_EQ(s.live_bytes, 0u);
  a.empty_cache();
  EXPECT_EQ(a.stats().cached_bytes, 0u);
}

TEST(CachingAllocator, SmallBlocksBypassTheCacheAndTheBoundHolds) {
  CachingCpuAllocator a(std::size_t(1) << 20);  // room for one 1 MiB block
  {
    c10::DataPtr small = a.allocate(1000);
    ASSERT_NE(small.get(), nullptr);
    c10::DataPtr zero = a.allocate(0);
    EXPECT_EQ(zero.get(), nullptr);
  }
  EXPECT_EQ(a.stats().allocations, 0u);
  EXPECT_EQ(a.stats().cached_bytes, 0u);
  {
    c10::DataPtr x = a.allocate(1 << 20);
    c10::DataPtr y = a.allocate(1 << 20);
    EXPECT_NE(x.get(), y.get());
  }
  // Both were freed; only one fits under the bound.
  EXPECT_EQ(a.stats().cached_bytes, std::size_t(1) << 20);
  EXPECT_EQ(a.stats().live_bytes, 0u);
}

// Online training's pattern: weights and optimizer state stay live, and every step holds a
// working set whose sizes follow the sample's length, which varies, then frees it all. The cache
// must stay within the peak of live bytes (it grew to the cap, 8 GiB by default, when every new
// size class stayed cached forever), and a steady shape afterwards must still be served entirely
// from the cache.
TEST(CachingAllocator, VaryingSizesStayWithinThePeakOfLiveBytesAndSteadyShapesAreReused) {
  CachingCpuAllocator a(std::size_t(8) << 30);  // the default cap: never the binding bound here
  // Weights, gradients and the optimizer's moments: live throughout, in the peak (as in the
  // trainers, where they are 150 of the 354 MiB peak in the demo soak). They are what lets a step
  // whose buffers of some size are never live at the same time as those of another (here `tmp`
  // and the last buffer) keep all of its blocks cached: that takes more than the step's own peak.
  std::vector<c10::DataPtr> weights;
  for (int i = 0; i < 4; ++i) weights.push_back(a.allocate(std::size_t(2) << 20));
  std::size_t peak = a.stats().live_bytes;  // measured here, from live_bytes after every allocation
  auto step = [&](std::size_t len) {
    std::vector<c10::DataPtr> live;
    // Activations, logits and gradients: three shapes per length, all held at once.
    for (std::size_t per_token : {std::size_t(4096), std::size_t(8192 * 4), std::size_t(12000)}) {
      live.push_back(a.allocate(len * per_token));
      peak = std::max(peak, a.stats().live_bytes);
    }
    // A temporary freed within the step, then a block of another size.
    { c10::DataPtr tmp = a.allocate(len * 2048 + 300000); }
    live.push_back(a.allocate(len * 6000));
    peak = std::max(peak, a.stats().live_bytes);
  };
  std::uint64_t x = 12345;
  std::size_t longest = 0;
  for (int i = 0; i < 300; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const std::size_t len = 64 + (x >> 33) % 448;  // 64..511 tokens
    longest = std::max(longest, len);
    step(len);
    const CachingAllocatorStats s = a.stats();
    ASSERT_EQ(s.live_bytes, std::size_t(8) << 20) << "step " << i;
    ASSERT_LE(s.cached_bytes, peak) << "step " << i << ": the cache outgrew the working set";
  }
  const CachingAllocatorStats after = a.stats();
  EXPECT_EQ(after.peak_live_bytes, peak);
  EXPECT_GT(after.evicted, 0u);
  EXPECT_GT(after.reused, 0u);
  // The sizes that stopped coming age out; a steady shape is mapped once and then reused.
  step(longest);
  const CachingAllocatorStats warm = a.stats();
  for (int i = 0; i < 20; ++i) step(longest);
  const CachingAllocatorStats steady = a.stats();
  EXPECT_EQ(steady.allocations - warm.allocations, 20u * 5);
  EXPECT_EQ(steady.reused - warm.reused, 20u * 5) << "a steady shape missed the cache";
  EXPECT_EQ(steady.evicted, warm.evicted);
  EXPECT_LE(steady.cached_bytes, steady.peak_live_bytes);
}

TEST(CachingAllocator, EvictsTheBlocksFreedLongestAgoNotTheOneBeingFreed) {
  CachingCpuAllocator a(std::size_t(1) << 30);
  constexpr std::size_t MiB = std::size_t(1) << 20;
  void *pa, *pb, *pc, *pd;
  {
    c10::DataPtr ba = a.allocate(MiB), bb = a.allocate(MiB + MiB / 4),
                 bc = a.allocate(MiB + MiB / 2);
    pa = ba.get(), pb = bb.get(), pc = bc.get();
    EXPECT_EQ(a.stats().peak_live_bytes, 3 * MiB + 3 * MiB / 4);
    ba.clear();  // freed in the order a, b, c
    bb.clear();
  }
  EXPECT_EQ(a.stats().cached_bytes, 3 * MiB + 3 * MiB / 4);  // all of it: the peak
  {
    // A new size: freeing it must make room for itself by evicting a, then b (the oldest), and
    // keep c (1.5 MiB + 2 MiB fit under the 3.75 MiB peak).
    c10::DataPtr d = a.allocate(2 * MiB);
    pd = d.get();
  }
  CachingAllocatorStats s = a.stats();
  EXPECT_EQ(s.evicted, 2u);
  EXPECT_EQ(s.cached_bytes, 3 * MiB + MiB / 2);
  EXPECT_LE(s.cached_bytes, s.peak_live_bytes);
  {
    c10::DataPtr d = a.allocate(2 * MiB);  // the block just freed, kept
    EXPECT_EQ(d.get(), pd);
    c10::DataPtr c = a.allocate(MiB + MiB / 2);
    EXPECT_EQ(c.get(), pc);
  }
  s = a.stats();
  EXPECT_EQ(s.reused, 2u);
  {
    c10::DataPtr b = a.allocate(MiB + MiB / 4);  // evicted: a fresh block
    EXPECT_EQ(a.stats().reused, 2u);
    (void)pa;
    (void)pb;
  }
}

TEST(CachingAllocator, TheNewestBlockOfAClassIsReusedFirst) {
  CachingCpuAllocator a(std::size_t(1) << 30);
  void *first, *second;
  {
    c10::DataPtr x = a.allocate(1 << 20), y = a.allocate(1 << 20);
    first = x.get();
    second = y.get();
    x.clear();  // x, then y, freed
  }
  c10::DataPtr z = a.allocate(1 << 20);
  EXPECT_EQ(z.get(), second);
  c10::DataPtr w = a.allocate(1 << 20);
  EXPECT_EQ(w.get(), first);
  EXPECT_EQ(a.stats().cached_bytes, 0u);
}

// One forward/backward/update of a small MLP; returns the updated weights.
torch::Tensor train_step_result() {
  torch::manual_seed(3);
  torch::nn::Sequential net(torch::nn::Linear(256, 1024), torch::nn::SiLU(),
                            torch::nn::Linear(1024, 512));
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(1e-3));
  torch::Tensor x = torch::randn({512, 256});
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    torch::Tensor loss = net->forward(x).pow(2).mean();
    loss.backward();
    opt.step();
  }
  std::vector<torch::Tensor> flat;
  for (const auto& p : net->parameters()) flat.push_back(p.detach().flatten().clone());
  return torch::cat(flat);
}

TEST(CachingAllocator, TrainingThroughItIsBitIdenticalAndReusesBlocks) {
  const torch::Tensor reference = train_step_result();
  c10::Allocator* previous = c10::GetCPUAllocator();
  CachingCpuAllocator& a = CachingCpuAllocator::install();
  ASSERT_EQ(c10::GetCPUAllocator(), &a);
  ASSERT_EQ(CachingCpuAllocator::installed(), &a);
  const torch::Tensor cached = train_step_result();
  const CachingAllocatorStats s = a.stats();
  c10::SetCPUAllocator(previous, /*priority=*/1);
  EXPECT_TRUE(torch::equal(reference, cached));
  EXPECT_GT(s.allocations, 0u);
  EXPECT_GT(s.reused, 0u);
}

}  // namespace
}  // namespace dspark::train
