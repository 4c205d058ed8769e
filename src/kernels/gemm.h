// Matrix products y = x · Wᵀ with weights in HF Linear layout W[n, k] (bf16 or f32).
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "kernels/qgemm.h"

namespace dspark {

// A weight matrix W[n, k], row-major with row stride `ld` elements (>= k), or, for bf16, in
// panels (see below), or int8 in pair panels with one f32 scale per row (see quantize_int8), or in
// llama.cpp's quantized block formats repacked into panels (`parts`, see qgemm.h).
struct WeightMatrix {
  DType dtype = DType::F32;  // F32, BF16, or I8 (pair panels only)
  int n = 0;
  int k = 0;
  int64_t ld = 0;
  const void* data = nullptr;
  bool panels = false;  // bf16 only: `data` holds kPanelRows-row panels, not rows (ld is unused)
  bool pairs = false;   // with panels: the AVX512-BF16 pair layout (see below), else the AVX2 one
  const float* scales = nullptr;  // I8: row r's value is int8 element * scales[r] (one per padded row)
  // Quantized (nparts > 0, dtype and data unused): rows [parts[j].row0, + parts[j].rows) in the
  // type and panels of part j; every row0 is a multiple of 16.
  QuantPart parts[3] = {};
  int nparts = 0;

  bool quantized() const { return nparts > 0; }
  // Bytes the kernels read for one product with this matrix.
  size_t bytes() const;

  // A view of rows [begin, begin+count); with panels, begin must be a multiple of kPanelRows.
  WeightMatrix rows(int begin, int count) const;
};

// The panel layouts of a bf16 matrix, read at every batch size: rows [16p, 16p+16) form panel p,
// stored k-major, so one pass over a panel feeds every row of x with contiguous loads.
// - AVX2 layout (pairs == false): 16 values per k, interleaved r0 r8 r1 r9 ... r7 r15, so one
//   32-byte load widens to rows 0-7 (shift left by 16) and rows 8-15 (mask) with two instructions.
//   Element (r, k) is at ((r/16) * k_total + k) * 16 + slot(r%16).
// - AVX512-BF16 layout (pairs == true): 32 values per k-pair, r0(k) r0(k+1) r1(k) r1(k+1) ...
//   r15(k+1), the operand order of vdpbf16ps. Element (r, k) is at ((r/16) * kp2 + k/2*2) * 16 +
//   2 * (r%16) + k%2.
// kp2 is k_total rounded up to even; rows past n and the pad column of an odd k are zero.
constexpr int kPanelRows = 16;
inline int panel_slot(int r) { return r < 8 ? 2 * r : 2 * (r - 8) + 1; }
inline int64_t panel_k(int64_t k) { return (k + 1) / 2 * 2; }
inline size_t panel_bytes(int64_t n, int64_t k) {
  return size_t((n + kPanelRows - 1) / kPanelRows) * kPanelRows * size_t(panel_k(k)) * 2;
}
// bf16 values per panel, and the index of element (r, c), in the panels of a matrix with k columns.
inline int64_t panel_stride(bool pairs, int64_t k) { return (pairs ? panel_k(k) : k) * kPanelRows; }
inline int64_t panel_index(bool pairs, int64_t k, int64_t r, int64_t c) {
  const int64_t base = (r / kPanelRows) * panel_stride(pairs, k);
  if (pairs) return base + (c / 2) * 2 * kPanelRows + 2 * (r % kPanelRows) + c % 2;
  return base + c * kPanelRows + panel_slot(int(r % kPanelRows));
}
// Writes bf16 row-layout `w` as panels into `dst` (panel_bytes(w.n, w.k) bytes; may be w.data
// itself when that much memory is there) and returns the panel view: the pair layout when
// `pairs`, else the AVX2 one.
WeightMatrix pack_panels(const WeightMatrix& w, void* dst, bool pairs);
// The same in the layout the current backend reads.
WeightMatrix pack_panels(const WeightMatrix& w, void* dst);
// Weight-only int8 of a bf16 matrix in pair panels, for weights whose rounding does not change what
// is generated (a drafter's: verification keeps the output the target's whatever it proposes).
// Each row r gets the symmetric scale s_r = max_c |W[r, c]| / 127 and element round(W[r, c] / s_r)
// in [-127, 127], stored in the same pair layout at one byte each (half the bytes the kernels
// stream); the kernels widen it to bf16 exactly and scale the row's sum. Written in place over
// `w.data` (the int8 panels, then the scales, fill its first half plus 4 bytes a row) and returned as
// the I8 view. Needs a whole matrix (not a row view) in bf16 pair panels with k >= 4 (smaller
// matrices are returned unchanged).
WeightMatrix quantize_int8(const WeightMatrix& w);

// The value of element (r, c) of `w` whatever its layout (tests and the reference backend).
float weight_at(const WeightMatrix& w, int64_t r, int64_t c);
// Whether bf16 weights should be packed into panels for the current backend (AVX2 and
// AVX512-BF16 read them fastest; oneDNN wants rows).
bool gemm_wants_panels();

enum class GemmBackend {
  Auto,       // best available on this CPU
  Reference,  // portable scalar loops; the correctness baseline
  Avx2,       // dspark's AVX2/FMA kernels (bf16 weights widened in registers)
  Avx512Bf16, // dspark's AVX512-BF16 kernels for bf16 weights (vdpbf16ps); f32 weights on AVX2
  OneDnn,     // oneDNN matmul (AMX / AVX512-BF16 on CPUs that have them)
};

const char* gemm_backend_name(GemmBackend b);
// The backend of a name (auto, reference, avx2, avx512bf16, onednn); `what` names the flag or
// variable in the Error for any other name.
GemmBackend gemm_backend_from_name(const std::string& name, const std::string& what);
// Whether this CPU can run backend `b` (Reference, OneDnn and Auto always can: oneDNN refuses
// products it cannot do with an Error of its own).
bool gemm_backend_available(GemmBackend b);
// Sets the backend used by gemm() (for tests and benchmarks). Throws Error if the CPU lacks it.
// Auto is the DSPARK_GEMM environment variable's backend when it is set, else the best this CPU
// runs; an unknown value, or a backend this CPU cannot run, is an Error naming the variable.
void set_gemm_backend(GemmBackend b);
GemmBackend gemm_backend();  // the backend gemm() uses now (never Auto)

// y[m, n] = x[m, k] · W[n, k]ᵀ   (accumulate: y += ...)
// x has row stride ldx, y has row stride ldy. Runs on the shared thread pool.
void gemm(const float* x, int m, int64_t ldx, const WeightMatrix& w, float* y, int64_t ldy,
          bool accumulate = false);

inline void gemm(const float* x, int m, const WeightMatrix& w, float* y, bool accumulate = false) {
  gemm(x, m, w.k, w, y, w.n, accumulate);
}

namespace detail {
// Backend entry points (same contract as gemm()).
void gemm_reference(const float* x, int m, int64_t ldx, const WeightMatrix& w, float* y, int64_t ldy,
                    bool accumulate);
void gemm_avx2(const float* x, int m, int64_t ldx, const WeightMatrix& w, float* y, int64_t ldy,
               bool accumulate);
void gemm_avx512bf16(const float* x, int m, int64_t ldx, const WeightMatrix& w, float* y, int64_t ldy,
                     bool accumulate);
void gemm_onednn(const float* x, int m, int64_t ldx, const WeightMatrix& w, float* y, int64_t ldy,
                 bool accumulate);
}  // namespace detail

}  // namespace dspark
