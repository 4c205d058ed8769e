#include <cmath>

#include "kernels/ops.h"
#include "kernels/simd_avx2.h"

namespace dspark::detail {

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

int argmax_avx2(const float* x, int n) {
  // Pass 1: the largest non-NaN value (max_ps returns its second operand when the first is NaN).
  __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
    m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
  }
  float m = avx2::hmax(_mm256_max_ps(m0, m1));
  for (; i < n; ++i)
    if (x[i] > m) m = x[i];
  // Pass 2: its first occurrence (the row is in L1 by now).
  const __m256 mv = _mm256_set1_ps(m);
  for (i = 0; i + 8 <= n; i += 8) {
    const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), mv, _CMP_EQ_OQ));
    if (mask) return i + __builtin_ctz(unsigned(mask));
  }
  for (; i < n; ++i)
    if (x[i] == m) return i;
  return 0;
}

}  // namespace dspark::detail
