// AVX2 attention tile: all query rows of one sequence tile and all GQA heads of one kv head,
// streaming the sequence's K/V blocks once with an online softmax.
#include <algorithm>
#include <cmath>

#include "core/buffer.h"
#include "kernels/attention.h"
#include "kernels/simd_avx2.h"

namespace dspark::detail {

namespace {

template <bool kBf16>
inline void load_k16(const void* kt, int d, __m256& k0, __m256& k1) {
  if constexpr (kBf16) {
    const uint16_t* p = static_cast<const uint16_t*>(kt) + d * kKvBlock;
    k0 = avx2::load_bf16x8(p);
    k1 = avx2::load_bf16x8(p + 8);
  } else {
    const float* p = static_cast<const float*>(kt) + d * kKvBlock;
    k0 = _mm256_loadu_ps(p);
    k1 = _mm256_loadu_ps(p + 8);
  }
}

template <bool kBf16>
inline __m256 load_v8(const void* vb, int64_t idx) {
  if constexpr (kBf16) return avx2::load_bf16x8(static_cast<const uint16_t*>(vb) + idx);
  return _mm256_loadu_ps(static_cast<const float*>(vb) + idx);
}

template <bool kBf16>
void tile(const PagedKvLayer& kv, const int32_t* table, const int32_t* visible, int nr, const float* q,
          int64_t ldq, int group, int kvh, float scale, float* out, int64_t ldo) {
  const int hd = kv.head_dim;
  const int nq = nr * group;  // query vectors: index qi = r * group + g
  thread_local Buffer<float> scratch;
  scratch.resize(size_t(nq) * (2 * hd + kKvBlock + 2) + 64);
  float* qs = scratch.data();         // [nq][hd] scaled queries
  float* o = qs + nq * hd;            // [nq][hd] unnormalised outputs
  float* s = o + nq * hd;             // [nq][kKvBlock] scores of the current block
  float* mx = s + nq * kKvBlock;      // [nq] running max
  float* sum = mx + nq;               // [nq] running denominator
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
  const size_t esz = kBf16 ? 2 : 4;
  const int64_t head_off = int64_t(kvh) * hd * kKvBlock;
  for (int b0 = 0; b0 < max_vis; b0 += kKvBlock) {
    const int64_t base = int64_t(table[b0 / kKvBlock]) * kv.block_elems() + head_off;
    const void* kt = static_cast<const uint8_t*>(kv.k) + base * esz;
    const void* vb = static_cast<const uint8_t*>(kv.v) + base * esz;
    const int nkeys = std::min(kKvBlock, max_vis - b0);
    // Scores, four query vectors at a time (8 accumulators hide the FMA latency).
    int qi = 0;
    for (; qi + 4 <= nq; qi += 4) {
      __m256 a[4][2];
      for (int i = 0; i < 4; ++i) a[i][0] = a[i][1] = _mm256_setzero_ps();
      for (int d = 0; d < hd; ++d) {
        __m256 k0, k1;
        load_k16<kBf16>(kt, d, k0, k1);
        for (int i = 0; i < 4; ++i) {
          __m256 qb = _mm256_broadcast_ss(qs + (qi + i) * hd + d);
          a[i][0] = _mm256_fmadd_ps(qb, k0, a[i][0]);
          a[i][1] = _mm256_fmadd_ps(qb, k1, a[i][1]);
        }
      }
      for (int i = 0; i < 4; ++i) {
        _mm256_storeu_ps(s + (qi + i) * kKvBlock, a[i][0]);
        _mm256_storeu_ps(s + (qi + i) * kKvBlock + 8, a[i][1]);
      }
    }
    for (; qi < nq; ++qi) {
      __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
      for (int d = 0; d < hd; ++d) {
        __m256 k0, k1;
        load_k16<kBf16>(kt, d, k0, k1);
        __m256 qb = _mm256_broadcast_ss(qs + qi * hd + d);
        a0 = _mm256_fmadd_ps(qb, k0, a0);
        a1 = _mm256_fmadd_ps(qb, k1, a1);
      }
      _mm256_storeu_ps(s + qi * kKvBlock, a0);
      _mm256_storeu_ps(s + qi * kKvBlock + 8, a1);
    }
    // Mask, online softmax, and P·V.
    for (qi = 0; qi < nq; ++qi) {
      const int lim = std::min(nkeys, visible[qi / group] - b0);
      float* sr = s + qi * kKvBlock;
      if (lim <= 0) {
        for (int j = 0; j < kKvBlock; ++j) sr[j] = 0.f;
        continue;
      }
      for (int j = lim; j < kKvBlock; ++j) sr[j] = -INFINITY;
      __m256 s0 = _mm256_loadu_ps(sr), s1 = _mm256_loadu_ps(sr + 8);
      const float bmax = avx2::hmax(_mm256_max_ps(s0, s1));
      const float new_max = std::max(mx[qi], bmax);
      const float alpha = std::exp(mx[qi] - new_max);  // 0 on the first block (mx = -inf)
      const __m256 vm = _mm256_set1_ps(new_max);
      s0 = avx2::exp256(_mm256_sub_ps(s0, vm));
      s1 = avx2::exp256(_mm256_sub_ps(s1, vm));
      _mm256_storeu_ps(sr, s0);
      _mm256_storeu_ps(sr + 8, s1);
      sum[qi] = sum[qi] * alpha + avx2::hsum(_mm256_add_ps(s0, s1));
      mx[qi] = new_max;
      float* orow = o + qi * hd;
      const __m256 va = _mm256_set1_ps(alpha);
      for (int d = 0; d < hd; d += 32) {
        const int chunks = std::min(4, (hd - d) / 8);
        __m256 acc[4];
        for (int c = 0; c < chunks; ++c) acc[c] = _mm256_mul_ps(_mm256_loadu_ps(orow + d + 8 * c), va);
        for (int j = 0; j < lim; ++j) {
          const __m256 p = _mm256_broadcast_ss(sr + j);
          for (int c = 0; c < chunks; ++c)
            acc[c] = _mm256_fmadd_ps(p, load_v8<kBf16>(vb, int64_t(j) * hd + d + 8 * c), acc[c]);
        }
        for (int c = 0; c < chunks; ++c) _mm256_storeu_ps(orow + d + 8 * c, acc[c]);
      }
    }
  }
  for (int qi = 0; qi < nq; ++qi) {
    float* dst = out + (qi / group) * ldo + int64_t(kvh * group + qi % group) * hd;
    const __m256 inv = _mm256_set1_ps(sum[qi] > 0.f ? 1.f / sum[qi] : 0.f);
    for (int d = 0; d < hd; d += 8)
      _mm256_storeu_ps(dst + d, _mm256_mul_ps(_mm256_loadu_ps(o + qi * hd + d), inv));
  }
}

}  // namespace

void attention_tile_avx2(const PagedKvLayer& kv, const int32_t* table, const int32_t* visible, int nr,
                         const float* q, int64_t ldq, int group, int kvh, float scale, float* out,
                         int64_t ldo) {
  if (kv.dtype == DType::BF16) tile<true>(kv, table, visible, nr, q, ldq, group, kvh, scale, out, ldo);
  else tile<false>(kv, table, visible, nr, q, ldq, group, kvh, scale, out, ldo);
}

}  // namespace dspark::detail
