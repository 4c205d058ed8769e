// KvCache: paged key/value storage for many sequences (fixed blocks, per-sequence block tables).
#pragma once

#include <cstdint>
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
  void free_sequence(int seq);      // returns its blocks to the pool
  // Makes positions [0, len) of seq writable. Throws Error when the pool is exhausted.
  void reserve(int seq, int len);
  // Forgets positions >= len (rejected draft tokens); frees blocks no longer needed.
  void truncate(int seq, int len);
  int length(int seq) const;        // positions held (the highest written position + 1)
  void set_length(int seq, int len);
  const int32_t* block_table(int seq) const;

  PagedKvLayer layer(int l) const;
  int n_layers() const { return n_layers_; }
  DType dtype() const { return dtype_; }
  int free_blocks() const { return int(free_.size()); }
  int total_blocks() const { return num_blocks_; }
  // Positions seq could hold at most: its own blocks and every free one.
  int64_t room_for(int seq) const;
  int64_t bytes_per_token() const;  // K and V, all layers
  static int64_t bytes_per_token(int n_layers, int n_kv_heads, int head_dim, DType dtype);

 private:
  struct Seq {
    bool live = false;
    int length = 0;
    std::vector<int32_t> blocks;
  };
  Seq& seq_ref(int seq);
  const Seq& seq_ref(int seq) const;

  int n_layers_, n_kv_heads_, head_dim_;
  DType dtype_;
  int num_blocks_;
  int64_t layer_bytes_;  // K (or V) bytes of one layer
  HugeBuffer storage_;   // [layer][K | V][block]...
  std::vector<int32_t> free_;
  std::vector<Seq> seqs_;
};

}  // namespace dspark
