// AVX512-VNNI kernels for quantized panels (layout and arithmetic in qgemm.h).
//
// A panel's tile (16 rows x 32 weights) is unpacked into eight zmm registers of byte codes, then
// meets up to 8 rows of x: per row, eight vpdpbusd (64 multiply-adds each, codes unsigned against
// int8 activations broadcast from their block, issued slice by slice across the rows so that
// neighbours are independent) give the exact integer sums of the 16 rows, and one or two fused
// multiply-adds fold them into the row's 16 f32 outputs. The outputs of up to 8 rows stay in
// registers over the whole k range; more rows take further passes over the panel (from L2). Q8_0's signed codes are biased by 128 (xor
// 0x80) and the bias removed with the activation block's code sum, as the other types' offsets
// (Q4_0's 8, Q5_0's 16, Q6_K's 32).
//
// Built with AVX-512 flags; only called where the CPU has AVX512F/BW/VL/VNNI, F16C and FMA.
#include <immintrin.h>

#include <algorithm>

#include "kernels/qgemm.h"

namespace dspark::detail {
namespace {

#define DSPARK_UNROLL _Pragma("GCC unroll 16")

// Rows of x per pass over a panel: their 8 integer sums, 8 outputs and a tile's 8 code slices
// fill 24 of the 32 zmm registers.
constexpr int kMaxRows = 8;

inline __mmask16 lane_mask(int lanes) { return lanes >= 16 ? __mmask16(0xffff) : __mmask16((1u << lanes) - 1); }
inline __m512 f16x16(const uint8_t* p) { return _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline __m512 u8x16(const uint8_t* p) {
  return _mm512_maskz_cvtepi32_ps(0xffff, _mm512_maskz_cvtepu8_epi32(0xffff, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline __m512 i8x16(const uint8_t* p) {
  return _mm512_maskz_cvtepi32_ps(0xffff, _mm512_maskz_cvtepi8_epi32(0xffff, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline __m512i ld(const uint8_t* p) { return _mm512_loadu_si512(p); }

// The four nibble vectors of a tile as eight slices of codes 0..15.
inline void nibbles(const uint8_t* tile, __m512i s[8]) {
  const __m512i lo = _mm512_set1_epi8(0x0F);
  DSPARK_UNROLL
  for (int v = 0; v < 4; ++v) {
    const __m512i b = ld(tile + 64 * v);
    s[v] = _mm512_and_si512(b, lo);
    s[v + 4] = _mm512_and_si512(_mm512_srli_epi16(b, 4), lo);
  }
}

// Bits 4-5 of slice 4c+t's codes from the high-bit vector c (bits 2t..2t+1).
template <int T>
inline __m512i high_bits(__m512i c) {
  const __m512i m = _mm512_set1_epi8(0x30);
  if constexpr (T < 2) return _mm512_and_si512(_mm512_slli_epi16(c, 4 - 2 * T), m);
  else if constexpr (T == 2) return _mm512_and_si512(c, m);
  else return _mm512_and_si512(_mm512_srli_epi16(c, 2), m);
}

// acc[i] += the codes of slices [from, to) against row i's activations of block b, slice-major so
// that consecutive vpdpbusd are independent (the integer sums are exact in any order).
template <int MR>
inline void dots(__m512i (&acc)[MR], const __m512i s[8], const QActBlock* xq, int64_t nb, int64_t b, int from, int to) {
  DSPARK_UNROLL
  for (int j = from; j < to; ++j)
    DSPARK_UNROLL
    for (int i = 0; i < MR; ++i) {
      int32_t v;
      __builtin_memcpy(&v, xq[i * nb + b].q + 4 * j, 4);
      acc[i] = _mm512_dpbusd_epi32(acc[i], s[j], _mm512_set1_epi32(v));
    }
}

// Rows [0, MR) of xq (row stride nb blocks) against one panel of type T over nsb superblocks.
template <GgmlType T, int MR>
void panel_rows(const uint8_t* panel, int64_t nsb, const QActBlock* xq, int64_t nb, float* y, int64_t ldy, int lanes,
                bool accumulate) {
  const __mmask16 mk = lane_mask(lanes);
  __m512 tot[MR];
  DSPARK_UNROLL
  for (int i = 0; i < MR; ++i) tot[i] = accumulate ? _mm512_maskz_loadu_ps(mk, y + i * ldy) : _mm512_setzero_ps();
  constexpr int kTiles = qgemm_layout(T).tiles, kHeader = qgemm_layout(T).header, kTile = qgemm_layout(T).tile;
  constexpr int64_t kSb = kHeader + kTiles * kTile;
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* h = panel + sb * kSb;
    const __m512 d = f16x16(h);
    __m512 dmin;
    if constexpr (T == GgmlType::Q4_K) dmin = f16x16(h + 32);
    for (int t = 0; t < kTiles; ++t) {
      const uint8_t* tile = h + kHeader + t * kTile;
      const int64_t b = sb * kTiles + t;
      __m512i s[8];
      if constexpr (T == GgmlType::Q8_0) {
        const __m512i bias = _mm512_set1_epi8(char(0x80));
        DSPARK_UNROLL
        for (int j = 0; j < 8; ++j) s[j] = _mm512_xor_si512(ld(tile + 64 * j), bias);
      } else {
        nibbles(tile, s);
      }
      if constexpr (T == GgmlType::Q5_0) {
        const __m512i hb = ld(tile + 256), m = _mm512_set1_epi8(0x10);
        s[0] = _mm512_or_si512(s[0], _mm512_and_si512(_mm512_slli_epi16(hb, 4), m));
        s[1] = _mm512_or_si512(s[1], _mm512_and_si512(_mm512_slli_epi16(hb, 3), m));
        s[2] = _mm512_or_si512(s[2], _mm512_and_si512(_mm512_slli_epi16(hb, 2), m));
        s[3] = _mm512_or_si512(s[3], _mm512_and_si512(_mm512_slli_epi16(hb, 1), m));
        s[4] = _mm512_or_si512(s[4], _mm512_and_si512(hb, m));
        s[5] = _mm512_or_si512(s[5], _mm512_and_si512(_mm512_srli_epi16(hb, 1), m));
        s[6] = _mm512_or_si512(s[6], _mm512_and_si512(_mm512_srli_epi16(hb, 2), m));
        s[7] = _mm512_or_si512(s[7], _mm512_and_si512(_mm512_srli_epi16(hb, 3), m));
      }
      if constexpr (T == GgmlType::Q6_K) {
        const __m512i c0 = ld(tile + 256), c1 = ld(tile + 320);
        s[0] = _mm512_or_si512(s[0], high_bits<0>(c0));
        s[1] = _mm512_or_si512(s[1], high_bits<1>(c0));
        s[2] = _mm512_or_si512(s[2], high_bits<2>(c0));
        s[3] = _mm512_or_si512(s[3], high_bits<3>(c0));
        s[4] = _mm512_or_si512(s[4], high_bits<0>(c1));
        s[5] = _mm512_or_si512(s[5], high_bits<1>(c1));
        s[6] = _mm512_or_si512(s[6], high_bits<2>(c1));
        s[7] = _mm512_or_si512(s[7], high_bits<3>(c1));
      }
      __m512i acc[MR];
      if constexpr (T == GgmlType::Q6_K) {
        const __m512 sc0 = _mm512_mul_ps(d, i8x16(h + 32 + 16 * (2 * t)));
        const __m512 sc1 = _mm512_mul_ps(d, i8x16(h + 32 + 16 * (2 * t + 1)));
        DSPARK_UNROLL
        for (int i = 0; i < MR; ++i) acc[i] = _mm512_set1_epi32(-32 * xq[i * nb + b].sum_lo);
        dots<MR>(acc, s, xq, nb, b, 0, 4);
        DSPARK_UNROLL
        for (int i = 0; i < MR; ++i) {
          const QActBlock& a = xq[i * nb + b];
          tot[i] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xffff, acc[i]), _mm512_mul_ps(sc0, _mm512_set1_ps(a.d)), tot[i]);
          acc[i] = _mm512_set1_epi32(-32 * (a.sum - a.sum_lo));
        }
        dots<MR>(acc, s, xq, nb, b, 4, 8);
        DSPARK_UNROLL
        for (int i = 0; i < MR; ++i)
          tot[i] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xffff, acc[i]), _mm512_mul_ps(sc1, _mm512_set1_ps(xq[i * nb + b].d)), tot[i]);
      } else if constexpr (T == GgmlType::Q4_K) {
        const __m512 sc = _mm512_mul_ps(d, u8x16(h + 64 + 16 * t));
        const __m512 mn = _mm512_mul_ps(dmin, u8x16(h + 192 + 16 * t));
        DSPARK_UNROLL
        for (int i = 0; i < MR; ++i) acc[i] = _mm512_setzero_si512();
        dots<MR>(acc, s, xq, nb, b, 0, 8);
        DSPARK_UNROLL
        for (int i = 0; i < MR; ++i) {
          const QActBlock& a = xq[i * nb + b];
          tot[i] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xffff, acc[i]), _mm512_mul_ps(sc, _mm512_set1_ps(a.d)), tot[i]);
          tot[i] = _mm512_fnmadd_ps(mn, _mm512_set1_ps(a.dsum), tot[i]);
        }
      } else {
        constexpr int kOff = T == GgmlType::Q8_0 ? 128 : T == GgmlType::Q5_0 ? 16 : 8;
        DSPARK_UNROLL
        for (int i = 0; i < MR; ++i) acc[i] = _mm512_set1_epi32(-kOff * xq[i * nb + b].sum);
        dots<MR>(acc, s, xq, nb, b, 0, 8);
        DSPARK_UNROLL
        for (int i = 0; i < MR; ++i)
          tot[i] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xffff, acc[i]), _mm512_mul_ps(d, _mm512_set1_ps(xq[i * nb + b].d)), tot[i]);
      }
    }
  }
  DSPARK_UNROLL
  for (int i = 0; i < MR; ++i) _mm512_mask_storeu_ps(y + i * ldy, mk, tot[i]);
}

template <GgmlType T>
void rows_of(int mr, const uint8_t* panel, int64_t nsb, const QActBlock* xq, int64_t nb, float* y, int64_t ldy,
             int lanes, bool accumulate) {
  switch (mr) {
#define DSPARK_CASE(R) \
  case R: return panel_rows<T, R>(panel, nsb, xq, nb, y, ldy, lanes, accumulate);
    DSPARK_CASE(8) DSPARK_CASE(7) DSPARK_CASE(6) DSPARK_CASE(5) DSPARK_CASE(4) DSPARK_CASE(3) DSPARK_CASE(2)
#undef DSPARK_CASE
    default: return panel_rows<T, 1>(panel, nsb, xq, nb, y, ldy, lanes, accumulate);
  }
}

template <GgmlType T>
void run(const uint8_t* panels, int64_t n, int64_t k, int p0, int p1, const QActBlock* xq, int m, float* y, int64_t ldy,
         bool accumulate) {
  const int64_t nsb = k / qgemm_superblock(T), nb = k / 32;
  const size_t panel_bytes = size_t(nsb) * qgemm_superblock_bytes(T);
  for (int p = p0; p < p1; ++p) {
    const int lanes = int(std::min<int64_t>(kQPanelRows, n - int64_t(p) * kQPanelRows));
    // Row groups of at most kMaxRows, as even as possible (so 9 rows run as 5 + 4).
    const int groups = (m + kMaxRows - 1) / kMaxRows;
    for (int i = 0; i < m;) {
      const int mr = std::min(m - i, (m + groups - 1) / groups);
      rows_of<T>(mr, panels + size_t(p) * panel_bytes, nsb, xq + int64_t(i) * nb, nb,
                 y + int64_t(i) * ldy + int64_t(p) * kQPanelRows, ldy, lanes, accumulate);
      i += mr;
    }
  }
}

}  // namespace

void qpanels_avx512vnni(GgmlType t, const uint8_t* panels, int64_t n, int64_t k, int p0, int p1, const QActBlock* xq,
                        int m, float* y, int64_t ldy, bool accumulate) {
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
