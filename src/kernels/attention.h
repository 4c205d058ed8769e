// Attention over a paged KV cache: causal by default, any prefix-visibility per query row.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace dspark {

// Keys and values of one sequence live in fixed blocks of kKvBlock positions.
constexpr int kKvBlock = 16;

// One layer of a paged cache. Each KV head has its own run of blocks, so the blocks of one
// sequence (handed out in order) lie back to back and stream like one array. Within a block,
// K is stored dimension-major ([head_dim][kKvBlock]) so a query scores a whole block with
// vector FMAs, and V is position-major ([kKvBlock][head_dim]).
//
// In fp8 (F8_E4M3, F8_E5M2) each position's K row and V row of each KV head has its own f32 scale
// (its largest magnitude over fp8_max): element = fp8 value * scale. Attention applies K's scales
// to a block's 16 scores and V's to its 16 probabilities, so the inner loops only widen fp8.
struct PagedKvLayer {
  DType dtype = DType::F32;  // F32, BF16, F8_E4M3 or F8_E5M2
  int n_kv_heads = 0;
  int head_dim = 0;
  int num_blocks = 0;
  void* k = nullptr;  // [n_kv_heads][num_blocks][head_dim][kKvBlock]
  void* v = nullptr;  // [n_kv_heads][num_blocks][kKvBlock][head_dim]
  float* k_scale = nullptr;  // fp8: [n_kv_heads][num_blocks][kKvBlock]
  float* v_scale = nullptr;

  int64_t block_elems() const { return int64_t(head_dim) * kKvBlock; }  // one head's block
  int64_t head_elems() const { return int64_t(num_blocks) * block_elems(); }
  // Element offset of block `phys` of KV head `h` (in K or V).
  int64_t block_offset(int h, int32_t phys) const { return h * head_elems() + int64_t(phys) * block_elems(); }
  int64_t layer_elems() const { return n_kv_heads * head_elems(); }
  // Offset of block `phys` of KV head `h` in k_scale / v_scale.
  int64_t scale_offset(int h, int32_t phys) const {
    return (int64_t(h) * num_blocks + phys) * kKvBlock;
  }
};

// Writes the K and V rows (n_kv_heads * head_dim values each) of one position.
void kv_write(const PagedKvLayer& kv, const int32_t* block_table, int pos, const float* k_row,
              const float* v_row);

// The query rows of one attention call. Row r attends to positions [start[r], visible[r]) of the
// sequence whose block table is tables[r]: visible = pos + 1 is causal; a block of draft
// rows that all use the block's end sees itself bidirectionally plus everything before it;
// start > 0 is a sliding window (no start: every row starts at 0).
struct AttentionRows {
  int n = 0;
  const int32_t* const* tables = nullptr;  // [n] block table of each row's sequence
  const int32_t* visible = nullptr;        // [n]
  const int32_t* start = nullptr;          // [n], or nullptr
};

// out[r, h*hd:(h+1)*hd] = softmax(scale * q_h · Kᵀ) · V over the visible keys, GQA heads
// h mapping to kv head h / (n_heads / n_kv_heads). q and out have row strides ldq and ldo.
// Consecutive rows of one sequence (up to 16) form a tile that reads each K/V block once for all
// its rows and GQA heads. A tile whose rows see more than 2,048 positions is split along the
// sequence at the multiples of 2,048 (flash-decoding), one task per part and KV head, and the
// parts are merged in order by their log-sum-exp; a row's result does not depend on the other
// rows or on the thread count.
void attention(const PagedKvLayer& kv, const AttentionRows& rows, const float* q, int64_t ldq,
               int n_heads, float scale, float* out, int64_t ldo);

// The tile kernel attention() runs on a cache of `dtype` for head dimensions that are multiples
// of 32 (of 16 for "avx512"): "avx512" where the CPU has AVX512F and AVX512BW and the matrix
// backend is not forced to avx2 or reference (DSPARK_GEMM), else "avx2" where it has AVX2 and FMA,
// else "reference". On a bf16 cache, "avx512bf16" in place of "avx512" where the CPU also has
// AVX512_BF16: queries and probabilities are then rounded to bf16 and both products run in
// vdpbf16ps (attention_avx512bf16.cpp); the other tiles multiply in f32.
const char* attention_kernel_name(DType dtype = DType::F32);

namespace detail {
// The keys [k0, k1) of a tile call (k0 a multiple of kKvBlock), and where each row's keys start
// (start[r] >= k0 masks the positions before it; nullptr: none). With `partial`, the call leaves
// its unnormalised outputs ([nq][head_dim], nq = rows x group), running maxima ([nq]) and sums
// ([nq]) there for attention()'s merge, instead of writing out.
struct TileKeys {
  int k0 = 0;
  int k1 = INT32_MAX;
  float* partial = nullptr;
  const int32_t* start = nullptr;
};
// A tile's last step: its part for the merge with `span.partial` (TileKeys::partial's layout: o
// [nq][hd], then mx [nq], sum [nq]), else each query vector's output o / sum written to out.
void finish_tile(const TileKeys& span, const float* o, const float* mx, const float* sum, int nq, int group, int kvh,
                 int hd, float* out, int64_t ldo);
// The K and V of the block after block b0 of KV head kvh, for prefetch_next_block: none (nullptr)
// where that block is not before `end`.
struct NextBlock {
  const void* k = nullptr;
  const void* v = nullptr;
};
inline NextBlock next_block(const PagedKvLayer& kv, const int32_t* table, int kvh, int b0,
                            int end) {
  if (b0 + kKvBlock >= end) return {};
  const int64_t off =
      kv.block_offset(kvh, table[b0 / kKvBlock + 1]) * int64_t(dtype_size(kv.dtype));
  return {static_cast<const char*>(kv.k) + off, static_cast<const char*>(kv.v) + off};
}
// The next block's K and V, asked for while the tile scores this one. At long context each block
// is a new page of the cache, which the hardware prefetcher does not enter, and a tile would wait
// on the first loads of every block (`perf record` on `attention_bench BM_Attention/32768/1/1`).
// The first scores loop over a block's K (one group of query vectors) calls this at each of its
// iterations i, kStep bytes of K apart, and it asks for the lines of K and V that start in
// [i * kStep, (i + 1) * kStep): one block's worth spread over that loop. The other groups pass no
// block.
template <int kStep>
inline void prefetch_next_block(NextBlock next, int i) {
  if (!next.k) return;
  const int64_t from = int64_t(i) * kStep;
  for (int64_t x = (from + 63) / 64 * 64; x < from + kStep; x += 64) {
    __builtin_prefetch(static_cast<const char*>(next.k) + x);
    __builtin_prefetch(static_cast<const char*>(next.v) + x);
  }
}
void attention_reference(const PagedKvLayer& kv, const AttentionRows& rows, const float* q, int64_t ldq,
                         int n_heads, float scale, float* out, int64_t ldo);
// Attends query vectors of rows [r0, r0+nr) (all sharing one block table) for kv head kvh.
void attention_tile_avx2(const PagedKvLayer& kv, const int32_t* table, const int32_t* visible, int nr,
                         const float* q, int64_t ldq, int group, int kvh, float scale, float* out,
                         int64_t ldo, const TileKeys& span);
// Whether bf16 caches take the AVX512-BF16 tile where the CPU has it (true unless set otherwise):
// tests turn it off to run the f32 tile that CPUs without AVX512_BF16 run.
void set_attention_bf16_pairs(bool enabled);
// The same tile on 16-lane vectors (head_dim a multiple of 16; AVX512F and AVX512BW).
void attention_tile_avx512(const PagedKvLayer& kv, const int32_t* table, const int32_t* visible, int nr,
                           const float* q, int64_t ldq, int group, int kvh, float scale, float* out,
                           int64_t ldo, const TileKeys& span);
// The tile on bf16 pairs for bf16 caches (head_dim a multiple of 32; AVX512F, AVX512BW and
// AVX512_BF16).
void attention_tile_avx512bf16(const PagedKvLayer& kv, const int32_t* table, const int32_t* visible, int nr,
                               const float* q, int64_t ldq, int group, int kvh, float scale, float* out,
                               int64_t ldo, const TileKeys& span);
}  // namespace detail

}  // namespace dspark
