// AVX2/FMA matrix products for bf16 and f32 weights W[n, k].
//
// - bf16 weights packed at load time into 16-row k-major panels (pack_panels): one
//   broadcast-x outer-product kernel (panel_micro, up to 6 x 16 accumulators) at every m, over
//   k blocks of kPackKc summed in order into y: each output's summation order is the same at
//   every m (batch invariance).
// - f32 weights (the exact mode): a dot-product kernel whose per-output summation order does
//   not depend on m. A 32-byte load of bf16 rows holds 16 weights; shifting left by 16 yields
//   the even elements as f32 and masking the low half the odd ones, so x is pre-arranged per
//   16-chunk as [even 8 | odd 8] and no widening shuffles are needed.
// - bf16 weights left in rows: the dot kernel for m <= kDotMaxRows; for larger m each 16-row
//   panel is packed per call into k-major f32 and runs through the same panel_micro from L1.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/buffer.h"
#include "core/thread_pool.h"
#include "kernels/gemm.h"

namespace dspark::detail {
namespace {

// Loops over register tiles must be fully unrolled, or the compiler keeps the
// accumulators in memory.
#define DSPARK_UNROLL _Pragma("GCC unroll 16")

constexpr int kDotMaxRows = 16;
constexpr int kPrefetchTiles = 2;  // how many W tiles ahead the dot kernel prefetches
constexpr int kDotKc = 4096;      // k block of the dot kernel: whole rows for usual sizes, so W
                                  // streams row after row (measured best for m = 8)
constexpr int kDotChunk = 32;     // W rows per parallel task in the dot kernel
constexpr int kDotGroup = 6;      // W rows that meet all rows of x before the next ones are read
                                  // (a multiple of every tile width NR: 2 and 3)
constexpr int kPackKc = 256;      // k block of the packed kernel (a 16 KiB panel stays in L1)
constexpr int kPackMc = 120;      // x rows per block of the packed kernel (120 KiB of x in L2)
constexpr int kPanel = 16;        // W rows per packed panel (two ymm columns of the 6x16 kernel)
constexpr int kPanelsPerTask = 4; // panels per parallel task

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Sums four vectors horizontally into one __m128 [h(a), h(b), h(c), h(d)].
inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  __m256 ab = _mm256_hadd_ps(a, b);
  __m256 cd = _mm256_hadd_ps(c, d);
  __m256 abcd = _mm256_hadd_ps(ab, cd);
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// ---- dot-product kernel ---------------------------------------------------------------

template <bool kBf16>
inline void load_w16(const void* w, int64_t k, __m256& lo, __m256& hi) {
  if constexpr (kBf16) {
    __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + k));
    lo = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    hi = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(int(0xffff0000u))));
  } else {
    lo = _mm256_loadu_ps(static_cast<const float*>(w) + k);
    hi = _mm256_loadu_ps(static_cast<const float*>(w) + k + 8);
  }
}

template <bool kBf16>
inline float w_at(const void* w, int64_t k) {
  if constexpr (kBf16) return bf16_to_f32(static_cast<const uint16_t*>(w)[k]);
  return static_cast<const float*>(w)[k];
}

// Keeps a value in a register: GCC otherwise folds a load into every FMA that uses it,
// and this CPU retires only about one 256-bit load per cycle.
#define DSPARK_IN_REGISTER(v) asm("" : "+x"(v))

// acc over k in [k0, k1) for MR rows of x (arranged; row stride ldx) and NR rows of W.
// k1 - k0 is a multiple of 16. Adds (or stores when `store`) into y.
// When `prefetch` is set, the next NR rows of W are prefetched at the same k, one tile ahead:
// with several rows of x per W row the kernel computes long enough per byte that the
// hardware prefetchers alone fall behind.
template <int MR, int NR, bool kBf16>
void dot_micro(const float* x, int64_t ldx, const uint8_t* w, int64_t ldw_bytes, int64_t k0,
               int64_t k1, float* y, int64_t ldy, bool store, bool prefetch) {
  __m256 acc[MR][NR];
  DSPARK_UNROLL
  for (int i = 0; i < MR; ++i)
    DSPARK_UNROLL
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int64_t k = k0; k < k1; k += 16) {
    if (prefetch && (k & 31) == 0) {
      DSPARK_UNROLL
      for (int j = 0; j < NR; ++j)
        _mm_prefetch(reinterpret_cast<const char*>(w + (kPrefetchTiles * NR + j) * ldw_bytes) + k * (kBf16 ? 2 : 4), _MM_HINT_T0);
    }
    __m256 lo[NR], hi[NR];
    DSPARK_UNROLL
    for (int j = 0; j < NR; ++j) load_w16<kBf16>(w + j * ldw_bytes, k, lo[j], hi[j]);
    DSPARK_UNROLL
    for (int i = 0; i < MR; ++i) {
      __m256 xe = _mm256_loadu_ps(x + i * ldx + k), xo = _mm256_loadu_ps(x + i * ldx + k + 8);
      DSPARK_IN_REGISTER(xe);
      DSPARK_IN_REGISTER(xo);
      DSPARK_UNROLL
      for (int j = 0; j < NR; ++j) {
        acc[i][j] = _mm256_fmadd_ps(xe, lo[j], acc[i][j]);
        acc[i][j] = _mm256_fmadd_ps(xo, hi[j], acc[i][j]);
      }
    }
  }
  DSPARK_UNROLL
  for (int i = 0; i < MR; ++i) {
    float* yr = y + i * ldy;
    DSPARK_UNROLL
    for (int j = 0; j < NR; ++j) yr[j] = store ? hsum(acc[i][j]) : yr[j] + hsum(acc[i][j]);
  }
}

// MR rows of x against W rows [0, nrows); `rows_left` (>= nrows) W rows exist from `w` on, so
// prefetches may run past this call's rows into the ones the next call will read.
template <int MR, bool kBf16>
void dot_rows(const float* x, int64_t ldx, const uint8_t* w, int64_t ldw_bytes, int nrows,
              int rows_left, int64_t k0, int64_t k1, float* y, int64_t ldy, bool store, bool prefetch) {
  // MR*NR accumulators + 2*NR widened weights + 2 x vectors must fit 16 ymm registers.
  constexpr int NR = MR == 2 ? 3 : 2;
  int j = 0;
  for (; j + NR <= nrows; j += NR)
    dot_micro<MR, NR, kBf16>(x, ldx, w + j * ldw_bytes, ldw_bytes, k0, k1, y + j, ldy, store,
                             prefetch && j + (kPrefetchTiles + 1) * NR <= rows_left);
  for (; j < nrows; ++j)
    dot_micro<MR, 1, kBf16>(x, ldx, w + j * ldw_bytes, ldw_bytes, k0, k1, y + j, ldy, store, false);
}

// m == 1 (decode): each W row is read start to end, so the whole matrix streams sequentially,
// the access pattern DRAM prefetchers serve best; four accumulators hide the FMA latency.
template <bool kBf16>
void dot_single_row(const float* x, const uint8_t* w, int64_t ldw_bytes, int nrows, int64_t kvec,
                    float* y, bool store) {
  for (int j = 0; j < nrows; ++j) {
    const uint8_t* wr = w + j * ldw_bytes;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t k = 0;
    for (; k + 32 <= kvec; k += 32) {
      __m256 l0, h0, l1, h1;
      load_w16<kBf16>(wr, k, l0, h0);
      load_w16<kBf16>(wr, k + 16, l1, h1);
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k), l0, a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k + 8), h0, a1);
      a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k + 16), l1, a2);
      a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k + 24), h1, a3);
    }
    if (k < kvec) {
      __m256 l0, h0;
      load_w16<kBf16>(wr, k, l0, h0);
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k), l0, a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k + 8), h0, a1);
    }
    const float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    y[j] = store ? s : y[j] + s;
  }
}

template <bool kBf16>
void gemm_dot(const float* x, int m, int64_t ldx, const WeightMatrix& w, float* y, int64_t ldy,
              bool accumulate) {
  const int64_t K = w.k;
  const int64_t kvec = K / 16 * 16;
  // Arrange x: for bf16 weights each 16-chunk becomes [even 8 | odd 8]; the tail is kept as is.
  thread_local Buffer<float> arranged;
  const float* xa = x;
  int64_t ldxa = ldx;
  if (kBf16) {
    arranged.resize(size_t(m) * size_t(K));
    for (int i = 0; i < m; ++i) {
      const float* src = x + i * ldx;
      float* dst = arranged.data() + i * K;
      for (int64_t c = 0; c < kvec; c += 16)
        for (int t = 0; t < 8; ++t) {
          dst[c + t] = src[c + 2 * t];
          dst[c + 8 + t] = src[c + 2 * t + 1];
        }
      for (int64_t c = kvec; c < K; ++c) dst[c] = src[c];
    }
    xa = arranged.data();
    ldxa = K;
  }
  const int64_t esz = kBf16 ? 2 : 4;
  const int64_t ldw_bytes = w.ld * esz;
  const auto* wbase = static_cast<const uint8_t*>(w.data);
  const int tasks = (w.n + kDotChunk - 1) / kDotChunk;
  parallel_for(tasks, [&](int t) {
    const int n0 = t * kDotChunk;
    const int nrows = std::min(kDotChunk, w.n - n0);
    const uint8_t* wt = wbase + n0 * ldw_bytes;
    // bf16 decode streams rows one by one; f32 keeps the tile kernel even for one row so
    // that every row is summed in the same order whatever the batch (see gemm_avx2 below).
    const bool single = kBf16 && m == 1;
    if (single && kvec > 0) dot_single_row<kBf16>(xa, wt, ldw_bytes, nrows, kvec, y + n0, !accumulate);
    for (int64_t k0 = 0; k0 < kvec && !single; k0 += kDotKc) {
      const int64_t k1 = std::min(kvec, k0 + kDotKc);
      const bool store = (k0 == 0) && !accumulate;
      // A group of kDotGroup W rows meets every row of x before the next group is read, so W
      // comes from DRAM once, at an even rate, and is re-read from L1/L2 by the other x blocks.
      // (Sweeping all of the task's W rows per x block instead leaves DRAM idle on the second
      // sweep and the multi-row step memory-bound on the first.)
      for (int j0 = 0; j0 < nrows; j0 += kDotGroup) {
        const int gr = std::min(kDotGroup, nrows - j0), left = nrows - j0;
        const uint8_t* wg = wt + j0 * ldw_bytes;
        float* yt = y + n0 + j0;
        int i = 0;
        for (; i + 4 <= m; i += 4)
          dot_rows<4, kBf16>(xa + i * ldxa, ldxa, wg, ldw_bytes, gr, left, k0, k1, yt + i * ldy, ldy, store, i == 0);
        const float* xr = xa + i * ldxa;
        float* yr = yt + i * ldy;
        switch (m - i) {
          case 3: dot_rows<3, kBf16>(xr, ldxa, wg, ldw_bytes, gr, left, k0, k1, yr, ldy, store, i == 0); break;
          case 2: dot_rows<2, kBf16>(xr, ldxa, wg, ldw_bytes, gr, left, k0, k1, yr, ldy, store, i == 0); break;
          case 1: dot_rows<1, kBf16>(xr, ldxa, wg, ldw_bytes, gr, left, k0, k1, yr, ldy, store, i == 0); break;
          default: break;
        }
      }
    }
    if (kvec == 0 && !accumulate)
      for (int i = 0; i < m; ++i) std::fill(y + i * ldy + n0, y + i * ldy + n0 + nrows, 0.f);
    if (kvec < K) {  // k tail, scalar (in the original x order)
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < nrows; ++j) {
          const uint8_t* wr = wt + j * ldw_bytes;
          float s = 0.f;
          for (int64_t k = kvec; k < K; ++k) s += x[i * ldx + k] * w_at<kBf16>(wr, k);
          y[i * ldy + n0 + j] += s;
        }
    }
  });
}


// ---- packed outer-product kernel --------------------------------------------------------

// Packs W rows [0, rows) (rows <= 16) x k [k0, k0+kc) into panel[kk * 16 + r] as f32;
// rows past `rows` are zero.
template <bool kBf16>
void pack_panel(const uint8_t* w, int64_t ldw_bytes, int rows, int64_t k0, int kc, float* panel) {
  int r = 0;
  for (; r + 8 <= rows; r += 8) {
    int kk = 0;
    for (; kk + 8 <= kc; kk += 8) {
      __m256 v[8];
      for (int i = 0; i < 8; ++i) {
        const uint8_t* row = w + (r + i) * ldw_bytes;
        if constexpr (kBf16) {
          __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(
              reinterpret_cast<const uint16_t*>(row) + k0 + kk));
          v[i] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        } else {
          v[i] = _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k0 + kk);
        }
      }
      // 8x8 transpose
      __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
      __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
      __m256 t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);
      __m256 t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);
      __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
      __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
      __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
      __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
      float* p = panel + kk * kPanel + r;
      _mm256_store_ps(p + 0 * kPanel, _mm256_permute2f128_ps(s0, s4, 0x20));
      _mm256_store_ps(p + 1 * kPanel, _mm256_permute2f128_ps(s1, s5, 0x20));
      _mm256_store_ps(p + 2 * kPanel, _mm256_permute2f128_ps(s2, s6, 0x20));
      _mm256_store_ps(p + 3 * kPanel, _mm256_permute2f128_ps(s3, s7, 0x20));
      _mm256_store_ps(p + 4 * kPanel, _mm256_permute2f128_ps(s0, s4, 0x31));
      _mm256_store_ps(p + 5 * kPanel, _mm256_permute2f128_ps(s1, s5, 0x31));
      _mm256_store_ps(p + 6 * kPanel, _mm256_permute2f128_ps(s2, s6, 0x31));
      _mm256_store_ps(p + 7 * kPanel, _mm256_permute2f128_ps(s3, s7, 0x31));
    }
    for (; kk < kc; ++kk)
      for (int i = 0; i < 8; ++i)
        panel[kk * kPanel + r + i] = w_at<kBf16>(w + (r + i) * ldw_bytes, k0 + kk);
  }
  for (; r < kPanel; ++r)
    for (int kk = 0; kk < kc; ++kk)
      panel[kk * kPanel + r] = r < rows ? w_at<kBf16>(w + r * ldw_bytes, k0 + kk) : 0.f;
}

// The 16 values of one panel k-slice as rows 0-7 (lo) and 8-15 (hi): a bf16 panel (interleaved,
// see pack_panels) is widened; an f32 panel (packed per call by pack_panel) is in row order.
inline void load_panel_k(const uint16_t* p, __m256& lo, __m256& hi) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  lo = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  hi = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(int(0xffff0000u))));
}

inline void load_panel_k(const float* p, __m256& lo, __m256& hi) {
  lo = _mm256_load_ps(p);
  hi = _mm256_load_ps(p + 8);
}

inline void store_16(float* y, __m256 v0, __m256 v1, int cols, bool store) {
  if (cols == kPanel) {
    if (!store) {
      v0 = _mm256_add_ps(v0, _mm256_loadu_ps(y));
      v1 = _mm256_add_ps(v1, _mm256_loadu_ps(y + 8));
    }
    _mm256_storeu_ps(y, v0);
    _mm256_storeu_ps(y + 8, v1);
  } else {
    alignas(32) float tmp[kPanel];
    _mm256_store_ps(tmp, v0);
    _mm256_store_ps(tmp + 8, v1);
    for (int c = 0; c < cols; ++c) y[c] = store ? tmp[c] : y[c] + tmp[c];
  }
}

// Lines to prefetch while a block computes: `lines` cache lines from `at`, spread evenly.
struct Prefetch {
  const char* at = nullptr;
  int64_t lines = 0;
};

// y[MR, 16] (+)= x[MR, kc] · panel[kc, 16]: broadcast-x outer products, 2*MR accumulators.
template <int MR, typename P>
void panel_micro(const float* x, int64_t ldx, const P* panel, int64_t kc, float* y, int64_t ldy,
                 int cols, bool store, Prefetch pf = {}) {
  __m256 c0[MR], c1[MR];
  DSPARK_UNROLL
  for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm256_setzero_ps();
  // k runs in steps of `step`, one prefetched line per step.
  const int64_t step = pf.lines > 0 ? std::max<int64_t>(1, kc / pf.lines) : kc;
  int64_t line = 0;
  for (int64_t k0 = 0; k0 < kc; k0 += step) {
    if (line < pf.lines) _mm_prefetch(pf.at + 64 * line++, _MM_HINT_T0);
    const int64_t k1 = std::min(kc, k0 + step);
    for (int64_t kk = k0; kk < k1; ++kk) {
      __m256 b0, b1;
      load_panel_k(panel + kk * kPanel, b0, b1);
      DSPARK_UNROLL
      for (int i = 0; i < MR; ++i) {
        const __m256 a = _mm256_broadcast_ss(x + i * ldx + kk);
        c0[i] = _mm256_fmadd_ps(a, b0, c0[i]);
        c1[i] = _mm256_fmadd_ps(a, b1, c1[i]);
      }
    }
  }
  DSPARK_UNROLL
  for (int i = 0; i < MR; ++i) store_16(y + i * ldy, c0[i], c1[i], cols, store);
}

// Rows [i, i+mr) of x against one panel k-range.
template <typename P>
void panel_block(int mr, const float* x, int64_t ldx, const P* panel, int64_t kc, float* y, int64_t ldy,
                 int cols, bool store, Prefetch pf = {}) {
  switch (mr) {
    case 6: return panel_micro<6>(x, ldx, panel, kc, y, ldy, cols, store, pf);
    case 5: return panel_micro<5>(x, ldx, panel, kc, y, ldy, cols, store, pf);
    case 4: return panel_micro<4>(x, ldx, panel, kc, y, ldy, cols, store, pf);
    case 3: return panel_micro<3>(x, ldx, panel, kc, y, ldy, cols, store, pf);
    case 2: return panel_micro<2>(x, ldx, panel, kc, y, ldy, cols, store, pf);
    default: return panel_micro<1>(x, ldx, panel, kc, y, ldy, cols, store, pf);
  }
}

// Splits the rows left into register blocks of at most 6, as even as possible (8 -> 4 + 4,
// not 6 + 2: a 2-row block has too few accumulators to hide the FMA latency).
inline int block_rows(int left) { return left <= 6 ? left : left >= 12 ? 6 : (left + 1) / 2; }

template <bool kBf16>
void gemm_packed(const float* x, int m, int64_t ldx, const WeightMatrix& w, float* y, int64_t ldy,
                 bool accumulate) {
  const int64_t K = w.k;
  const int64_t ldw_bytes = w.ld * (kBf16 ? 2 : 4);
  const auto* wbase = static_cast<const uint8_t*>(w.data);
  const int panels = (w.n + kPanel - 1) / kPanel;
  const int groups = (panels + kPanelsPerTask - 1) / kPanelsPerTask;
  parallel_for(groups, [&](int g) {
    thread_local Buffer<float> panel_storage;
    panel_storage.resize(size_t(kPackKc) * kPanel);
    float* panel = panel_storage.data();
    const int p0 = g * kPanelsPerTask, p1 = std::min(panels, p0 + kPanelsPerTask);
    for (int64_t k0 = 0; k0 < K; k0 += kPackKc) {
      const int kc = int(std::min<int64_t>(kPackKc, K - k0));
      const bool store = (k0 == 0) && !accumulate;
      for (int m0 = 0; m0 < m; m0 += kPackMc) {
        const int m1 = std::min(m, m0 + kPackMc);
        for (int p = p0; p < p1; ++p) {
          const int n0 = p * kPanel, cols = std::min(kPanel, w.n - n0);
          pack_panel<kBf16>(wbase + n0 * ldw_bytes, ldw_bytes, cols, k0, kc, panel);
          for (int i = m0; i < m1;) {
            const int mr = block_rows(m1 - i);
            panel_block(mr, x + i * ldx + k0, ldx, static_cast<const float*>(panel), kc, y + i * ldy + n0, ldy, cols, store);
            i += mr;
          }
        }
      }
    }
  });
}

// ---- bf16 panels (pre-packed at load time, see pack_panels) ----------------------------

constexpr int kSmallPanelsPerTask = 8;  // panels per parallel task when m is small

void gemm_panels(const float* x, int m, int64_t ldx, const WeightMatrix& w, float* y, int64_t ldy,
                 bool accumulate) {
  const int64_t K = w.k;
  const auto* base = static_cast<const uint16_t*>(w.data);
  const int panels = (w.n + kPanel - 1) / kPanel;
  if (m <= kDotMaxRows) {
    // Decode and verification: each panel is read from DRAM once and meets every row of x
    // while it is in L1/L2, k block after k block (the prefill path's blocks, so that each output
    // is summed in the same order at every m: batch invariance).
    const int tasks = (panels + kSmallPanelsPerTask - 1) / kSmallPanelsPerTask;
    parallel_for(tasks, [&](int t) {
      const int p1 = std::min(panels, (t + 1) * kSmallPanelsPerTask);
      for (int p = t * kSmallPanelsPerTask; p < p1; ++p) {
        const int n0 = p * kPanel, cols = std::min(kPanel, w.n - n0);
        const uint16_t* panel = base + int64_t(p) * kPanel * K;
        // With several rows of x a panel takes long enough to compute that DRAM would idle
        // unless asked ahead: every block prefetches its share of the next panel, so the next
        // panel streams in at an even rate over the whole of this one's compute.
        const int blocks = m <= 6 ? 1 : m < 12 ? 2 : (m + 5) / 6;
        const int64_t kblocks = (K + kPackKc - 1) / kPackKc, shares = kblocks * blocks;
        const int64_t panel_lines = int64_t(kPanel) * K * 2 / 64;
        const char* next = m > 1 && p + 1 < panels ? reinterpret_cast<const char*>(panel + int64_t(kPanel) * K) : nullptr;
        for (int64_t k0 = 0, kb = 0; k0 < K; k0 += kPackKc, ++kb) {
          const int64_t kc = std::min<int64_t>(kPackKc, K - k0);
          int b = 0;
          for (int i = 0; i < m; ++b) {
            const int mr = block_rows(m - i);
            Prefetch pf;
            if (next) {
              const int64_t share = kb * blocks + b;
              const int64_t l0 = panel_lines * share / shares, l1 = panel_lines * (share + 1) / shares;
              pf = {next + 64 * l0, l1 - l0};
            }
            panel_block(mr, x + i * ldx + k0, ldx, panel + k0 * kPanel, kc, y + i * ldy + n0, ldy, cols,
                        k0 == 0 && !accumulate, pf);
            i += mr;
          }
        }
      }
    });
    return;
  }
  // Prefill: k blocks whose panel slice (kPackKc x 16) stays in L1 while blocks of x stream.
  const int groups = (panels + kPanelsPerTask - 1) / kPanelsPerTask;
  parallel_for(groups, [&](int g) {
    const int p0 = g * kPanelsPerTask, p1 = std::min(panels, p0 + kPanelsPerTask);
    for (int64_t k0 = 0; k0 < K; k0 += kPackKc) {
      const int64_t kc = std::min<int64_t>(kPackKc, K - k0);
      const bool store = (k0 == 0) && !accumulate;
      for (int m0 = 0; m0 < m; m0 += kPackMc) {
        const int m1 = std::min(m, m0 + kPackMc);
        for (int p = p0; p < p1; ++p) {
          const int n0 = p * kPanel, cols = std::min(kPanel, w.n - n0);
          const uint16_t* panel = base + (int64_t(p) * K + k0) * kPanel;
          for (int i = m0; i < m1;) {
            const int mr = block_rows(m1 - i);
            panel_block(mr, x + i * ldx + k0, ldx, panel, kc, y + i * ldy + n0, ldy, cols, store);
            i += mr;
          }
        }
      }
    }
  });
}

}  // namespace

void gemm_avx2(const float* x, int m, int64_t ldx, const WeightMatrix& w, float* y, int64_t ldy,
               bool accumulate) {
  if (w.panels) return gemm_panels(x, m, ldx, w, y, ldy, accumulate);
  const bool bf16 = w.dtype == DType::BF16;
  // f32 weights are the exact mode: each output is summed by the same instruction sequence
  // whatever m is (the dot kernel's accumulation per output does not depend on the tiling),
  // so a row's result never depends on the rest of the batch. bf16 picks kernels by speed.
  if (!bf16) return gemm_dot<false>(x, m, ldx, w, y, ldy, accumulate);
  // bf16 weights still in rows (not packed at load, e.g. matrices that are also read by row).
  if (m <= kDotMaxRows) return gemm_dot<true>(x, m, ldx, w, y, ldy, accumulate);
  gemm_packed<true>(x, m, ldx, w, y, ldy, accumulate);
}

}  // namespace dspark::detail
