// AVX512-BF16 matrix products for bf16 weights in pair panels (see pack_panels in gemm.h).
//
// vdpbf16ps multiplies 16 pairs of bf16 values and adds both products of each pair into one f32
// lane: with a pair panel's 64-byte k-pair slice (16 rows x (k, k+1)) and one row of x broadcast
// as its (x_k, x_k+1) pair, one instruction does 32 multiply-adds, with no widening. The rows of
// x are rounded to bf16 once per call (round to nearest even), as the matrix units need; the sums
// stay in f32. Every m runs one broadcast-x outer-product kernel over NP panels (1 or 2; 4 at
// m = 1, so that four independent chains hide the latency) and up to 12 rows of x (24 accumulators
// of the 32 zmm registers).
//
// Batch invariance: at every m, each output is the sum over k blocks of kKcPairs pairs, in order,
// of that block's chain of vdpbf16ps from zero (y = block 0, then y += block 1, ...). A row's
// result therefore does not depend on how many rows the call has, so speculative verification
// (9 rows) computes exactly what decoding (1 row) does.
//
// int8 pair panels (quantize_int8) hold the same layout at one byte per element: a k-pair slice of a
// panel is 32 bytes, widened to bf16 in registers (exactly: |q| <= 127) before the same
// instructions, and each panel's sums are multiplied by its rows' scales when stored.
//
// Built with AVX-512 flags; only called where gemm_backend_available(GemmBackend::Avx512Bf16).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/buffer.h"
#include "core/thread_pool.h"
#include "kernels/gemm.h"

namespace dspark::detail {
namespace {

#define DSPARK_UNROLL _Pragma("GCC unroll 16")

constexpr int kPanel = kPanelRows;  // W rows per panel: one zmm of f32 outputs
constexpr int kMaxRows = 12;        // rows of x per register block (2 panels x 12 = 24 accumulators)
// Up to this m a pair of panels is read once, k block after k block, and meets every row of x in
// register blocks (decode, verification, and the batched steps of serving). Beyond it (prefill) x
// is blocked by kMc rows, without a prefetch: a qwen3-0.6b step of 17 rows on that path cost 1.5x
// one of 16 on this one.
constexpr int kSmallM = 64;
constexpr int kSmallPanelsPerTask = 8;  // a multiple of 4
constexpr int64_t kKcPairs = 128;   // prefill: k-pairs per block (2 panels x 128 x 64 B = 16 KiB in L1)
constexpr int kMc = 96;             // prefill: rows of x per block (96 x 256 x 2 B = 48 KiB in L2)
constexpr int kPanelsPerTask = 4;   // prefill: panels per task
// Decode and verification with several rows: the first register block asks, at each 64-byte line
// of its panels, for the line this many k-pairs ahead (4 KiB of a bf16 panel). A 9-row pass does
// 18 multiplies per 128 bytes it reads, so its loads leave the out-of-order window too slowly to
// keep enough of DRAM's latency covered: without a prefetch it read the 0.6B shape's output head at
// a third of a 1-row pass's rate, and asking for the next group of panels (64 KiB ahead, into
// L2) instead was about 8% slower (`gemm_bench BM_Pairs_Bf16_LmHead/9`).
constexpr int64_t kPrefetchPairs = 64;

inline __mmask16 col_mask(int cols) { return cols >= kPanel ? __mmask16(0xffff) : __mmask16((1u << cols) - 1); }

// One k-pair slice of a panel (16 rows x 2 values) as bf16 pairs: the 64-byte slice of a bf16
// panel, or the 32-byte slice of an int8 one widened (via f32: cvtne2ps2bf16 keeps the lanes in order).
template <class E>
inline __m512bh load_slice(const E* s) {
  if constexpr (sizeof(E) == 4) {
    return (__m512bh)_mm512_loadu_si512(s);
  } else {
    const __m128i* b = reinterpret_cast<const __m128i*>(s);
    // The masked forms: GCC 12 warns that the unmasked ones' undefined pass-through is uninitialised.
    const __m512 lo = _mm512_maskz_cvtepi32_ps(0xffff, _mm512_maskz_cvtepi8_epi32(0xffff, _mm_loadu_si128(b)));
    const __m512 hi = _mm512_maskz_cvtepi32_ps(0xffff, _mm512_maskz_cvtepi8_epi32(0xffff, _mm_loadu_si128(b + 1)));
    return _mm512_cvtne2ps_pbh(hi, lo);
  }
}

// Stores (or adds) one panel's 16 sums for a row of y; `sc` (int8 panels) scales them first.
inline void store_out(float* y, __m512 v, int cols, bool store, const float* sc) {
  const __mmask16 mk = col_mask(cols);
  if (sc) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(mk, sc));
  if (!store) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mk, y));
  _mm512_mask_storeu_ps(y, mk, v);
}

// y[MR, NP*16] (+)= x[MR, 2*kp] . panels[kp pairs]: `xp` holds each row of x as bf16 pairs
// (row stride ldx 32-bit words), `panel` the first panel's slice at the first pair, the next panel
// `pstride` elements further; an element E is one row's pair (uint32_t: bf16, uint16_t: int8), so a
// slice is 16 of them. `pf` (optional) is prefetched one 64-byte line per 64 bytes of panel read.
// `sc` (int8 only) holds the scales of the first panel's rows, the next panel's 16 further.
template <int MR, int NP, class E>
void pair_micro(const uint32_t* xp, int64_t ldx, const E* panel, int64_t pstride, int64_t kp, float* y,
                int64_t ldy, int cols_last, bool store, const char* pf, const float* sc) {
  constexpr int64_t kPfEvery = 4 / int64_t(sizeof(E));  // k-pairs per 64-byte line of a panel
  __m512 acc[NP][MR];
  DSPARK_UNROLL
  for (int p = 0; p < NP; ++p)
    DSPARK_UNROLL
    for (int i = 0; i < MR; ++i) acc[p][i] = _mm512_setzero_ps();
  for (int64_t j = 0; j < kp; ++j) {
    if (pf && j % kPfEvery == 0) {
      DSPARK_UNROLL
      for (int p = 0; p < NP; ++p) _mm_prefetch(pf + (p * pstride + j * kPanel) * int64_t(sizeof(E)), _MM_HINT_T0);
    }
    __m512bh w[NP];
    DSPARK_UNROLL
    for (int p = 0; p < NP; ++p) w[p] = load_slice(panel + p * pstride + j * kPanel);
    DSPARK_UNROLL
    for (int i = 0; i < MR; ++i) {
      const __m512bh a = (__m512bh)_mm512_set1_epi32(int(xp[i * ldx + j]));
      DSPARK_UNROLL
      for (int p = 0; p < NP; ++p) acc[p][i] = _mm512_dpbf16_ps(acc[p][i], w[p], a);
    }
  }
  DSPARK_UNROLL
  for (int i = 0; i < MR; ++i)
    DSPARK_UNROLL
    for (int p = 0; p < NP; ++p)
      store_out(y + i * ldy + p * kPanel, acc[p][i], p == NP - 1 ? cols_last : kPanel, store, sc ? sc + p * kPanel : nullptr);
}

template <int NP, class E>
void pair_block(int mr, const uint32_t* xp, int64_t ldx, const E* panel, int64_t pstride, int64_t kp, float* y,
                int64_t ldy, int cols_last, bool store, const char* pf, const float* sc) {
  switch (mr) {
#define DSPARK_CASE(R) \
  case R: return pair_micro<R, NP>(xp, ldx, panel, pstride, kp, y, ldy, cols_last, store, pf, sc);
    DSPARK_CASE(12) DSPARK_CASE(11) DSPARK_CASE(10) DSPARK_CASE(9) DSPARK_CASE(8) DSPARK_CASE(7)
    DSPARK_CASE(6) DSPARK_CASE(5) DSPARK_CASE(4) DSPARK_CASE(3) DSPARK_CASE(2)
#undef DSPARK_CASE
    default: return pair_micro<1, NP>(xp, ldx, panel, pstride, kp, y, ldy, cols_last, store, pf, sc);
  }
}

// One row of x against 1 to 4 panels.
template <class E>
void pair_row(int np, const uint32_t* xp, const E* panel, int64_t pstride, int64_t kp, float* y, int cols_last,
              bool store, const char* pf, const float* sc) {
  switch (np) {
    case 4: return pair_micro<1, 4>(xp, 0, panel, pstride, kp, y, 0, cols_last, store, pf, sc);
    case 3: return pair_micro<1, 3>(xp, 0, panel, pstride, kp, y, 0, cols_last, store, pf, sc);
    case 2: return pair_micro<1, 2>(xp, 0, panel, pstride, kp, y, 0, cols_last, store, pf, sc);
    default: return pair_micro<1, 1>(xp, 0, panel, pstride, kp, y, 0, cols_last, store, pf, sc);
  }
}

// Register blocks of at most kMaxRows rows, as even as possible (13 -> 7 + 6, not 12 + 1).
inline int block_rows(int left) {
  const int blocks = (left + kMaxRows - 1) / kMaxRows;
  return (left + blocks - 1) / blocks;
}

}  // namespace

namespace {

// The product for panels of element type E (uint32_t: bf16 pairs, uint16_t: int8 pairs).
template <class E>
void gemm_pairs(const float* x, int m, int64_t ldx, const WeightMatrix& w, float* y, int64_t ldy, bool accumulate) {
  const int64_t K = w.k, kp = (K + 1) / 2;  // k-pairs; an odd k is padded with a zero weight
  const int panels = (w.n + kPanel - 1) / kPanel;
  const int64_t pstride = kp * kPanel;  // elements per panel
  const auto* base = static_cast<const E*>(w.data);
  const float* scales = w.scales;  // int8 only
  // x as bf16 pairs, a zero in the pad slot of an odd k (the pad weight is zero too, but 0 * NaN is not).
  thread_local Buffer<uint16_t> xb;
  xb.resize(size_t(m) * size_t(2 * kp));
  for (int i = 0; i < m; ++i) {
    const float* src = x + i * ldx;
    uint16_t* dst = xb.data() + size_t(i) * size_t(2 * kp);
    int64_t c = 0;
    for (; c + 16 <= K; c += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + c)));
    if (c < K) {
      const __mmask16 mk = __mmask16((1u << (K - c)) - 1);
      _mm256_mask_storeu_epi16(dst + c, mk, (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mk, src + c)));
    }
    if (K & 1) dst[K] = 0;
  }
  const auto* xp = reinterpret_cast<const uint32_t*>(xb.data());
  const int64_t ldxp = kp;
  // Panels [p, p + np) against rows [i0, i1) of x over k-pairs [j0, j0 + jn).
  auto run = [&](int p, int np, int i0, int i1, int64_t j0, int64_t jn, bool store, const char* pf) {
    const int n0 = p * kPanel, cols_last = w.n - (p + np - 1) * kPanel;
    const E* panel = base + int64_t(p) * pstride + j0 * kPanel;
    const float* sc = scales ? scales + n0 : nullptr;
    for (int i = i0; i < i1;) {
      const int mr = block_rows(i1 - i);
      const uint32_t* xr = xp + i * ldxp + j0;
      float* yr = y + i * ldy + n0;
      if (i1 - i0 == 1) {
        pair_row(np, xr, panel, pstride, jn, yr, cols_last, store, pf, sc);
      } else if (np == 2) {
        pair_block<2>(mr, xr, ldxp, panel, pstride, jn, yr, ldy, cols_last, store, i == i0 ? pf : nullptr, sc);
      } else {
        pair_block<1>(mr, xr, ldxp, panel, pstride, jn, yr, ldy, cols_last, store, i == i0 ? pf : nullptr, sc);
      }
      i += mr;
    }
  };
  if (m <= kSmallM) {
    // Decode, verification and batched steps: each group of panels (2, or 4 for one row) is read
    // once, k block after k block, and meets every row of x; with several rows the first register
    // block asks for its panels' bytes kPrefetchPairs pairs ahead.
    const int group = m == 1 ? 4 : 2;
    const int tasks = (panels + kSmallPanelsPerTask - 1) / kSmallPanelsPerTask;
    parallel_for(tasks, [&](int t) {
      const int p1 = std::min(panels, (t + 1) * kSmallPanelsPerTask);
      for (int p = t * kSmallPanelsPerTask; p < p1; p += group) {
        const int np = std::min(group, p1 - p);
        // The last group's lines ahead would run past the matrix: it goes without.
        const E* ahead = m > 1 && p + np < panels
                             ? base + int64_t(p) * pstride + kPrefetchPairs * kPanel
                             : nullptr;
        for (int64_t j0 = 0; j0 < kp; j0 += kKcPairs) {
          const char* pf = ahead ? reinterpret_cast<const char*>(ahead + j0 * kPanel) : nullptr;
          run(p, np, 0, m, j0, std::min(kKcPairs, kp - j0), j0 == 0 && !accumulate, pf);
        }
      }
    });
    return;
  }
  // Prefill: k blocks whose slice of a pair of panels stays in L1 while blocks of x stream past.
  // Partial sums of an int8 panel are scaled per k block, which is the same linear map.
  const int groups = (panels + kPanelsPerTask - 1) / kPanelsPerTask;
  parallel_for(groups, [&](int g) {
    const int p0 = g * kPanelsPerTask, p1 = std::min(panels, p0 + kPanelsPerTask);
    for (int64_t j0 = 0; j0 < kp; j0 += kKcPairs) {
      const int64_t jn = std::min(kKcPairs, kp - j0);
      const bool store = j0 == 0 && !accumulate;
      for (int m0 = 0; m0 < m; m0 += kMc) {
        const int m1 = std::min(m, m0 + kMc);
        for (int p = p0; p < p1; p += 2) run(p, std::min(2, p1 - p), m0, m1, j0, jn, store, nullptr);
      }
    }
  });
}

}  // namespace

void gemm_avx512bf16(const float* x, int m, int64_t ldx, const WeightMatrix& w, float* y, int64_t ldy,
                     bool accumulate) {
  if (w.dtype == DType::I8) return gemm_pairs<uint16_t>(x, m, ldx, w, y, ldy, accumulate);
  gemm_pairs<uint32_t>(x, m, ldx, w, y, ldy, accumulate);
}

}  // namespace dspark::detail
