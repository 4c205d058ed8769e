// AVX-512 helpers shared by the AVX-512 translation units (include only from files built with
// AVX512F).
#pragma once

#include <immintrin.h>

namespace dspark::avx512 {

// exp(x) for 16 floats: the polynomial of avx2::exp256 (relative error about 2e-7, 0 below -87.3).
inline __m512 exp512(__m512 x) {
  const __m512 hi = _mm512_set1_ps(88.3762626647949f);
  const __m512 lo = _mm512_set1_ps(-87.3365478515625f);
  const __mmask16 below = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
  const __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), x);
  __m512 y = _mm512_set1_ps(1.9875691500E-4f);
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507E-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073E-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894E-2f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459E-1f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201E-1f));
  const __m512 x2 = _mm512_mul_ps(x, x);
  y = _mm512_fmadd_ps(y, x2, _mm512_add_ps(x, _mm512_set1_ps(1.f)));
  const __m512i n = _mm512_add_epi32(_mm512_cvtps_epi32(fx), _mm512_set1_epi32(127));
  const __m512 pow2n = _mm512_castsi512_ps(_mm512_slli_epi32(n, 23));
  return _mm512_maskz_mov_ps(_knot_mask16(below), _mm512_mul_ps(y, pow2n));
}

}  // namespace dspark::avx512
