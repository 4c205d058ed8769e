#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "model/kv_cache.h"

namespace dspark {
namespace {

TEST(KvCache, ReserveTruncateFree) {
  KvCache kv(2, 2, 8, DType::BF16, 64);  // 4 blocks of 16
  EXPECT_EQ(kv.total_blocks(), 4);
  int a = kv.create_sequence(), b = kv.create_sequence();
  kv.reserve(a, 20);  // 2 blocks
  kv.set_length(a, 20);
  EXPECT_EQ(kv.free_blocks(), 2);
  kv.reserve(b, 32);
  EXPECT_EQ(kv.free_blocks(), 0);
  EXPECT_THROW(kv.reserve(a, 33), Error);  // pool exhausted: an error, not a crash
  kv.truncate(a, 16);                      // drops the second block
  EXPECT_EQ(kv.length(a), 16);
  EXPECT_EQ(kv.free_blocks(), 1);
  kv.truncate(a, 3);
  EXPECT_EQ(kv.free_blocks(), 1);  // still inside the first block
  kv.free_sequence(b);
  EXPECT_EQ(kv.free_blocks(), 3);
  EXPECT_THROW(kv.length(b), Error);
  int c = kv.create_sequence();
  EXPECT_EQ(c, b);  // freed ids are reused
  kv.reserve(c, 48);
  EXPECT_EQ(kv.free_blocks(), 0);
}

TEST(KvCache, BlocksAreDistinct) {
  KvCache kv(1, 1, 8, DType::F32, 160);
  int a = kv.create_sequence(), b = kv.create_sequence();
  kv.reserve(a, 80);
  kv.reserve(b, 80);
  std::set<int32_t> seen;
  for (int s : {a, b})
    for (int i = 0; i < 5; ++i) EXPECT_TRUE(seen.insert(kv.block_table(s)[i]).second);
}

// A sequence's blocks lie in ascending order, also after other sequences were freed and after a
// rejected draft's block was returned, so attention streams its cache forwards. (Freed blocks went
// back first to last, and the next sequence got them descending: a long prompt's decode step took
// 15-20% longer, which made a speculative engine's plain steps lose to plain decoding.)
TEST(KvCache, BlocksOfASequenceAscendAfterFrees) {
  KvCache kv(1, 1, 8, DType::BF16, 16 * 64);
  auto ascending = [&](int seq, int blocks) {
    const int32_t* t = kv.block_table(seq);
    for (int i = 1; i < blocks; ++i)
      if (t[i] != t[i - 1] + 1) return false;
    return true;
  };
  for (int round = 0; round < 3; ++round) {
    const int a = kv.create_sequence();
    kv.reserve(a, 16 * 20);
    ASSERT_TRUE(ascending(a, 20)) << "round " << round;
    kv.truncate(a, 16 * 19 + 3);  // a rejected draft's block goes back, and is taken again
    kv.reserve(a, 16 * 20);
    EXPECT_TRUE(ascending(a, 20)) << "round " << round << ", after a truncation";
    kv.free_sequence(a);
  }
  // Two sequences freed in turn: the next one still ascends.
  const int a = kv.create_sequence(), b = kv.create_sequence();
  kv.reserve(a, 16 * 10);
  kv.reserve(b, 16 * 10);
  kv.free_sequence(a);
  kv.free_sequence(b);
  const int c = kv.create_sequence();
  kv.reserve(c, 16 * 10);
  EXPECT_TRUE(ascending(c, 10));
}

}  // namespace
}  // namespace dspark
