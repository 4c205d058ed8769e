#include <gtest/gtest.h>

#include <numeric>
#include <set>
#include <vector>

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

// ---------------------------------------------------------------- prefix caching

std::vector<int32_t> iota_tokens(int n, int32_t from) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), from);
  return t;
}

// A sequence that computed `tokens` (every position committed).
int computed_sequence(KvCache& kv, const std::vector<int32_t>& tokens) {
  const int s = kv.create_sequence();
  kv.reserve(s, int(tokens.size()));
  kv.set_length(s, int(tokens.size()));
  kv.commit(s, 0, tokens);
  return s;
}

TEST(PrefixCache, FullBlocksAreSharedByTheirTokensAndEverythingBefore) {
  KvCache kv(1, 1, 8, DType::F32, 16 * 16);
  kv.set_prefix_caching(true);
  const std::vector<int32_t> p = iota_tokens(40, 100);  // 2 full blocks and 8 positions
  const int a = computed_sequence(kv, p);
  EXPECT_EQ(kv.cached_blocks(), 2) << "only full blocks are cached";

  // The same prompt: both full blocks, the same physical blocks.
  const int b = kv.create_sequence();
  EXPECT_EQ(kv.attach_prefix(b, p, 39), 32);
  EXPECT_EQ(kv.length(b), 32);
  EXPECT_EQ(kv.block_table(b)[0], kv.block_table(a)[0]);
  EXPECT_EQ(kv.block_table(b)[1], kv.block_table(a)[1]);
  // max_len caps the hit to whole blocks below it.
  const int c = kv.create_sequence();
  EXPECT_EQ(kv.attach_prefix(c, p, 31), 16);
  // A different token in the second block: the first block only.
  std::vector<int32_t> q = p;
  q[20] = 7;
  const int d = kv.create_sequence();
  EXPECT_EQ(kv.attach_prefix(d, q, 40), 16);
  // The second block's tokens after a different first block: no hit at all (a block is keyed by
  // everything before it too).
  std::vector<int32_t> r = p;
  r[0] = 7;
  const int e = kv.create_sequence();
  EXPECT_EQ(kv.attach_prefix(e, r, 40), 0);
  // Off: nothing attaches.
  kv.set_prefix_caching(false);
  const int f = kv.create_sequence();
  EXPECT_EQ(kv.attach_prefix(f, p, 40), 0);
}

TEST(PrefixCache, SharedBlocksOutliveTheirFirstSequenceAndFreeOnlyWithTheLast) {
  KvCache kv(1, 1, 8, DType::F32, 16 * 8);
  kv.set_prefix_caching(true);
  const std::vector<int32_t> p = iota_tokens(32, 5);
  const int a = computed_sequence(kv, p);
  EXPECT_EQ(kv.free_blocks(), 6);
  const int b = kv.create_sequence();
  EXPECT_EQ(kv.attach_prefix(b, p, 32), 32);
  EXPECT_EQ(kv.free_blocks(), 6) << "a shared block is held once";
  kv.free_sequence(a);
  EXPECT_EQ(kv.free_blocks(), 6) << "b still holds both blocks";
  kv.free_sequence(b);
  EXPECT_EQ(kv.free_blocks(), 8) << "cached blocks no sequence holds can be taken";
  EXPECT_EQ(kv.cached_blocks(), 2) << "and stay cached until taken";
  const int c = kv.create_sequence();
  EXPECT_EQ(kv.attach_prefix(c, p, 32), 32);
}

// The pool is short while a block is shared: the blocks no sequence holds are evicted, least
// recently used first and a prefix's last block before its first; the shared one is not.
TEST(PrefixCache, EvictionUnderPressureTakesOnlyUnheldBlocksLeastRecentlyUsedFirst) {
  KvCache kv(1, 1, 8, DType::F32, 16 * 6);
  kv.set_prefix_caching(true);
  const std::vector<int32_t> p = iota_tokens(32, 1000), q = iota_tokens(32, 2000);
  const int a = computed_sequence(kv, p);
  const int b = computed_sequence(kv, q);
  const int32_t p0 = kv.block_table(a)[0];
  const int shared = kv.create_sequence();
  EXPECT_EQ(kv.attach_prefix(shared, p, 32), 32);  // holds p's two blocks
  kv.free_sequence(b);  // q's blocks: least recently used
  kv.free_sequence(a);  // p's blocks: still held by `shared`
  EXPECT_EQ(kv.free_blocks(), 4);  // 2 never used, q's 2
  // Three blocks: the two free ones, then q's last block (evicted first).
  const int c = kv.create_sequence();
  kv.reserve(c, 48);
  EXPECT_EQ(kv.free_blocks(), 1);
  EXPECT_EQ(kv.cached_blocks(), 3);
  const int probe = kv.create_sequence();
  EXPECT_EQ(kv.attach_prefix(probe, q, 32), 16) << "q's first block must survive its last";
  kv.free_sequence(probe);
  // Now everything: q's first block goes too; p's blocks stay (held).
  kv.reserve(c, 64);
  EXPECT_THROW(kv.reserve(c, 80), Error) << "held blocks are never evicted";
  const int probe2 = kv.create_sequence();
  EXPECT_EQ(kv.attach_prefix(probe2, q, 32), 0);
  const int probe3 = kv.create_sequence();
  EXPECT_EQ(kv.attach_prefix(probe3, p, 32), 32);
  EXPECT_EQ(kv.block_table(probe3)[0], p0);
}

TEST(PrefixCache, EvictedBlocksAreForgotten) {
  KvCache kv(1, 1, 8, DType::F32, 16 * 3);
  kv.set_prefix_caching(true);
  const std::vector<int32_t> p = iota_tokens(32, 10);
  kv.free_sequence(computed_sequence(kv, p));
  const int a = kv.create_sequence();
  kv.reserve(a, 48);  // every block: both of p's are evicted
  kv.free_sequence(a);
  EXPECT_EQ(kv.cached_blocks(), 0);
  const int probe = kv.create_sequence();
  EXPECT_EQ(kv.attach_prefix(probe, p, 32), 0);
  kv.free_sequence(probe);
  // New content in the reused blocks; p's second block's tokens after it do not match.
  const std::vector<int32_t> x = iota_tokens(16, 500);
  kv.free_sequence(computed_sequence(kv, x));
  std::vector<int32_t> y = x;
  y.insert(y.end(), p.begin() + 16, p.end());
  const int c = kv.create_sequence();
  EXPECT_EQ(kv.attach_prefix(c, y, 32), 16);
}

TEST(PrefixCache, ABlockComputedTwiceIsSharedOnce) {
  KvCache kv(1, 1, 8, DType::F32, 16 * 8);
  kv.set_prefix_caching(true);
  const std::vector<int32_t> p = iota_tokens(20, 3);
  const int a = computed_sequence(kv, p);
  const int b = computed_sequence(kv, p);  // the same prompt, prefilled beside a
  EXPECT_EQ(kv.block_table(b)[0], kv.block_table(a)[0]);
  EXPECT_NE(kv.block_table(b)[1], kv.block_table(a)[1]) << "partial blocks stay private";
  EXPECT_EQ(kv.free_blocks(), 8 - 3);
}

TEST(PrefixCache, CommittedPositionsAreCutOnlyAtBlockBoundaries) {
  KvCache kv(1, 1, 8, DType::F32, 16 * 4);
  kv.set_prefix_caching(true);
  const int a = computed_sequence(kv, iota_tokens(40, 0));
  EXPECT_THROW(kv.truncate(a, 20), Error);
  EXPECT_THROW(kv.commit(a, 39, iota_tokens(1, 0)), Error) << "commits continue where they ended";
  kv.truncate(a, 16);
  EXPECT_EQ(kv.length(a), 16);
  kv.reserve(a, 20);
  kv.set_length(a, 20);
  kv.commit(a, 16, iota_tokens(4, 16));
}

}  // namespace
}  // namespace dspark
