// Matrix products y = x · Wᵀ with weights in HF Linear layout W[n, k] (bf16 or f32).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace dspark {

// A weight matrix W[n, k], row-major with row stride `ld` elements (>= k).
struct WeightMatrix {
  DType dtype = DType::F32;  // F32 or BF16
  int n = 0;
  int k = 0;
  int64_t ld = 0;
  const void* data = nullptr;

  WeightMatrix rows(int begin, int count) const;  // a view of rows [begin, begin+count)
};

enum class GemmBackend {
  Auto,       // best available on this CPU
  Reference,  // portable scalar loops; the correctness baseline
  Avx2,       // dspark's AVX2/FMA kernels (bf16 weights widened in registers)
  OneDnn,     // oneDNN matmul (AMX / AVX512-BF16 on CPUs that have them)
};

const char* gemm_backend_name(GemmBackend b);
// Sets the backend used by gemm() (for tests and benchmarks). Throws Error if the CPU lacks it.
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
void gemm_onednn(const float* x, int m, int64_t ldx, const WeightMatrix& w, float* y, int64_t ldy,
                 bool accumulate);
}  // namespace detail

}  // namespace dspark
