// AVX-512 attention tile: the AVX2 tile's algorithm (attention_avx2.cpp) on 16-lane vectors. A
// cache block's 16 keys are one vector, so a query vector scores a block with one FMA per head
// dimension, and P·V runs 16 dimensions per FMA. Half the instructions of the AVX2 tile, for the
// verification steps whose attention is bound by the multiply rate, not by reading the cache.
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

// 16 cache elements from element idx, as f32. fp8 widens through f16 exactly: e5m2 is the top
// byte of an f16; e4m3's exponent and mantissa shifted into an f16 give its value / 256, which
// the tile folds into the position scales (kWiden).
template <DType kT>
inline __m512 load16(const void* base, int64_t idx) {
  if constexpr (kT == DType::BF16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + idx));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else if constexpr (kT == DType::F8_E5M2 || kT == DType::F8_E4M3) {
    const __m256i w = _mm256_cvtepu8_epi16(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(base) + idx)));
    const __m256i hi = _mm256_slli_epi16(w, 8);  // the byte in the top half
    if constexpr (kT == DType::F8_E5M2) return _mm512_cvtph_ps(hi);
    // e4m3: shifted right one place arithmetically, the sign stays at bit 15 and a copy of it
    // lands on bit 14 (the f16 exponent's top bit), which is cleared.
    return _mm512_cvtph_ps(_mm256_and_si256(_mm256_srai_epi16(hi, 1), _mm256_set1_epi16(int16_t(0xbfff))));
  } else {
    return _mm512_loadu_ps(static_cast<const float*>(base) + idx);
  }
}

// s[g][0..16) = q_g · K[:, 0..16) for G query vectors (rows of q, stride hd). Each vector's sum
// runs in the same order whatever G is (two head-dimension halves, each in order, then added),
// so a row's scores do not depend on which rows share its tile.
template <int G, DType kT>
inline void scores(const void* kt, const float* q, int hd, float* s, NextBlock next) {
  constexpr int kSplit = 2;
  __m512 a[G][kSplit];
  DSPARK_UNROLL_ATT
  for (int g = 0; g < G; ++g) a[g][0] = a[g][1] = _mm512_setzero_ps();
  const int part = hd / kSplit;
  for (int d = 0; d < part; ++d) {
    prefetch_next_block<32 * int(dtype_size(kT))>(next, d);  // a block over hd / 2 steps
    DSPARK_UNROLL_ATT
    for (int p = 0; p < kSplit; ++p) {
      const __m512 k = load16<kT>(kt, int64_t(p * part + d) * kKvBlock);
      DSPARK_UNROLL_ATT
      for (int g = 0; g < G; ++g) a[g][p] = _mm512_fmadd_ps(_mm512_set1_ps(q[g * hd + p * part + d]), k, a[g][p]);
    }
  }
  DSPARK_UNROLL_ATT
  for (int g = 0; g < G; ++g) _mm512_storeu_ps(s + g * kKvBlock, _mm512_add_ps(a[g][0], a[g][1]));
}

// o[g][d..d+16C) = o[g] * alpha[g] + sum_j p[g][j] * V[j][d..d+16C) for G query vectors.
template <int G, int C, DType kT>
inline void pv_chunk(const void* vb, const float* p, const float* alpha, int keys, int hd, int d, float* o) {
  __m512 acc[G][C];
  DSPARK_UNROLL_ATT
  for (int g = 0; g < G; ++g) {
    const __m512 va = _mm512_set1_ps(alpha[g]);
    DSPARK_UNROLL_ATT
    for (int c = 0; c < C; ++c) acc[g][c] = _mm512_mul_ps(_mm512_loadu_ps(o + g * hd + d + 16 * c), va);
  }
  for (int j = 0; j < keys; ++j) {
    __m512 v[C];
    DSPARK_UNROLL_ATT
    for (int c = 0; c < C; ++c) v[c] = load16<kT>(vb, int64_t(j) * hd + d + 16 * c);
    DSPARK_UNROLL_ATT
    for (int g = 0; g < G; ++g) {
      const __m512 pb = _mm512_set1_ps(p[g * kKvBlock + j]);
      DSPARK_UNROLL_ATT
      for (int c = 0; c < C; ++c) acc[g][c] = _mm512_fmadd_ps(pb, v[c], acc[g][c]);
    }
  }
  DSPARK_UNROLL_ATT
  for (int g = 0; g < G; ++g)
    DSPARK_UNROLL_ATT
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(o + g * hd + d + 16 * c, acc[g][c]);
}

template <int G, DType kT>
inline void pv(const void* vb, const float* p, const float* alpha, int keys, int hd, float* o) {
  int d = 0;
  for (; d + 64 <= hd; d += 64) pv_chunk<G, 4, kT>(vb, p, alpha, keys, hd, d, o);
  for (; d < hd; d += 16) pv_chunk<G, 1, kT>(vb, p, alpha, keys, hd, d, o);
}

template <DType kT>
void tile(const PagedKvLayer& kv, const int32_t* table, const int32_t* visible, int nr, const float* q,
          int64_t ldq, int group, int kvh, float scale, float* out, int64_t ldo, const TileKeys& span) {
  const int hd = kv.head_dim;
  const int nq = nr * group;  // query vectors: index qi = r * group + g
  thread_local Buffer<float> scratch;
  scratch.resize(size_t(nq) * (2 * hd + 2 * kKvBlock + 3) + 64);
  float* qs = scratch.data();     // [nq][hd] scaled queries
  float* o = qs + nq * hd;        // [nq][hd] unnormalised outputs
  float* s = o + nq * hd;         // [nq][kKvBlock] scores of the current block
  float* mx = s + nq * kKvBlock;  // [nq] running max
  float* sum = mx + nq;           // [nq] denominator, from lanes at the end
  float* alpha_buf = sum + nq;    // [nq] rescale factor of the current block
  // [nq][16] each vector's denominator as 16 lane sums (one per position of a block), rescaled and
  // added to by one FMA a block, and added up once at the end.
  float* lanes = alpha_buf + nq;
  int max_vis = 0;
  for (int r = 0; r < nr; ++r) max_vis = std::max(max_vis, visible[r]);
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int qi = 0; qi < nq; ++qi) {
    const float* src = q + (qi / group) * ldq + int64_t(kvh * group + qi % group) * hd;
    for (int d = 0; d < hd; d += 16) {
      _mm512_storeu_ps(qs + qi * hd + d, _mm512_mul_ps(_mm512_loadu_ps(src + d), vscale));
      _mm512_storeu_ps(o + qi * hd + d, _mm512_setzero_ps());
    }
    mx[qi] = -INFINITY;
    _mm512_storeu_ps(lanes + qi * kKvBlock, _mm512_setzero_ps());
  }
  constexpr bool kFp8 = kT == DType::F8_E4M3 || kT == DType::F8_E5M2;
  constexpr float kWiden = kT == DType::F8_E4M3 ? 256.f : 1.f;  // load16's e4m3 values are / 256
  const size_t esz = dtype_size(kT);
  __m512 ksv = _mm512_set1_ps(1.f), vsv = ksv;
  const int end = std::min(max_vis, span.k1);
  for (int b0 = span.k0; b0 < end; b0 += kKvBlock) {
    const int32_t phys = table[b0 / kKvBlock];
    const int64_t base = kv.block_offset(kvh, phys);
    if constexpr (kFp8) {  // this block's 16 positions' scales
      const int64_t so = kv.scale_offset(kvh, phys);
      ksv = _mm512_mul_ps(_mm512_loadu_ps(kv.k_scale + so), _mm512_set1_ps(kWiden));
      vsv = _mm512_mul_ps(_mm512_loadu_ps(kv.v_scale + so), _mm512_set1_ps(kWiden));
    }
    const void* kt = static_cast<const uint8_t*>(kv.k) + base * esz;
    const void* vb = static_cast<const uint8_t*>(kv.v) + base * esz;
    // The first group of query vectors asks for the next block's K and V (prefetch_next_block).
    NextBlock next = next_block(kv, table, kvh, b0, end);
    // Scores, up to eight query vectors per K load.
    int qi = 0;
    for (; qi + 8 <= nq; qi += 8, next = {})
      scores<8, kT>(kt, qs + qi * hd, hd, s + qi * kKvBlock, next);
    for (; qi + 4 <= nq; qi += 4, next = {})
      scores<4, kT>(kt, qs + qi * hd, hd, s + qi * kKvBlock, next);
    for (; qi < nq; ++qi, next = {}) scores<1, kT>(kt, qs + qi * hd, hd, s + qi * kKvBlock, next);
    if constexpr (kFp8)
      for (qi = 0; qi < nq; ++qi)
        _mm512_storeu_ps(s + qi * kKvBlock, _mm512_mul_ps(_mm512_loadu_ps(s + qi * kKvBlock), ksv));
    // Mask and online softmax: s becomes the block's probabilities, o is rescaled.
    for (qi = 0; qi < nq; ++qi) {
      const int lim = std::min(kKvBlock, visible[qi / group] - b0);
      const int lo = span.start ? std::max(0, span.start[qi / group] - b0) : 0;
      float* sr = s + qi * kKvBlock;
      if (lim <= lo) {  // this row sees none of the block: leave its output as it is
        _mm512_storeu_ps(sr, _mm512_setzero_ps());
        alpha_buf[qi] = 1.f;
        continue;
      }
      const __mmask16 seen = __mmask16(((1u << lim) - 1u) & ~((1u << lo) - 1u));
      const __m512 sv = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), seen, sr);
      const float new_max = std::max(mx[qi], _mm512_reduce_max_ps(sv));
      const float alpha = std::exp(mx[qi] - new_max);  // 0 on the first block (mx = -inf)
      const __m512 e = exp512(_mm512_sub_ps(sv, _mm512_set1_ps(new_max)));
      _mm512_storeu_ps(sr, kFp8 ? _mm512_mul_ps(e, vsv) : e);  // P·V weights carry V's scales
      float* ls = lanes + qi * kKvBlock;
      _mm512_storeu_ps(ls, _mm512_fmadd_ps(_mm512_loadu_ps(ls), _mm512_set1_ps(alpha), e));
      mx[qi] = new_max;
      alpha_buf[qi] = alpha;
    }
    // P·V, up to four query vectors at a time so each V load feeds sixteen accumulators.
    const int keys = std::min(kKvBlock, max_vis - b0);
    for (qi = 0; qi + 4 <= nq; qi += 4) pv<4, kT>(vb, s + qi * kKvBlock, alpha_buf + qi, keys, hd, o + qi * hd);
    for (; qi + 2 <= nq; qi += 2) pv<2, kT>(vb, s + qi * kKvBlock, alpha_buf + qi, keys, hd, o + qi * hd);
    if (qi < nq) pv<1, kT>(vb, s + qi * kKvBlock, alpha_buf + qi, keys, hd, o + qi * hd);
  }
  for (int qi = 0; qi < nq; ++qi)
    sum[qi] = _mm512_reduce_add_ps(_mm512_loadu_ps(lanes + qi * kKvBlock));
  finish_tile(span, o, mx, sum, nq, group, kvh, hd, out, ldo);
}

}  // namespace

void attention_tile_avx512(const PagedKvLayer& kv, const int32_t* table, const int32_t* visible, int nr,
                           const float* q, int64_t ldq, int group, int kvh, float scale, float* out,
                           int64_t ldo, const TileKeys& span) {
  switch (kv.dtype) {
    case DType::BF16: return tile<DType::BF16>(kv, table, visible, nr, q, ldq, group, kvh, scale, out, ldo, span);
    case DType::F8_E4M3: return tile<DType::F8_E4M3>(kv, table, visible, nr, q, ldq, group, kvh, scale, out, ldo, span);
    case DType::F8_E5M2: return tile<DType::F8_E5M2>(kv, table, visible, nr, q, ldq, group, kvh, scale, out, ldo, span);
    default: return tile<DType::F32>(kv, table, visible, nr, q, ldq, group, kvh, scale, out, ldo, span);
  }
}

}  // namespace dspark::detail
