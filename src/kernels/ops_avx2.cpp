#include <algorithm>
#include <cmath>

#include "kernels/ops.h"
#include "kernels/simd_avx2.h"

namespace dspark::detail {

void rope_avx2(float* x, int64_t ldx, int rows, int n_heads, int head_dim, const float* cos,
               const float* sin) {
  const int half = head_dim / 2;
  for (int r = 0; r < rows; ++r) {
    const float* c = cos + int64_t(r) * half;
    const float* s = sin + int64_t(r) * half;
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + r * ldx + int64_t(h) * head_dim;
      // The scalar loop's products and sums, each rounded: the empty asm keeps the compiler
      // from fusing a product into the sum (an FMA rounds once), so both paths agree bit for bit.
      for (int i = 0; i < half; i += 8) {
        const __m256 a = _mm256_loadu_ps(v + i), b = _mm256_loadu_ps(v + i + half);
        const __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_loadu_ps(s + i);
        __m256 ac = _mm256_mul_ps(a, cv), bs = _mm256_mul_ps(b, sv);
        __m256 bc = _mm256_mul_ps(b, cv), as = _mm256_mul_ps(a, sv);
        __asm__("" : "+x"(ac), "+x"(bs), "+x"(bc), "+x"(as));
        _mm256_storeu_ps(v + i, _mm256_sub_ps(ac, bs));
        _mm256_storeu_ps(v + i + half, _mm256_add_ps(bc, as));
      }
    }
  }
}

void to_bf16_avx2(const float* x, uint16_t* out, int n) {
  const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  // f32_to_bf16 on 8 values, in the low 16 bits of each lane.
  auto round8 = [&](const float* p) {
    const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(p));
    const __m256i hi = _mm256_srli_epi32(u, 16);
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(hi, one))), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    return _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, quiet), nan);
  };
  int i = 0;
  for (; i + 16 <= n; i += 16) {  // packus works per 128-bit lane: put the quarters back in order
    const __m256i packed = _mm256_packus_epi32(round8(x + i), round8(x + i + 8));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm256_permute4x64_epi64(packed, 0xd8));
  }
  convert_f32_to_bf16(x + i, out + i, size_t(n - i));
}

void silu_mul_avx2(const float* gate_up, int64_t ld_in, float* out, int64_t ld_out, int rows, int inter) {
  const __m256 one = _mm256_set1_ps(1.f);
  for (int r = 0; r < rows; ++r) {
    const float* g = gate_up + r * ld_in;
    const float* u = g + inter;
    float* o = out + r * ld_out;
    int i = 0;
    for (; i + 8 <= inter; i += 8) {
      __m256 gv = _mm256_loadu_ps(g + i);
      __m256 e = avx2::exp256(_mm256_sub_ps(_mm256_setzero_ps(), gv));
      __m256 s = _mm256_div_ps(gv, _mm256_add_ps(one, e));
      _mm256_storeu_ps(o + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
    }
    for (; i < inter; ++i) o[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
  }
}

void rmsnorm_avx2(const float* x, int64_t ldx, const float* weight, float* y, int64_t ldy, int rows,
                  int dim, float eps) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    float* yr = y + r * ldy;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= dim; i += 16) {
      __m256 v0 = _mm256_loadu_ps(xr + i), v1 = _mm256_loadu_ps(xr + i + 8);
      a0 = _mm256_fmadd_ps(v0, v0, a0);
      a1 = _mm256_fmadd_ps(v1, v1, a1);
    }
    for (; i < dim; i += 8) {
      __m256 v0 = _mm256_loadu_ps(xr + i);
      a0 = _mm256_fmadd_ps(v0, v0, a0);
    }
    float ss = avx2::hsum(_mm256_add_ps(a0, a1));
    __m256 inv = _mm256_set1_ps(1.f / std::sqrt(ss / float(dim) + eps));
    for (i = 0; i < dim; i += 8)
      _mm256_storeu_ps(yr + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(xr + i), inv),
                                             _mm256_loadu_ps(weight + i)));
  }
}

float max_value_avx2(const float* x, int n) {
  __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);  // max_ps returns its second operand for a NaN in x
    m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
  }
  float m = avx2::hmax(_mm256_max_ps(m0, m1));
  for (; i < n; ++i)
    if (x[i] > m) m = x[i];
  return m;
}

int argmax_avx2(const float* x, int n) {
  // Pass 1: the largest non-NaN value; pass 2: its first occurrence (the row is in L1 by now).
  const float m = max_value_avx2(x, n);
  const __m256 mv = _mm256_set1_ps(m);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), mv, _CMP_EQ_OQ));
    if (mask) return i + __builtin_ctz(unsigned(mask));
  }
  for (; i < n; ++i)
    if (x[i] == m) return i;
  return 0;
}

namespace {
// Adds the 8 floats of v to two double accumulators.
inline void add_pd(__m256 v, __m256d& lo, __m256d& hi) {
  lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
  hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}
inline double hsum_pd(__m256d a) {
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}
}  // namespace

double exp_shifted_avx2(const float* x, int n, float shift, float scale, float* out) {
  const __m256 sh = _mm256_set1_ps(shift), sc = _mm256_set1_ps(scale);
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = avx2::exp256(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), sh), sc));
    _mm256_storeu_ps(out + i, e);
    add_pd(e, lo, hi);
  }
  double sum = hsum_pd(_mm256_add_pd(lo, hi));
  if (i < n) {  // the tail through the same exp, so every value comes from one formula
    alignas(32) float in[8], e[8];
    for (int j = 0; j < 8; ++j) in[j] = i + j < n ? x[i + j] : shift;
    _mm256_store_ps(e, avx2::exp256(_mm256_mul_ps(_mm256_sub_ps(_mm256_load_ps(in), sh), sc)));
    for (int j = 0; i + j < n; ++j) sum += (out[i + j] = e[j]);
  }
  return sum;
}

double exp_sum_avx2(const float* x, int n, float shift) {
  // Four float accumulators for the exp's latency, folded into doubles every 256 values, so no
  // float partial sum holds more than 8 terms.
  const __m256 sh = _mm256_set1_ps(shift);
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  int i = 0;
  while (i + 32 <= n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (const int end = std::min(n - 31, i + 256); i < end; i += 32) {
      a0 = _mm256_add_ps(a0, avx2::exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), sh)));
      a1 = _mm256_add_ps(a1, avx2::exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), sh)));
      a2 = _mm256_add_ps(a2, avx2::exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i + 16), sh)));
      a3 = _mm256_add_ps(a3, avx2::exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i + 24), sh)));
    }
    add_pd(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)), lo, hi);
  }
  for (; i + 8 <= n; i += 8) add_pd(avx2::exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), sh)), lo, hi);
  double sum = hsum_pd(_mm256_add_pd(lo, hi));
  if (i < n) {  // the tail through the same exp; padding at the shift would add exp(0) = 1
    alignas(32) float in[8], e[8];
    for (int j = 0; j < 8; ++j) in[j] = i + j < n ? x[i + j] : -INFINITY;
    _mm256_store_ps(e, avx2::exp256(_mm256_sub_ps(_mm256_load_ps(in), sh)));
    for (int j = 0; i + j < n; ++j) sum += e[j];
  }
  return sum;
}

float max_value_and_count_avx2(const float* x, int n, float t, int* above) {
  const __m256 tv = _mm256_set1_ps(t);
  __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
  __m256i c0 = _mm256_setzero_si256(), c1 = c0;  // a compare's all-ones lane is -1
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
    m0 = _mm256_max_ps(v0, m0);  // max_ps returns its second operand for a NaN in x
    m1 = _mm256_max_ps(v1, m1);
    c0 = _mm256_sub_epi32(c0, _mm256_castps_si256(_mm256_cmp_ps(v0, tv, _CMP_GT_OQ)));
    c1 = _mm256_sub_epi32(c1, _mm256_castps_si256(_mm256_cmp_ps(v1, tv, _CMP_GT_OQ)));
  }
  float m = avx2::hmax(_mm256_max_ps(m0, m1));
  alignas(32) int32_t c[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(c), _mm256_add_epi32(c0, c1));
  int count = c[0] + c[1] + c[2] + c[3] + c[4] + c[5] + c[6] + c[7];
  for (; i < n; ++i) {
    if (x[i] > m) m = x[i];
    count += x[i] > t;
  }
  *above = count;
  return m;
}

int next_greater_avx2(const float* x, int n, int from, float t) {
  const __m256 tv = _mm256_set1_ps(t);
  int i = from;
  for (; i + 16 <= n; i += 16) {
    const int m0 = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), tv, _CMP_GT_OQ));
    const int m1 = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i + 8), tv, _CMP_GT_OQ));
    if (m0 | m1) return i + __builtin_ctz(unsigned(m0 | (m1 << 8)));
  }
  for (; i < n; ++i)
    if (x[i] > t) return i;
  return n;
}

double kept_sum_avx2(const float* x, int n, float floor) {
  const __m256 f = _mm256_set1_ps(floor), zero = _mm256_setzero_ps();
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 keep = _mm256_and_ps(_mm256_cmp_ps(v, f, _CMP_GE_OQ), _mm256_cmp_ps(v, zero, _CMP_NEQ_OQ));
    add_pd(_mm256_and_ps(v, keep), lo, hi);
  }
  double sum = hsum_pd(_mm256_add_pd(lo, hi));
  for (; i < n; ++i)
    if (x[i] >= floor && x[i] != 0.f) sum += x[i];
  return sum;
}

void kept_scale_avx2(float* x, int n, float floor, float s) {
  const __m256 f = _mm256_set1_ps(floor), zero = _mm256_setzero_ps(), sv = _mm256_set1_ps(s);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 keep = _mm256_and_ps(_mm256_cmp_ps(v, f, _CMP_GE_OQ), _mm256_cmp_ps(v, zero, _CMP_NEQ_OQ));
    _mm256_storeu_ps(x + i, _mm256_and_ps(_mm256_mul_ps(v, sv), keep));
  }
  for (; i < n; ++i) x[i] = x[i] >= floor && x[i] != 0.f ? x[i] * s : 0.f;
}

double residual_mass_avx2(const float* p, const float* q, double scale, int n) {
  const __m256d sc = _mm256_set1_pd(scale), zero = _mm256_setzero_pd();
  __m256d a0 = zero, a1 = zero;
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 pv = _mm256_loadu_ps(p + i);
    const __m256 qv = q ? _mm256_loadu_ps(q + i) : _mm256_setzero_ps();
    const __m256d plo = _mm256_cvtps_pd(_mm256_castps256_ps128(pv)), phi = _mm256_cvtps_pd(_mm256_extractf128_ps(pv, 1));
    const __m256d qlo = _mm256_cvtps_pd(_mm256_castps256_ps128(qv)), qhi = _mm256_cvtps_pd(_mm256_extractf128_ps(qv, 1));
    a0 = _mm256_add_pd(a0, _mm256_max_pd(_mm256_fmsub_pd(sc, plo, qlo), zero));
    a1 = _mm256_add_pd(a1, _mm256_max_pd(_mm256_fmsub_pd(sc, phi, qhi), zero));
  }
  double sum = hsum_pd(_mm256_add_pd(a0, a1));
  for (; i < n; ++i) sum += std::max(scale * p[i] - (q ? double(q[i]) : 0.0), 0.0);
  return sum;
}

}  // namespace dspark::detail
