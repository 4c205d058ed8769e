// AVX2 attention tile: all query rows of one sequence tile and all GQA heads of one kv head,
// streaming the sequence's K/V blocks once with an online softmax.
#include <algorithm>
#include <cmath>

#include "core/buffer.h"
#include "kernels/attention.h"
#include "kernels/simd_avx2.h"

namespace dspark::detail {

namespace {

#define DSPARK_UNROLL_ATT _Pragma("GCC unroll 8")

// Eight fp8 values (the low 8 bytes of b) as f32 through f16 (F16C): e5m2 is the top byte of an
// f16; e4m3 shifted into an f16 gives its value / 256, which the tile folds into the scales.
template <DType kT>
inline __m256 widen_fp8x8(__m128i b) {
  const __m128i hi = _mm_unpacklo_epi8(_mm_setzero_si128(), b);  // each byte in a word's top half
  if constexpr (kT == DType::F8_E5M2) return _mm256_cvtph_ps(hi);
  // e4m3: shifted right one place arithmetically, the sign stays at bit 15 and a copy of it
  // lands on bit 14 (the f16 exponent's top bit), which is cleared.
  return _mm256_cvtph_ps(_mm_and_si128(_mm_srai_epi16(hi, 1), _mm_set1_epi16(int16_t(0xbfff))));
}

template <DType kT>
inline void load_k16(const void* kt, int d, __m256& k0, __m256& k1) {
  if constexpr (kT == DType::BF16) {
    const uint16_t* p = static_cast<const uint16_t*>(kt) + d * kKvBlock;
    k0 = avx2::load_bf16x8(p);
    k1 = avx2::load_bf16x8(p + 8);
  } else if constexpr (kT == DType::F8_E4M3 || kT == DType::F8_E5M2) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(kt) + d * kKvBlock));
    k0 = widen_fp8x8<kT>(b);
    k1 = widen_fp8x8<kT>(_mm_unpackhi_epi64(b, b));
  } else {
    const float* p = static_cast<const float*>(kt) + d * kKvBlock;
    k0 = _mm256_loadu_ps(p);
    k1 = _mm256_loadu_ps(p + 8);
  }
}

template <DType kT>
inline __m256 load_v8(const void* vb, int64_t idx) {
  if constexpr (kT == DType::BF16) return avx2::load_bf16x8(static_cast<const uint16_t*>(vb) + idx);
  else if constexpr (kT == DType::F8_E4M3 || kT == DType::F8_E5M2)
    return widen_fp8x8<kT>(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(vb) + idx)));
  else return _mm256_loadu_ps(static_cast<const float*>(vb) + idx);
}

// s[g][0..16) = q_g · K[:, 0..16) for G (1 or 2) query vectors (rows of q, stride hd).
// Each vector's sum runs in the same order whatever G is (two head-dimension halves, two key
// halves), so a row's scores do not depend on which rows share its tile: with f32 weights and
// cache, a token's logits are the same in a verification batch as in plain decoding.
template <int G, DType kT>
inline void scores(const void* kt, const float* q, int hd, float* s, NextBlock next) {
  constexpr int kSplit = 2;
  __m256 a[G][kSplit][2];
  DSPARK_UNROLL_ATT
  for (int g = 0; g < G; ++g)
    DSPARK_UNROLL_ATT
    for (int p = 0; p < kSplit; ++p) a[g][p][0] = a[g][p][1] = _mm256_setzero_ps();
  const int part = hd / kSplit;
  for (int d = 0; d < part; ++d) {
    prefetch_next_block<32 * int(dtype_size(kT))>(next, d);  // a block over hd / 2 steps
    DSPARK_UNROLL_ATT
    for (int p = 0; p < kSplit; ++p) {
      __m256 k0, k1;
      load_k16<kT>(kt, p * part + d, k0, k1);
      DSPARK_UNROLL_ATT
      for (int g = 0; g < G; ++g) {
        const __m256 qb = _mm256_broadcast_ss(q + g * hd + p * part + d);
        a[g][p][0] = _mm256_fmadd_ps(qb, k0, a[g][p][0]);
        a[g][p][1] = _mm256_fmadd_ps(qb, k1, a[g][p][1]);
      }
    }
  }
  DSPARK_UNROLL_ATT
  for (int g = 0; g < G; ++g) {
    _mm256_storeu_ps(s + g * kKvBlock, _mm256_add_ps(a[g][0][0], a[g][1][0]));
    _mm256_storeu_ps(s + g * kKvBlock + 8, _mm256_add_ps(a[g][0][1], a[g][1][1]));
  }
}

// o[g][d..d+8C) = o[g] * alpha[g] + sum_j p[g][j] * V[j][d..d+8C) for G query vectors.
template <int G, int C, DType kT>
inline void pv_chunk(const void* vb, const float* p, const float* alpha, int keys, int hd, int d, float* o) {
  __m256 acc[G][C];
  DSPARK_UNROLL_ATT
  for (int g = 0; g < G; ++g) {
    const __m256 va = _mm256_set1_ps(alpha[g]);
    DSPARK_UNROLL_ATT
    for (int c = 0; c < C; ++c) acc[g][c] = _mm256_mul_ps(_mm256_loadu_ps(o + g * hd + d + 8 * c), va);
  }
  for (int j = 0; j < keys; ++j) {
    __m256 v[C];
    DSPARK_UNROLL_ATT
    for (int c = 0; c < C; ++c) v[c] = load_v8<kT>(vb, int64_t(j) * hd + d + 8 * c);
    DSPARK_UNROLL_ATT
    for (int g = 0; g < G; ++g) {
      const __m256 pb = _mm256_broadcast_ss(p + g * kKvBlock + j);
      DSPARK_UNROLL_ATT
      for (int c = 0; c < C; ++c) acc[g][c] = _mm256_fmadd_ps(pb, v[c], acc[g][c]);
    }
  }
  DSPARK_UNROLL_ATT
  for (int g = 0; g < G; ++g)
    DSPARK_UNROLL_ATT
    for (int c = 0; c < C; ++c) _mm256_storeu_ps(o + g * hd + d + 8 * c, acc[g][c]);
}

template <int G, DType kT>
inline void pv(const void* vb, const float* p, const float* alpha, int keys, int hd, float* o) {
  int d = 0;
  for (; d + 32 <= hd; d += 32) pv_chunk<G, 4, kT>(vb, p, alpha, keys, hd, d, o);
  for (; d < hd; d += 8) pv_chunk<G, 1, kT>(vb, p, alpha, keys, hd, d, o);
}

template <DType kT>
void tile(const PagedKvLayer& kv, const int32_t* table, const int32_t* visible, int nr, const float* q,
          int64_t ldq, int group, int kvh, float scale, float* out, int64_t ldo, const TileKeys& span) {
  const int hd = kv.head_dim;
  const int nq = nr * group;  // query vectors: index qi = r * group + g
  thread_local Buffer<float> scratch;
  scratch.resize(size_t(nq) * (2 * hd + kKvBlock + 3) + 64);
  float* qs = scratch.data();         // [nq][hd] scaled queries
  float* o = qs + nq * hd;            // [nq][hd] unnormalised outputs
  float* s = o + nq * hd;             // [nq][kKvBlock] scores of the current block
  float* mx = s + nq * kKvBlock;      // [nq] running max
  float* sum = mx + nq;               // [nq] running denominator
  float* alpha_buf = sum + nq;        // [nq] rescale factor of the current block
  int max_vis = 0;
  for (int r = 0; r < nr; ++r) max_vis = std::max(max_vis, visible[r]);
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int qi = 0; qi < nq; ++qi) {
    const float* src = q + (qi / group) * ldq + int64_t(kvh * group + qi % group) * hd;
    for (int d = 0; d < hd; d += 8) {
      _mm256_storeu_ps(qs + qi * hd + d, _mm256_mul_ps(_mm256_loadu_ps(src + d), vscale));
      _mm256_storeu_ps(o + qi * hd + d, _mm256_setzero_ps());
    }
    mx[qi] = -INFINITY;
    sum[qi] = 0.f;
  }
  constexpr bool kFp8 = kT == DType::F8_E4M3 || kT == DType::F8_E5M2;
  constexpr float kWiden = kT == DType::F8_E4M3 ? 256.f : 1.f;  // e4m3 loads are / 256
  const size_t esz = dtype_size(kT);
  const __m256 widen = _mm256_set1_ps(kWiden);
  __m256 ks0 = _mm256_set1_ps(1.f), ks1 = ks0, vs0 = ks0, vs1 = ks0;
  const int end = std::min(max_vis, span.k1);
  for (int b0 = span.k0; b0 < end; b0 += kKvBlock) {
    const int32_t phys = table[b0 / kKvBlock];
    const int64_t base = kv.block_offset(kvh, phys);
    if constexpr (kFp8) {  // this block's 16 positions' scales
      const int64_t so = kv.scale_offset(kvh, phys);
      ks0 = _mm256_mul_ps(_mm256_loadu_ps(kv.k_scale + so), widen);
      ks1 = _mm256_mul_ps(_mm256_loadu_ps(kv.k_scale + so + 8), widen);
      vs0 = _mm256_mul_ps(_mm256_loadu_ps(kv.v_scale + so), widen);
      vs1 = _mm256_mul_ps(_mm256_loadu_ps(kv.v_scale + so + 8), widen);
    }
    const void* kt = static_cast<const uint8_t*>(kv.k) + base * esz;
    const void* vb = static_cast<const uint8_t*>(kv.v) + base * esz;
    // The first group of query vectors asks for the next block's K and V (prefetch_next_block).
    NextBlock next = next_block(kv, table, kvh, b0, end);
    const int nkeys = std::min(kKvBlock, max_vis - b0);
    // Scores: groups of query vectors share each K load; eight independent accumulator chains
    // (query vectors x key halves x head-dimension splits) keep the FMA units busy.
    int qi = 0;
    for (; qi + 2 <= nq; qi += 2, next = {})
      scores<2, kT>(kt, qs + qi * hd, hd, s + qi * kKvBlock, next);
    if (qi < nq) scores<1, kT>(kt, qs + qi * hd, hd, s + qi * kKvBlock, next);
    if constexpr (kFp8)
      for (qi = 0; qi < nq; ++qi) {
        float* sr = s + qi * kKvBlock;
        _mm256_storeu_ps(sr, _mm256_mul_ps(_mm256_loadu_ps(sr), ks0));
        _mm256_storeu_ps(sr + 8, _mm256_mul_ps(_mm256_loadu_ps(sr + 8), ks1));
      }
    // Mask and online softmax: s becomes the block's probabilities, o is rescaled.
    for (qi = 0; qi < nq; ++qi) {
      const int lim = std::min(nkeys, visible[qi / group] - b0);
      const int lo = span.start ? std::max(0, span.start[qi / group] - b0) : 0;
      float* sr = s + qi * kKvBlock;
      if (lim <= lo) {  // this row sees none of the block: leave its output as it is
        for (int j = 0; j < kKvBlock; ++j) sr[j] = 0.f;
        alpha_buf[qi] = 1.f;
        continue;
      }
      for (int j = 0; j < lo; ++j) sr[j] = -INFINITY;
      for (int j = lim; j < kKvBlock; ++j) sr[j] = -INFINITY;
      __m256 s0 = _mm256_loadu_ps(sr), s1 = _mm256_loadu_ps(sr + 8);
      const float new_max = std::max(mx[qi], avx2::hmax(_mm256_max_ps(s0, s1)));
      const float alpha = std::exp(mx[qi] - new_max);  // 0 on the first block (mx = -inf)
      const __m256 vm = _mm256_set1_ps(new_max);
      s0 = avx2::exp256(_mm256_sub_ps(s0, vm));
      s1 = avx2::exp256(_mm256_sub_ps(s1, vm));
      _mm256_storeu_ps(sr, kFp8 ? _mm256_mul_ps(s0, vs0) : s0);  // P·V weights carry V's scales
      _mm256_storeu_ps(sr + 8, kFp8 ? _mm256_mul_ps(s1, vs1) : s1);
      sum[qi] = sum[qi] * alpha + avx2::hsum(_mm256_add_ps(s0, s1));
      mx[qi] = new_max;
      alpha_buf[qi] = alpha;
    }
    // P·V, two query vectors at a time so each V load feeds eight accumulators.
    const int keys = std::min(kKvBlock, max_vis - b0);
    for (qi = 0; qi + 2 <= nq; qi += 2) pv<2, kT>(vb, s + qi * kKvBlock, alpha_buf + qi, keys, hd, o + qi * hd);
    if (qi < nq) pv<1, kT>(vb, s + qi * kKvBlock, alpha_buf + qi, keys, hd, o + qi * hd);
  }
  finish_tile(span, o, mx, sum, nq, group, kvh, hd, out, ldo);
}

}  // namespace

void attention_tile_avx2(const PagedKvLayer& kv, const int32_t* table, const int32_t* visible, int nr,
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
