#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace dspark {

KvCache::KvCache(int n_layers, int n_kv_heads, int head_dim, DType dtype, int64_t max_tokens)
    : n_layers_(n_layers), n_kv_heads_(n_kv_heads), head_dim_(head_dim), dtype_(dtype) {
  if (dtype != DType::F32 && dtype != DType::BF16 && !is_fp8(dtype))
    fail("KV cache dtype must be F32, BF16, F8_E4M3 or F8_E5M2, got ", dtype_name(dtype));
  if (max_tokens <= 0) fail("KV cache needs room for at least one token");
  if (max_tokens > int64_t(1) << 32) fail("KV cache of ", max_tokens, " tokens is too large (at most 2^32)");
  num_blocks_ = int((max_tokens + kKvBlock - 1) / kKvBlock);
  layer_bytes_ = int64_t(num_blocks_) * n_kv_heads * head_dim * kKvBlock * int64_t(dtype_size(dtype));
  storage_ = HugeBuffer(size_t(layer_bytes_) * 2 * size_t(n_layers));
  // fp8: a scale per position and KV head, for K and V: [layer][K | V][head][block][16].
  if (is_fp8(dtype)) {
    scale_layer_ = int64_t(num_blocks_) * n_kv_heads * kKvBlock;
    scales_ = HugeBuffer(size_t(scale_layer_) * 2 * size_t(n_layers) * sizeof(float));
  }
  free_.resize(size_t(num_blocks_));
  // Hand out low block numbers first so touched memory stays compact.
  for (int i = 0; i < num_blocks_; ++i) free_[size_t(i)] = num_blocks_ - 1 - i;
  meta_.resize(size_t(num_blocks_));
}

void KvCache::set_prefix_caching(bool on, bool share_duplicates) {
  share_duplicates_ = share_duplicates;
  if (on && block_tokens_.empty()) {
    block_tokens_.assign(size_t(num_blocks_) * kKvBlock, 0);
    cache_.reserve(size_t(num_blocks_));
  }
  caching_ = on;
}

int KvCache::create_sequence() {
  for (size_t i = 0; i < seqs_.size(); ++i) {
    if (!seqs_[i].live) {
      seqs_[i] = Seq{true, 0, {}, 0};
      return int(i);
    }
  }
  seqs_.push_back(Seq{true, 0, {}, 0});
  return int(seqs_.size() - 1);
}

KvCache::Seq& KvCache::seq_ref(int seq) {
  if (seq < 0 || size_t(seq) >= seqs_.size() || !seqs_[size_t(seq)].live) fail("unknown KV sequence ", seq);
  return seqs_[size_t(seq)];
}

const KvCache::Seq& KvCache::seq_ref(int seq) const { return const_cast<KvCache*>(this)->seq_ref(seq); }

void KvCache::lru_remove(int32_t b) {
  BlockMeta& m = meta_[size_t(b)];
  (m.prev >= 0 ? meta_[size_t(m.prev)].next : lru_head_) = m.next;
  (m.next >= 0 ? meta_[size_t(m.next)].prev : lru_tail_) = m.prev;
  m.prev = m.next = -1;
  --evictable_;
}

void KvCache::uncache(int32_t b) {
  BlockMeta& m = meta_[size_t(b)];
  if (!m.cached) return;
  cache_.erase(m.key);
  m.cached = false;
}

void KvCache::drop_ref(int32_t b) {
  BlockMeta& m = meta_[size_t(b)];
  if (--m.refs > 0) return;
  if (!m.cached) {
    free_.push_back(b);
    return;
  }
  m.prev = lru_tail_;
  m.next = -1;
  (lru_tail_ >= 0 ? meta_[size_t(lru_tail_)].next : lru_head_) = b;
  lru_tail_ = b;
  ++evictable_;
}

int32_t KvCache::take_block() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    b = lru_head_;  // the caller checked free_blocks()
    lru_remove(b);
    uncache(b);
  }
  meta_[size_t(b)].refs = 1;
  return b;
}

void KvCache::free_sequence(int seq) {
  Seq& s = seq_ref(seq);
  // Last block first, so that the next sequence pops them in ascending order: its blocks then lie
  // back to back in the order attention reads them. Pushed first to last, the next sequence got
  // them descending, and its attention streamed the cache backwards (a long prompt's decode step
  // took 15-20% longer on an EPYC). Cached blocks go to the LRU list the same way, so a prefix's
  // last blocks are evicted before its first.
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) drop_ref(*it);
  s = Seq{};
}

void KvCache::reserve(int seq, int len) {
  Seq& s = seq_ref(seq);
  const size_t need = size_t((len + kKvBlock - 1) / kKvBlock);
  if (need <= s.blocks.size()) return;
  if (need - s.blocks.size() > size_t(free_blocks()))
    fail("KV cache is full: sequence ", seq, " needs ", len, " positions, only ",
         (s.blocks.size() + size_t(free_blocks())) * kKvBlock, " fit (raise --kv-tokens)");
  while (s.blocks.size() < need) s.blocks.push_back(take_block());
}

void KvCache::truncate(int seq, int len) {
  Seq& s = seq_ref(seq);
  len = std::max(0, std::min(len, s.length));
  if (len < s.committed) {
    if (len % kKvBlock != 0)
      fail("KV sequence ", seq, ": cannot cut committed positions at ", len,
           " (inside a block)");
    s.committed = len;
  }
  s.length = len;
  const size_t keep = size_t((len + kKvBlock - 1) / kKvBlock);
  while (s.blocks.size() > keep) {
    drop_ref(s.blocks.back());
    s.blocks.pop_back();
  }
}

int KvCache::length(int seq) const { return seq_ref(seq).length; }

int KvCache::committed(int seq) const { return seq_ref(seq).committed; }

void KvCache::set_length(int seq, int len) {
  Seq& s = seq_ref(seq);
  if (size_t((len + kKvBlock - 1) / kKvBlock) > s.blocks.size()) fail("KV sequence ", seq, ": length ", len, " not reserved");
  s.length = len;
}

const int32_t* KvCache::block_table(int seq) const { return seq_ref(seq).blocks.data(); }

PagedKvLayer KvCache::layer(int l) const {
  uint8_t* base = static_cast<uint8_t*>(storage_.data()) + size_t(l) * 2 * size_t(layer_bytes_);
  PagedKvLayer out{dtype_, n_kv_heads_, head_dim_, num_blocks_, base, base + layer_bytes_};
  if (scale_layer_) {
    out.k_scale = static_cast<float*>(scales_.data()) + size_t(l) * 2 * size_t(scale_layer_);
    out.v_scale = out.k_scale + scale_layer_;
  }
  return out;
}

int64_t KvCache::bytes_per_token(int n_layers, int n_kv_heads, int head_dim, DType dtype) {
  // fp8 adds an f32 scale per position and KV head for K and for V.
  const int64_t per_head = int64_t(head_dim) * int64_t(dtype_size(dtype)) + (is_fp8(dtype) ? 4 : 0);
  return int64_t(n_layers) * 2 * n_kv_heads * per_head;
}

int64_t KvCache::bytes_per_token() const { return bytes_per_token(n_layers_, n_kv_heads_, head_dim_, dtype_); }

int64_t KvCache::room_for(int seq) const {
  return (int64_t(free_blocks()) + int64_t(seq_ref(seq).blocks.size())) * kKvBlock;
}

// FNV-1a over the parent's identity and the tokens, then a final mix. A collision costs a miss,
// never a wrong hit: holds() compares the tokens and the parent.
uint64_t KvCache::block_key(int32_t parent, uint32_t parent_gen, const int32_t* tokens) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ull;
  };
  mix(uint32_t(parent));
  mix(parent_gen);
  for (int i = 0; i < kKvBlock; ++i) mix(uint32_t(tokens[i]));
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

bool KvCache::holds(int32_t b, int32_t parent, uint32_t parent_gen, const int32_t* tokens) const {
  const BlockMeta& m = meta_[size_t(b)];
  return m.parent == parent && m.parent_gen == parent_gen &&
         std::memcmp(&block_tokens_[size_t(b) * kKvBlock], tokens, kKvBlock * sizeof(int32_t)) == 0;
}

int KvCache::attach_prefix(int seq, std::span<const int32_t> tokens, int max_len) {
  Seq& s = seq_ref(seq);
  if (!caching_) return 0;
  if (s.length != 0 || !s.blocks.empty()) fail("KV sequence ", seq, ": a prefix attaches to an empty sequence");
  const int n_blocks = std::min<int>(max_len, int(tokens.size())) / kKvBlock;
  int32_t parent = -1;
  uint32_t parent_gen = 0;
  for (int i = 0; i < n_blocks; ++i) {
    const int32_t* toks = tokens.data() + size_t(i) * kKvBlock;
    const auto it = cache_.find(block_key(parent, parent_gen, toks));
    if (it == cache_.end() || !holds(it->second, parent, parent_gen, toks)) break;
    const int32_t b = it->second;
    BlockMeta& m = meta_[size_t(b)];
    if (m.refs++ == 0) lru_remove(b);
    s.blocks.push_back(b);
    parent = b;
    parent_gen = m.gen;
  }
  s.length = s.committed = int(s.blocks.size()) * kKvBlock;
  return s.length;
}

void KvCache::commit(int seq, int pos, std::span<const int32_t> tokens) {
  if (!caching_) return;
  Seq& s = seq_ref(seq);
  if (pos != s.committed)
    fail("KV sequence ", seq, ": commit at ", pos, " but ", s.committed, " positions are committed");
  const int end = pos + int(tokens.size());
  if (end > s.length) fail("KV sequence ", seq, ": commit to ", end, " past its length ", s.length);
  for (int p = pos; p < end; ++p) {
    const size_t bi = size_t(p / kKvBlock);
    int32_t b = s.blocks[bi];
    block_tokens_[size_t(b) * kKvBlock + size_t(p % kKvBlock)] = tokens[size_t(p - pos)];
    if (p % kKvBlock != kKvBlock - 1) continue;
    // Block bi is full: cache it under its parent (the block before it) and its tokens.
    const int32_t parent = bi ? s.blocks[bi - 1] : -1;
    const uint32_t parent_gen = bi ? meta_[size_t(parent)].gen : 0;
    const int32_t* toks = &block_tokens_[size_t(b) * kKvBlock];
    const uint64_t key = block_key(parent, parent_gen, toks);
    if (const auto it = cache_.find(key); it != cache_.end()) {
      const int32_t same = it->second;
      if (share_duplicates_ && holds(same, parent, parent_gen, toks)) {  // computed twice: share the first
        BlockMeta& o = meta_[size_t(same)];
        if (o.refs++ == 0) lru_remove(same);
        drop_ref(b);
        s.blocks[bi] = same;
      }
      continue;  // else a key collision with another content, or not shared: b stays private
    }
    BlockMeta& m = meta_[size_t(b)];
    ++m.gen;
    m.cached = true;
    m.key = key;
    m.parent = parent;
    m.parent_gen = parent_gen;
    cache_.emplace(key, b);
  }
  s.committed = end;
}

}  // namespace dspark
