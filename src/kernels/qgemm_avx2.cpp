// AVX2 kernels for quantized panels (layout and arithmetic in qgemm.h), for CPUs without
// AVX512-VNNI. A panel runs as two halves of 8 rows (one ymm of f32 outputs each). A tile's codes
// for the half are unpacked once into a small L1 buffer and meet up to 8 rows of x: vpmaddubsw
// (unsigned codes against int8 activations; Q8_0's signed codes by their magnitude against the
// activations given their sign) and vpmaddwd with ones give the exact integer sums, folded into the
// outputs with the same fused multiply-adds, in the same order, as the AVX512 and reference
// kernels: the results are bit-identical to theirs.
#include <immintrin.h>

#include <algorithm>

#include "kernels/qgemm.h"

namespace dspark::detail {
namespace {

#define DSPARK_UNROLL _Pragma("GCC unroll 16")

inline __m256 f16x8(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256 u8x8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256 i8x8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256i ld(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m256i bcast4(const int8_t* q) {
  int32_t v;
  __builtin_memcpy(&v, q, 4);
  return _mm256_set1_epi32(v);
}

// Sum over slices [from, to) of codes . activations for one row, added to acc.
template <bool kSigned>
inline __m256i dot(__m256i acc, const uint8_t (*codes)[32], const uint8_t* raw, const int8_t* q, int from, int to) {
  const __m256i ones = _mm256_set1_epi16(1);
  DSPARK_UNROLL
  for (int j = from; j < to; ++j) {
    const __m256i c = _mm256_load_si256(reinterpret_cast<const __m256i*>(codes[j]));
    __m256i a = bcast4(q + 4 * j);
    if constexpr (kSigned) a = _mm256_sign_epi8(a, ld(raw + 64 * j));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(c, a), ones));
  }
  return acc;
}

template <GgmlType T, int MR>
void half_rows(const uint8_t* panel, int64_t nsb, int half, const QActBlock* xq, int64_t nb, float* y, int64_t ldy,
               int lanes, bool accumulate) {
  alignas(32) uint8_t codes[8][32];
  static const int32_t kMaskSrc[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  const __m256i mask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMaskSrc + 8 - std::min(lanes, 8)));
  __m256 tot[MR];
  DSPARK_UNROLL
  for (int i = 0; i < MR; ++i)
    tot[i] = accumulate ? _mm256_maskload_ps(y + i * ldy, mask) : _mm256_setzero_ps();
  constexpr int kTiles = qgemm_layout(T).tiles, kHeader = qgemm_layout(T).header, kTile = qgemm_layout(T).tile;
  constexpr int64_t kSb = kHeader + kTiles * kTile;
  const int hb = 32 * half;  // byte offset of this half in a 64-byte slice
  const __m256i lo = _mm256_set1_epi8(0x0F);
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* h = panel + sb * kSb;
    const __m256 d = f16x8(h + 16 * half);
    for (int t = 0; t < kTiles; ++t) {
      const uint8_t* tile = h + kHeader + t * kTile;
      const int64_t b = sb * kTiles + t;
      qgemm_prefetch_for<T, MR, kTile>(tile);
      if constexpr (T == GgmlType::Q8_0) {
        DSPARK_UNROLL
        for (int j = 0; j < 8; ++j)
          _mm256_store_si256(reinterpret_cast<__m256i*>(codes[j]), _mm256_abs_epi8(ld(tile + 64 * j + hb)));
      } else {
        DSPARK_UNROLL
        for (int v = 0; v < 4; ++v) {
          const __m256i x = ld(tile + 64 * v + hb);
          __m256i a = _mm256_and_si256(x, lo), c = _mm256_and_si256(_mm256_srli_epi16(x, 4), lo);
          if constexpr (T == GgmlType::Q6_K) {
            const __m256i m = _mm256_set1_epi8(0x30);
            const __m256i c0 = ld(tile + 256 + hb), c1 = ld(tile + 320 + hb);
            const int sh = 2 * v;  // bits 2v..2v+1 go to bits 4-5
            const __m256i h0 = sh <= 4 ? _mm256_slli_epi16(c0, 4 - sh) : _mm256_srli_epi16(c0, sh - 4);
            const __m256i h1 = sh <= 4 ? _mm256_slli_epi16(c1, 4 - sh) : _mm256_srli_epi16(c1, sh - 4);
            a = _mm256_or_si256(a, _mm256_and_si256(h0, m));
            c = _mm256_or_si256(c, _mm256_and_si256(h1, m));
          }
          if constexpr (T == GgmlType::Q5_0) {
            const __m256i bits = ld(tile + 256 + hb), m = _mm256_set1_epi8(0x10);
            const __m256i ha = _mm256_slli_epi16(bits, 4 - v);  // slice v's bit v -> bit 4
            const __m256i hc = _mm256_srli_epi16(bits, v);      // slice v+4's bit v+4 -> bit 4
            a = _mm256_or_si256(a, _mm256_and_si256(ha, m));
            c = _mm256_or_si256(c, _mm256_and_si256(hc, m));
          }
          _mm256_store_si256(reinterpret_cast<__m256i*>(codes[v]), a);
          _mm256_store_si256(reinterpret_cast<__m256i*>(codes[v + 4]), c);
        }
      }
      if constexpr (T == GgmlType::Q6_K) {
        const __m256 sc0 = _mm256_mul_ps(d, i8x8(h + 32 + 16 * (2 * t) + 8 * half));
        const __m256 sc1 = _mm256_mul_ps(d, i8x8(h + 32 + 16 * (2 * t + 1) + 8 * half));
        for (int i = 0; i < MR; ++i) {
          const QActBlock& a = xq[i * nb + b];
          const __m256i a0 = dot<false>(_mm256_set1_epi32(-32 * a.sum_lo), codes, tile, a.q, 0, 4);
          const __m256i a1 = dot<false>(_mm256_set1_epi32(-32 * (a.sum - a.sum_lo)), codes, tile, a.q, 4, 8);
          const __m256 ad = _mm256_set1_ps(a.d);
          tot[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a0), _mm256_mul_ps(sc0, ad), tot[i]);
          tot[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a1), _mm256_mul_ps(sc1, ad), tot[i]);
        }
      } else if constexpr (T == GgmlType::Q4_K) {
        const __m256 sc = _mm256_mul_ps(d, u8x8(h + 64 + 16 * t + 8 * half));
        const __m256 mn = _mm256_mul_ps(f16x8(h + 32 + 16 * half), u8x8(h + 192 + 16 * t + 8 * half));
        for (int i = 0; i < MR; ++i) {
          const QActBlock& a = xq[i * nb + b];
          const __m256i acc = dot<false>(_mm256_setzero_si256(), codes, tile, a.q, 0, 8);
          tot[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), _mm256_mul_ps(sc, _mm256_set1_ps(a.d)), tot[i]);
          tot[i] = _mm256_fnmadd_ps(mn, _mm256_set1_ps(a.dsum), tot[i]);
        }
      } else {
        constexpr bool kSigned = T == GgmlType::Q8_0;
        constexpr int kOff = kSigned ? 0 : T == GgmlType::Q5_0 ? 16 : 8;
        for (int i = 0; i < MR; ++i) {
          const QActBlock& a = xq[i * nb + b];
          const __m256i acc = dot<kSigned>(_mm256_set1_epi32(-kOff * a.sum), codes, tile + hb, a.q, 0, 8);
          tot[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), _mm256_mul_ps(d, _mm256_set1_ps(a.d)), tot[i]);
        }
      }
    }
  }
  DSPARK_UNROLL
  for (int i = 0; i < MR; ++i) _mm256_maskstore_ps(y + i * ldy, mask, tot[i]);
}

template <GgmlType T>
void rows_of(int mr, const uint8_t* panel, int64_t nsb, int half, const QActBlock* xq, int64_t nb, float* y,
             int64_t ldy, int lanes, bool accumulate) {
  switch (mr) {
#define DSPARK_CASE(R) \
  case R: return half_rows<T, R>(panel, nsb, half, xq, nb, y, ldy, lanes, accumulate);
    DSPARK_CASE(8) DSPARK_CASE(7) DSPARK_CASE(6) DSPARK_CASE(5) DSPARK_CASE(4) DSPARK_CASE(3) DSPARK_CASE(2)
#undef DSPARK_CASE
    default: return half_rows<T, 1>(panel, nsb, half, xq, nb, y, ldy, lanes, accumulate);
  }
}

template <GgmlType T>
void run(const uint8_t* panels, int64_t n, int64_t k, int p0, int p1, const QActBlock* xq, int m, float* y, int64_t ldy,
         bool accumulate) {
  const int64_t nsb = k / qgemm_superblock(T), nb = k / 32;
  const size_t panel_bytes = size_t(nsb) * qgemm_superblock_bytes(T);
  for (int p = p0; p < p1; ++p) {
    const int lanes = int(std::min<int64_t>(kQPanelRows, n - int64_t(p) * kQPanelRows));
    const int groups = (m + 7) / 8;
    for (int half = 0; half < 2 && 8 * half < lanes; ++half)
      for (int i = 0; i < m;) {
        const int mr = std::min(m - i, (m + groups - 1) / groups);
        rows_of<T>(mr, panels + size_t(p) * panel_bytes, nsb, half, xq + int64_t(i) * nb, nb,
                   y + int64_t(i) * ldy + int64_t(p) * kQPanelRows + 8 * half, ldy, lanes - 8 * half, accumulate);
        i += mr;
      }
  }
}

}  // namespace

// quantize_activations with AVX2: the same operations as the scalar loop (max of |x|, one f32
// division and reciprocal per block, x * (1/d) rounded to nearest even), so the same codes.
void quantize_activations_avx2(const float* x, int m, int64_t ldx, int64_t k, QActBlock* out) {
  const int64_t nb = k / 32;
  const __m256 sign = _mm256_set1_ps(-0.f), lim = _mm256_set1_ps(127.f), nlim = _mm256_set1_ps(-127.f);
  for (int i = 0; i < m; ++i) {
    const float* xr = x + int64_t(i) * ldx;
    for (int64_t b = 0; b < nb; ++b) {
      const float* v = xr + 32 * b;
      __m256 a[4];
      __m256 mx = _mm256_setzero_ps();
      for (int j = 0; j < 4; ++j) {
        a[j] = _mm256_loadu_ps(v + 8 * j);
        mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, a[j]));
      }
      __m128 h = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
      h = _mm_max_ps(h, _mm_movehl_ps(h, h));
      h = _mm_max_ss(h, _mm_movehdup_ps(h));
      const float amax = _mm_cvtss_f32(h);
      const float d = amax / 127.f, id = d > 0.f ? 1.f / d : 0.f;
      const __m256 vid = _mm256_set1_ps(id);
      __m256i q32[4];
      for (int j = 0; j < 4; ++j) {
        __m256 r = _mm256_round_ps(_mm256_mul_ps(a[j], vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        r = _mm256_min_ps(_mm256_max_ps(r, nlim), lim);
        q32[j] = _mm256_cvtps_epi32(r);
      }
      QActBlock& o = out[int64_t(i) * nb + b];
      // Pack to int8 in element order (the packs interleave 128-bit lanes; permute them back).
      const __m256i p01 = _mm256_packs_epi32(q32[0], q32[1]), p23 = _mm256_packs_epi32(q32[2], q32[3]);
      const __m256i p = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.q), p);
      const __m256i s01 = _mm256_add_epi32(q32[0], q32[1]), s23 = _mm256_add_epi32(q32[2], q32[3]);
      auto hsum = [](__m256i v) {
        __m128i t = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
        t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
        return _mm_cvtsi128_si32(t);
      };
      o.sum_lo = hsum(s01);
      o.sum = o.sum_lo + hsum(s23);
      o.d = d;
      o.dsum = d * float(o.sum);
      o.pad[0] = o.pad[1] = 0;
    }
  }
}

void qpanels_avx2(GgmlType t, const uint8_t* panels, int64_t n, int64_t k, int p0, int p1, const QActBlock* xq, int m,
                  float* y, int64_t ldy, bool accumulate) {
  switch (t) {
    case GgmlType::Q8_0: return run<GgmlType::Q8_0>(panels, n, k, p0, p1, xq, m, y, ldy, accumulate);
    case GgmlType::Q4_0: return run<GgmlType::Q4_0>(panels, n, k, p0, p1, xq, m, y, ldy, accumulate);
    case GgmlType::Q5_0: return run<GgmlType::Q5_0>(panels, n, k, p0, p1, xq, m, y, ldy, accumulate);
    case GgmlType::Q4_K: return run<GgmlType::Q4_K>(panels, n, k, p0, p1, xq, m, y, ldy, accumulate);
    case GgmlType::Q6_K: return run<GgmlType::Q6_K>(panels, n, k, p0, p1, xq, m, y, ldy, accumulate);
    default: return qpanels_reference(t, panels, n, k, p0, p1, xq, m, y, ldy, accumulate);
  }
}

}  // namespace dspark::detail
