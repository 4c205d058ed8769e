// KvCache: paged key/value storage for many sequences (fixed blocks, per-sequence block tables),
// with automatic prefix caching: full blocks of final KV are kept under their tokens and every
// token before them, shared read-only by later sequences that start with the same tokens, and
// evicted least recently used first once no sequence holds them.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/buffer.h"
#include "core/dtype.h"
#include "kernels/attention.h"

namespace dspark {

class KvCache {
 public:
  // Room for `max_tokens` positions in total across sequences (rounded up to whole blocks).
  // Memory is reserved, not committed: pages are touched only as blocks are used.
  KvCache(int n_layers, int n_kv_heads, int head_dim, DType dtype, int64_t max_tokens);

  int create_sequence();            // a new, empty sequence id
  // Returns its blocks to the pool; its cached blocks stay cached until evicted.
  void free_sequence(int seq);
  // Makes positions [0, len) of seq writable, evicting cached blocks no sequence holds (least
  // recently used first) when no block is free. Throws Error when the pool is exhausted.
  void reserve(int seq, int len);
  // Forgets positions >= len (rejected draft tokens); frees blocks no longer needed. len may cut
  // into committed positions only at a block boundary.
  void truncate(int seq, int len);
  int length(int seq) const;        // positions held (the highest written position + 1)
  void set_length(int seq, int len);
  const int32_t* block_table(int seq) const;

  PagedKvLayer layer(int l) const;
  int n_layers() const { return n_layers_; }
  DType dtype() const { return dtype_; }
  // Blocks a sequence can get: free ones and cached ones no sequence holds.
  int free_blocks() const { return int(free_.size()) + evictable_; }
  int total_blocks() const { return num_blocks_; }
  // Positions seq could hold at most: its own blocks and every free one.
  int64_t room_for(int seq) const;
  int64_t bytes_per_token() const;  // K and V, all layers
  static int64_t bytes_per_token(int n_layers, int n_kv_heads, int head_dim, DType dtype);

  // Prefix caching (off by default). Off, commit() and attach_prefix() do nothing. With
  // share_duplicates off, a block whose identical key is cached already stays private to its
  // sequence (for caches whose blocks also depend on a token after them: EAGLE-3's rows).
  void set_prefix_caching(bool on, bool share_duplicates = true);
  bool prefix_caching() const { return caching_; }
  // Shares with the empty sequence `seq` the longest run of cached blocks that holds the KV of
  // tokens[0, n), n <= max_len: whole blocks only. Sets its length to n and returns n.
  int attach_prefix(int seq, std::span<const int32_t> tokens, int max_len);
  // Positions [pos, pos + tokens.size()) of seq now hold final KV (they are never rewritten), for
  // these tokens; pos is where the last commit ended. Each block this fills is cached, or, when an
  // identical block is cached already, replaced by that one (its own block goes back to the pool;
  // with share_duplicates off it stays private).
  void commit(int seq, int pos, std::span<const int32_t> tokens);
  int committed(int seq) const;  // where the next commit() starts
  int cached_blocks() const { return int(cache_.size()); }  // blocks that can be shared

 private:
  struct Seq {
    bool live = false;
    int length = 0;
    std::vector<int32_t> blocks;
    int committed = 0;  // positions committed; blocks [0, committed / kKvBlock) are cached or shared
  };
  // Per block: how many sequences hold it and, when cached, its key and identity.
  struct BlockMeta {
    int32_t refs = 0;
    bool cached = false;
    uint32_t gen = 0;  // bumped at every caching: (block, gen) names one content
    uint64_t key = 0;
    int32_t parent = -1;  // the block before it in its sequence (-1: the first), at parent_gen
    uint32_t parent_gen = 0;
    int32_t prev = -1, next = -1;  // the LRU list of cached blocks no sequence holds
  };
  static uint64_t block_key(int32_t parent, uint32_t parent_gen, const int32_t* tokens);
  // Whether cached block b holds these tokens after this parent (its key may collide).
  bool holds(int32_t b, int32_t parent, uint32_t parent_gen, const int32_t* tokens) const;
  int32_t take_block();          // a free block, else the least recently used evictable one
  void drop_ref(int32_t block);  // to the free list, or (cached) to the LRU list's tail
  void lru_remove(int32_t block);
  void uncache(int32_t block);
  Seq& seq_ref(int seq);
  const Seq& seq_ref(int seq) const;

  int n_layers_, n_kv_heads_, head_dim_;
  DType dtype_;
  int num_blocks_;
  int64_t layer_bytes_;  // K (or V) bytes of one layer
  HugeBuffer storage_;   // [layer][K | V][block]...
  HugeBuffer scales_;    // fp8: [layer][K | V][head][block][kKvBlock] f32
  int64_t scale_layer_ = 0;  // scales of K (or V) of one layer
  std::vector<int32_t> free_;
  std::vector<Seq> seqs_;
  bool caching_ = false;
  bool share_duplicates_ = true;
  std::vector<BlockMeta> meta_;
  std::vector<int32_t> block_tokens_;  // [block][kKvBlock]: the tokens committed to each block
  std::unordered_map<uint64_t, int32_t> cache_;  // key -> cached block
  int32_t lru_head_ = -1, lru_tail_ = -1;
  int evictable_ = 0;
};

}  // namespace dspark
