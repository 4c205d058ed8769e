#include "model/kv_cache.h"

#include <algorithm>

#include "core/error.h"

namespace dspark {

KvCache::KvCache(int n_layers, int n_kv_heads, int head_dim, DType dtype, int64_t max_tokens)
    : n_layers_(n_layers), n_kv_heads_(n_kv_heads), head_dim_(head_dim), dtype_(dtype) {
  if (dtype != DType::F32 && dtype != DType::BF16) fail("KV cache dtype must be F32 or BF16");
  if (max_tokens <= 0) fail("KV cache needs room for at least one token");
  if (max_tokens > int64_t(1) << 32) fail("KV cache of ", max_tokens, " tokens is too large (at most 2^32)");
  num_blocks_ = int((max_tokens + kKvBlock - 1) / kKvBlock);
  layer_bytes_ = int64_t(num_blocks_) * n_kv_heads * head_dim * kKvBlock * int64_t(dtype_size(dtype));
  storage_ = HugeBuffer(size_t(layer_bytes_) * 2 * size_t(n_layers));
  free_.resize(size_t(num_blocks_));
  // Hand out low block numbers first so touched memory stays compact.
  for (int i = 0; i < num_blocks_; ++i) free_[size_t(i)] = num_blocks_ - 1 - i;
}

int KvCache::create_sequence() {
  for (size_t i = 0; i < seqs_.size(); ++i) {
    if (!seqs_[i].live) {
      seqs_[i] = Seq{true, 0, {}};
      return int(i);
    }
  }
  seqs_.push_back(Seq{true, 0, {}});
  return int(seqs_.size() - 1);
}

KvCache::Seq& KvCache::seq_ref(int seq) {
  if (seq < 0 || size_t(seq) >= seqs_.size() || !seqs_[size_t(seq)].live) fail("unknown KV sequence ", seq);
  return seqs_[size_t(seq)];
}

const KvCache::Seq& KvCache::seq_ref(int seq) const { return const_cast<KvCache*>(this)->seq_ref(seq); }

void KvCache::free_sequence(int seq) {
  Seq& s = seq_ref(seq);
  // Last block first, so that the next sequence pops them in ascending order: its blocks then lie
  // back to back in the order attention reads them. Pushed first to last, the next sequence got
  // them descending, and its attention streamed the cache backwards (a long prompt's decode step
  // took 15-20% longer on an EPYC).
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) free_.push_back(*it);
  s = Seq{};
}

void KvCache::reserve(int seq, int len) {
  Seq& s = seq_ref(seq);
  const size_t need = size_t((len + kKvBlock - 1) / kKvBlock);
  if (need <= s.blocks.size()) return;
  if (need - s.blocks.size() > free_.size())
    fail("KV cache is full: sequence ", seq, " needs ", len, " positions, only ",
         (s.blocks.size() + free_.size()) * kKvBlock, " fit (raise --kv-tokens)");
  while (s.blocks.size() < need) {
    s.blocks.push_back(free_.back());
    free_.pop_back();
  }
}

void KvCache::truncate(int seq, int len) {
  Seq& s = seq_ref(seq);
  len = std::max(0, std::min(len, s.length));
  s.length = len;
  const size_t keep = size_t((len + kKvBlock - 1) / kKvBlock);
  while (s.blocks.size() > keep) {
    free_.push_back(s.blocks.back());
    s.blocks.pop_back();
  }
}

int KvCache::length(int seq) const { return seq_ref(seq).length; }

void KvCache::set_length(int seq, int len) {
  Seq& s = seq_ref(seq);
  if (size_t((len + kKvBlock - 1) / kKvBlock) > s.blocks.size()) fail("KV sequence ", seq, ": length ", len, " not reserved");
  s.length = len;
}

const int32_t* KvCache::block_table(int seq) const { return seq_ref(seq).blocks.data(); }

PagedKvLayer KvCache::layer(int l) const {
  uint8_t* base = static_cast<uint8_t*>(storage_.data()) + size_t(l) * 2 * size_t(layer_bytes_);
  return PagedKvLayer{dtype_, n_kv_heads_, head_dim_, num_blocks_, base, base + layer_bytes_};
}

int64_t KvCache::bytes_per_token(int n_layers, int n_kv_heads, int head_dim, DType dtype) {
  return int64_t(n_layers) * 2 * n_kv_heads * head_dim * int64_t(dtype_size(dtype));
}

int64_t KvCache::bytes_per_token() const { return bytes_per_token(n_layers_, n_kv_heads_, head_dim_, dtype_); }

int64_t KvCache::room_for(int seq) const {
  return (int64_t(free_.size()) + int64_t(seq_ref(seq).blocks.size())) * kKvBlock;
}

}  // namespace dspark
