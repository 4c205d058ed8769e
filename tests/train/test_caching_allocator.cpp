// The trainer's caching CPU allocator: blocks are reused by size class, the cache bound holds,
// small blocks bypass it, and a training step computes bit-identical results through it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <c10/core/CPUAllocator.h>

#include <cstdint>

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
