// AVX512-BF16 attention tile for bf16 caches: the AVX-512 tile's algorithm (attention_avx512.cpp)
// with both products in vdpbf16ps, which multiplies 16 pairs of bf16 values and adds both products
// of each pair into one f32 lane: twice the multiply-adds of an f32 FMA per instruction, and no
// widening of the cached values. A verification tile (9 rows: 18 query vectors per KV head at the
// Qwen3 shapes) is bound by this multiply rate at long context, not by reading the cache.
//  - Scores: the scaled queries are rounded to bf16 once per tile (round to nearest even, as the
//    matrix products round activations); two head dimensions of a block's 16 keys are one 64-byte
//    load (K is dimension-major), interleaved into pairs by one vpermw for every query vector.
//  - P·V: each block's probabilities are rounded to bf16, as FlashAttention rounds P before its
//    P·V product, and the softmax denominator sums the rounded values, so the weights a row's
//    output takes sum to one; two positions' values of 32 dimensions are two loads interleaved by
//    two vpermt2w.
// Each score and output element is summed in a fixed order (below) whatever the number of rows or
// threads, so a row's result does not depend on its tile (batch invariance).
//
// At long context a 1-row decode streams the cache from DRAM, and the order of reads sets its
// rate (`attention_bench BM_Attention/32768/1/1`): each block's K front to back, then its V at
// once, with the next block's K and V asked for while this one is scored (prefetch_next_block),
// reads at about a plain read's rate. Scoring 4 blocks before their P·V, or K's two halves side by
// side, read 20-90% slower.
//
// Built with AVX512-BF16 flags; only called where the CPU has AVX512F, AVX512BW and AVX512_BF16,
// for head dimensions that are multiples of 32.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "core/buffer.h"
#include "kernels/attention.h"
#include "kernels/simd_avx512.h"

namespace dspark::detail {

namespace {

using avx512::exp512;

#define DSPARK_UNROLL_ATT _Pragma("GCC unroll 8")

// Word indices for vpermw / vpermt2w: word 2i takes a's word a0 + i, word 2i + 1 word b0 + i.
struct PairIndex {
  alignas(64) uint16_t w[32];
};
constexpr PairIndex interleave(int a0, int b0) {
  PairIndex x{};
  for (int i = 0; i < 16; ++i) {
    x.w[2 * i] = uint16_t(a0 + i);
    x.w[2 * i + 1] = uint16_t(b0 + i);
  }
  return x;
}
constexpr PairIndex kKeyPairs = interleave(0, 16);  // K rows 2t, 2t+1 (one 64-byte load)
constexpr PairIndex kValLo = interleave(0, 32);     // V rows j, j+1: dimensions 0..15 of 32
constexpr PairIndex kValHi = interleave(16, 48);    //                dimensions 16..31
inline __m512i pair_index(const PairIndex& x) {
  return _mm512_load_si512(x.w);
}

// s[g][0..16) = q_g · K for G query vectors (bf16 pairs, hd2 per vector). Each vector's sum runs
// as two chains, over the even and the odd pairs of head dimensions, each in order, then added:
// the same order whatever G is, and enough independent chains in flight for a 1-row decode (G = 2)
// to cover the instruction's latency, while K is still read front to back.
template <int G>
inline void scores(const uint16_t* kt, const uint32_t* qp, int hd2, float* s, NextBlock next) {
  const __m512i perm = pair_index(kKeyPairs);
  __m512 acc[2][G];
  DSPARK_UNROLL_ATT
  for (int g = 0; g < G; ++g) acc[0][g] = acc[1][g] = _mm512_setzero_ps();
  for (int t = 0; t < hd2; t += 2) {
    prefetch_next_block<128>(next, t / 2);  // a block over hd2 / 2 steps
    __m512bh k[2];
    DSPARK_UNROLL_ATT
    for (int p = 0; p < 2; ++p)
      k[p] = (__m512bh)_mm512_permutexvar_epi16(perm, _mm512_loadu_si512(kt + 32 * (t + p)));
    DSPARK_UNROLL_ATT
    for (int g = 0; g < G; ++g) DSPARK_UNROLL_ATT
    for (int p = 0; p < 2; ++p)
      acc[p][g] =
          _mm512_dpbf16_ps(acc[p][g], k[p], (__m512bh)_mm512_set1_epi32(int(qp[g * hd2 + t + p])));
  }
  DSPARK_UNROLL_ATT
  for (int g = 0; g < G; ++g)
    _mm512_storeu_ps(s + g * kKvBlock, _mm512_add_ps(acc[0][g], acc[1][g]));
}

// o[g][d..d+32C) = o[g] * alpha[g] + sum over position pairs of p[g] · V, for G query vectors
// (pb: each vector's 8 bf16 probability pairs). Positions from `keys` on are never read.
template <int G, int C>
inline void pv_chunk(const uint16_t* vb, const uint32_t* pb, const float* alpha, int keys, int hd,
                     int d, float* o) {
  const __m512i lo = pair_index(kValLo), hi = pair_index(kValHi);
  __m512 acc[G][2 * C];
  DSPARK_UNROLL_ATT
  for (int g = 0; g < G; ++g) {
    const __m512 va = _mm512_set1_ps(alpha[g]);
    DSPARK_UNROLL_ATT
    for (int c = 0; c < 2 * C; ++c)
      acc[g][c] = _mm512_mul_ps(_mm512_loadu_ps(o + g * hd + d + 16 * c), va);
  }
  for (int jp = 0; 2 * jp < keys; ++jp) {
    const uint16_t* r0 = vb + int64_t(2 * jp) * hd + d;
    const bool second = 2 * jp + 1 < keys;
    __m512bh v[2 * C];
    DSPARK_UNROLL_ATT
    for (int c = 0; c < C; ++c) {
      const __m512i a = _mm512_loadu_si512(r0 + 32 * c);
      const __m512i b = second ? _mm512_loadu_si512(r0 + hd + 32 * c) : _mm512_setzero_si512();
      v[2 * c] = (__m512bh)_mm512_permutex2var_epi16(a, lo, b);
      v[2 * c + 1] = (__m512bh)_mm512_permutex2var_epi16(a, hi, b);
    }
    DSPARK_UNROLL_ATT
    for (int g = 0; g < G; ++g) {
      const __m512bh pp = (__m512bh)_mm512_set1_epi32(int(pb[g * (kKvBlock / 2) + jp]));
      DSPARK_UNROLL_ATT
      for (int c = 0; c < 2 * C; ++c) acc[g][c] = _mm512_dpbf16_ps(acc[g][c], v[c], pp);
    }
  }
  DSPARK_UNROLL_ATT
  for (int g = 0; g < G; ++g) DSPARK_UNROLL_ATT
  for (int c = 0; c < 2 * C; ++c) _mm512_storeu_ps(o + g * hd + d + 16 * c, acc[g][c]);
}

template <int G>
inline void pv(const uint16_t* vb, const uint32_t* pb, const float* alpha, int keys, int hd,
               float* o) {
  int d = 0;
  if constexpr (G <= 4)
    for (; d + 64 <= hd; d += 64) pv_chunk<G, 2>(vb, pb, alpha, keys, hd, d, o);
  for (; d < hd; d += 32) pv_chunk<G, 1>(vb, pb, alpha, keys, hd, d, o);
}

// Masks block b0's scores s (nq x 16) to what each row sees and runs the online softmax step: the
// bf16 probabilities go to pb (nq x 8 pairs), each vector's rescale factor to alpha. Each vector's
// denominator runs as 16 lane sums (lanes: nq x 16, one per position of a block), rescaled and
// added to by one FMA a block, and added up once at the end of the tile.
void softmax_block(float* s, int nq, int group, const int32_t* visible, const int32_t* start,
                   int b0, float* mx, float* lanes, float* alpha, uint32_t* pb, float* new_max,
                   uint16_t* seen) {
  // The maxima, then every vector's rescale factor exp(old max - new max) 16 at a time (0 on the
  // first block, where the old max is -inf), then the probabilities.
  for (int qi = 0; qi < nq; ++qi) {
    const int lim = std::min(kKvBlock, visible[qi / group] - b0);
    const int lo = start ? std::max(0, start[qi / group] - b0) : 0;
    seen[qi] = lim <= lo ? 0 : uint16_t(((1u << lim) - 1u) & ~((1u << lo) - 1u));
    new_max[qi] =
        seen[qi] ? std::max(mx[qi], _mm512_reduce_max_ps(_mm512_mask_loadu_ps(
                                        _mm512_set1_ps(-INFINITY), seen[qi], s + qi * kKvBlock)))
                 : 0.f;
  }
  for (int qi = 0; qi < nq; qi += 16) {
    const __mmask16 m = nq - qi >= 16 ? __mmask16(0xffff) : __mmask16((1u << (nq - qi)) - 1u);
    const __m512 a = exp512(
        _mm512_sub_ps(_mm512_maskz_loadu_ps(m, mx + qi), _mm512_maskz_loadu_ps(m, new_max + qi)));
    _mm512_mask_storeu_ps(alpha + qi, m, a);
  }
  for (int qi = 0; qi < nq; ++qi) {
    __m256i* dst = reinterpret_cast<__m256i*>(pb + qi * (kKvBlock / 2));
    if (!seen[qi]) {  // this row sees none of the block: leave its output as it is
      _mm256_storeu_si256(dst, _mm256_setzero_si256());
      alpha[qi] = 1.f;
      continue;
    }
    const __m512 sv = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), seen[qi], s + qi * kKvBlock);
    const __m256i e =
        (__m256i)_mm512_cvtneps_pbh(exp512(_mm512_sub_ps(sv, _mm512_set1_ps(new_max[qi]))));
    _mm256_storeu_si256(dst, e);
    const __m512 rounded = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(e), 16));
    float* ls = lanes + qi * kKvBlock;
    _mm512_storeu_ps(ls, _mm512_fmadd_ps(_mm512_loadu_ps(ls), _mm512_set1_ps(alpha[qi]), rounded));
    mx[qi] = new_max[qi];
  }
}

}  // namespace

void attention_tile_avx512bf16(const PagedKvLayer& kv, const int32_t* table, const int32_t* visible,
                               int nr, const float* q, int64_t ldq, int group, int kvh, float scale,
                               float* out, int64_t ldo, const TileKeys& span) {
  const int hd = kv.head_dim, hd2 = hd / 2;
  const int nq = nr * group;  // query vectors: index qi = r * group + g
  thread_local Buffer<float> scratch;
  scratch.resize(size_t(nq) * (hd + hd2 + 2 * kKvBlock + kKvBlock / 2 + 5) + 64);
  float* o = scratch.data();                               // [nq][hd] unnormalised outputs
  float* s = o + nq * hd;                                  // [nq][16] scores of the current block
  float* mx = s + nq * kKvBlock;                           // [nq] running max
  float* sum = mx + nq;  // [nq] denominator, from lanes at the end
  float* alpha = sum + nq;                                 // [nq] this block's rescale factor
  uint32_t* qp = reinterpret_cast<uint32_t*>(alpha + nq);  // [nq][hd2] scaled queries, bf16 pairs
  uint32_t* pb = qp + nq * hd2;                            // [nq][8] probabilities, bf16 pairs
  float* new_max = reinterpret_cast<float*>(pb + nq * kKvBlock / 2);  // [nq] this block's maxima
  float* lanes = new_max + nq;  // [nq][16] denominators by lane
  uint16_t* seen = reinterpret_cast<uint16_t*>(lanes + nq * kKvBlock);  // [nq] positions seen
  int max_vis = 0;
  for (int r = 0; r < nr; ++r) max_vis = std::max(max_vis, visible[r]);
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int qi = 0; qi < nq; ++qi) {
    const float* src = q + (qi / group) * ldq + int64_t(kvh * group + qi % group) * hd;
    for (int d = 0; d < hd; d += 32) {
      const __m512 a = _mm512_mul_ps(_mm512_loadu_ps(src + d), vscale);
      const __m512 b = _mm512_mul_ps(_mm512_loadu_ps(src + d + 16), vscale);
      _mm512_storeu_si512(qp + qi * hd2 + d / 2, (__m512i)_mm512_cvtne2ps_pbh(b, a));
      _mm512_storeu_ps(o + qi * hd + d, _mm512_setzero_ps());
      _mm512_storeu_ps(o + qi * hd + d + 16, _mm512_setzero_ps());
    }
    mx[qi] = -INFINITY;
    _mm512_storeu_ps(lanes + qi * kKvBlock, _mm512_setzero_ps());
  }
  const uint16_t* k = static_cast<const uint16_t*>(kv.k);
  const uint16_t* v = static_cast<const uint16_t*>(kv.v);
  const int end = std::min(max_vis, span.k1);
  for (int b0 = span.k0; b0 < end; b0 += kKvBlock) {
    const int32_t phys = table[b0 / kKvBlock];
    const uint16_t* kt = k + kv.block_offset(kvh, phys);
    // The first group of query vectors asks for the next block's K and V (prefetch_next_block).
    NextBlock next = next_block(kv, table, kvh, b0, end);
    int qi = 0;
    for (; qi + 8 <= nq; qi += 8, next = {})
      scores<8>(kt, qp + qi * hd2, hd2, s + qi * kKvBlock, next);
    for (; qi + 4 <= nq; qi += 4, next = {})
      scores<4>(kt, qp + qi * hd2, hd2, s + qi * kKvBlock, next);
    for (; qi + 2 <= nq; qi += 2, next = {})
      scores<2>(kt, qp + qi * hd2, hd2, s + qi * kKvBlock, next);
    for (; qi < nq; ++qi, next = {}) scores<1>(kt, qp + qi * hd2, hd2, s + qi * kKvBlock, next);
    softmax_block(s, nq, group, visible, span.start, b0, mx, lanes, alpha, pb, new_max, seen);
    const uint16_t* vb = v + kv.block_offset(kvh, phys);
    const int keys = std::min(kKvBlock, max_vis - b0);
    qi = 0;
    for (; qi + 8 <= nq; qi += 8) pv<8>(vb, pb + qi * 8, alpha + qi, keys, hd, o + qi * hd);
    for (; qi + 4 <= nq; qi += 4) pv<4>(vb, pb + qi * 8, alpha + qi, keys, hd, o + qi * hd);
    for (; qi + 2 <= nq; qi += 2) pv<2>(vb, pb + qi * 8, alpha + qi, keys, hd, o + qi * hd);
    if (qi < nq) pv<1>(vb, pb + qi * 8, alpha + qi, keys, hd, o + qi * hd);
  }
  for (int qi = 0; qi < nq; ++qi)
    sum[qi] = _mm512_reduce_add_ps(_mm512_loadu_ps(lanes + qi * kKvBlock));
  finish_tile(span, o, mx, sum, nq, group, kvh, hd, out, ldo);
}

}  // namespace dspark::detail
