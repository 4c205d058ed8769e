// AVX512-VNNI kernels for quantized panels (layout and arithmetic in qgemm.h).
//
// A panel's tile (16 rows x 32 weights) is unpacked, half at a time, into four zmm registers of
// byte codes, then meets up to 10 rows of x: per row, eight vpdpbusd (64 multiply-adds each, codes
// unsigned against int8 activations broadcast from their block, issued slice by slice across the
// rows so that neighbours are independent) give the exact integer sums of the 16 rows, and one or
// two fused multiply-adds fold them into the row's 16 f32 outputs. The outputs of up to 10 rows
// stay in registers over the whole k range; more rows take further passes over the panel (from
// L2). Q8_0's signed codes are biased by 128 (xor 0x80) and the bias removed with the activation
// block's code sum, as the other types' offsets (Q4_0's 8, Q5_0's 16, Q6_K's 32).
//
// Built with AVX-512 flags; only called where the CPU has AVX512F/BW/VL/VNNI, F16C and FMA.
#include <immintrin.h>

#include <algorithm>

#include "kernels/qgemm.h"

namespace dspark::detail {
namespace {

#define DSPARK_UNROLL _Pragma("GCC unroll 16")

// Rows of x per pass over a panel: their 10 integer sums, 10 outputs, half a tile's 4 code slices
// and the block's scales fill 28 of the 32 zmm registers. A 9-row verify runs in one pass.
constexpr int kMaxRows = 10;

inline __mmask16 lane_mask(int lanes) { return lanes >= 16 ? __mmask16(0xffff) : __mmask16((1u << lanes) - 1); }
inline __m512 f16x16(const uint8_t* p) { return _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline __m512 u8x16(const uint8_t* p) {
  return _mm512_maskz_cvtepi32_ps(0xffff, _mm512_maskz_cvtepu8_epi32(0xffff, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline __m512 i8x16(const uint8_t* p) {
  return _mm512_maskz_cvtepi32_ps(0xffff, _mm512_maskz_cvtepi8_epi32(0xffff, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline __m512i ld(const uint8_t* p) { return _mm512_loadu_si512(p); }

// Slices [4h, 4h + 4) of a tile's codes: eight slices of 16 rows x 4 weights each (qgemm.h), the
// low nibbles of the four code vectors then their high nibbles (Q8_0: the eight byte vectors,
// biased), with Q5_0's fifth bit and Q6_K's bits 4-5 or-ed in. Unpacking half a tile at a time
// keeps four code registers live instead of eight, which leaves room for more rows per pass.
template <GgmlType T, int H>
inline void unpack_half(const uint8_t* tile, __m512i s[4]) {
  const __m512i lo = _mm512_set1_epi8(0x0F);
  DSPARK_UNROLL
  for (int v = 0; v < 4; ++v) {
    if constexpr (T == GgmlType::Q8_0) {
      s[v] = _mm512_xor_si512(ld(tile + 64 * (4 * H + v)), _mm512_set1_epi8(char(0x80)));
    } else {
      const __m512i b = ld(tile + 64 * v);
      s[v] = H == 0 ? _mm512_and_si512(b, lo) : _mm512_and_si512(_mm512_srli_epi16(b, 4), lo);
    }
  }
  if constexpr (T == GgmlType::Q5_0) {
    // Slice j's fifth bit is bit j of each byte of the high-bit vector, moved to bit 4.
    const __m512i hb = ld(tile + 256), m = _mm512_set1_epi8(0x10);
    DSPARK_UNROLL
    for (int v = 0; v < 4; ++v) {
      const int j = 4 * H + v;
      const __m512i bit = j <= 4 ? _mm512_slli_epi16(hb, 4 - j) : _mm512_srli_epi16(hb, j - 4);
      s[v] = _mm512_or_si512(s[v], _mm512_and_si512(bit, m));
    }
  }
  if constexpr (T == GgmlType::Q6_K) {
    // Bits 4-5 of slice 4h + v are bits 2v..2v+1 of high-bit vector h.
    const __m512i c = ld(tile + 256 + 64 * H), m = _mm512_set1_epi8(0x30);
    DSPARK_UNROLL
    for (int v = 0; v < 4; ++v) {
      const __m512i bits = v <= 2 ? _mm512_slli_epi16(c, 4 - 2 * v) : _mm512_srli_epi16(c, 2 * v - 4);
      s[v] = _mm512_or_si512(s[v], _mm512_and_si512(bits, m));
    }
  }
}

// acc[i] += slices 4h..4h+3 (in s) against row i's activations of block b, slice-major so that
// consecutive vpdpbusd are independent (the integer sums are exact in any order).
template <int MR>
inline void dots(__m512i (&acc)[MR], const __m512i s[4], const QActBlock* xq, int64_t nb, int64_t b, int h) {
  DSPARK_UNROLL
  for (int j = 0; j < 4; ++j)
    DSPARK_UNROLL
    for (int i = 0; i < MR; ++i) {
      int32_t v;
      __builtin_memcpy(&v, xq[i * nb + b].q + 4 * (4 * h + j), 4);
      acc[i] = _mm512_dpbusd_epi32(acc[i], s[j], _mm512_set1_epi32(v));
    }
}

// acc[i] += the whole tile against row i's activations of block b.
template <GgmlType T, int MR>
inline void dots_tile(__m512i (&acc)[MR], const uint8_t* tile, const QActBlock* xq, int64_t nb, int64_t b) {
  __m512i s[4];
  unpack_half<T, 0>(tile, s);
  dots<MR>(acc, s, xq, nb, b, 0);
  unpack_half<T, 1>(tile, s);
  dots<MR>(acc, s, xq, nb, b, 1);
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
      qgemm_prefetch_for<T, MR, kTile>(tile);
      __m512i acc[MR];
      if constexpr (T == GgmlType::Q6_K) {
        // Two sub-blocks of 16 with their own scales: slices 0-3, then 4-7.
        __m512i s[4];
        DSPARK_UNROLL
        for (int i = 0; i < MR; ++i) acc[i] = _mm512_set1_epi32(-32 * xq[i * nb + b].sum_lo);
        unpack_half<T, 0>(tile, s);
        dots<MR>(acc, s, xq, nb, b, 0);
        const __m512 sc0 = _mm512_mul_ps(d, i8x16(h + 32 + 16 * (2 * t)));
        DSPARK_UNROLL
        for (int i = 0; i < MR; ++i) {
          const QActBlock& a = xq[i * nb + b];
          tot[i] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xffff, acc[i]), _mm512_mul_ps(sc0, _mm512_set1_ps(a.d)), tot[i]);
          acc[i] = _mm512_set1_epi32(-32 * (a.sum - a.sum_lo));
        }
        unpack_half<T, 1>(tile, s);
        dots<MR>(acc, s, xq, nb, b, 1);
        const __m512 sc1 = _mm512_mul_ps(d, i8x16(h + 32 + 16 * (2 * t + 1)));
        DSPARK_UNROLL
        for (int i = 0; i < MR; ++i)
          tot[i] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xffff, acc[i]), _mm512_mul_ps(sc1, _mm512_set1_ps(xq[i * nb + b].d)), tot[i]);
      } else if constexpr (T == GgmlType::Q4_K) {
        DSPARK_UNROLL
        for (int i = 0; i < MR; ++i) acc[i] = _mm512_setzero_si512();
        dots_tile<T, MR>(acc, tile, xq, nb, b);
        const __m512 sc = _mm512_mul_ps(d, u8x16(h + 64 + 16 * t));
        const __m512 mn = _mm512_mul_ps(dmin, u8x16(h + 192 + 16 * t));
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
        dots_tile<T, MR>(acc, tile, xq, nb, b);
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
    DSPARK_CASE(10) DSPARK_CASE(9) DSPARK_CASE(8) DSPARK_CASE(7) DSPARK_CASE(6) DSPARK_CASE(5) DSPARK_CASE(4) DSPARK_CASE(3) DSPARK_CASE(2)
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
    // Row groups of at most kMaxRows, as even as possible (so 16 rows run as 8 + 8).
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
