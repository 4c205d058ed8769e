#include "kernels/gemm.h"

#include <cstdlib>
#include <string>

#include "core/cpu.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace dspark {

namespace {

GemmBackend pick_auto() {
  const CpuFeatures& f = cpu_features();
  // DSPARK_GEMM=avx2|onednn|reference overrides the choice (benchmarks, and testing every backend on one machine).
  if (const char* env = std::getenv("DSPARK_GEMM")) {
    const std::string v = env;
    if (v == "onednn") return GemmBackend::OneDnn;
    if (v == "reference") return GemmBackend::Reference;
    if (v == "avx2" && f.avx2 && f.fma) return GemmBackend::Avx2;
  }
  if (f.amx_bf16 || f.avx512_bf16) return GemmBackend::OneDnn;
  if (f.avx2 && f.fma) return GemmBackend::Avx2;
  return GemmBackend::Reference;
}

GemmBackend& current() {
  static GemmBackend b = pick_auto();
  return b;
}

}  // namespace

WeightMatrix WeightMatrix::rows(int begin, int count) const {
  WeightMatrix r = *this;
  r.n = count;
  r.data = static_cast<const uint8_t*>(data) + int64_t(begin) * ld * int64_t(dtype_size(dtype));
  return r;
}

const char* gemm_backend_name(GemmBackend b) {
  switch (b) {
    case GemmBackend::Auto: return "auto";
    case GemmBackend::Reference: return "reference";
    case GemmBackend::Avx2: return "avx2";
    case GemmBackend::OneDnn: return "onednn";
  }
  return "?";
}

void set_gemm_backend(GemmBackend b) {
  if (b == GemmBackend::Auto) b = pick_auto();
  if (b == GemmBackend::Avx2 && !(cpu_features().avx2 && cpu_features().fma))
    fail("gemm backend avx2 needs a CPU with AVX2 and FMA");
  current() = b;
}

GemmBackend gemm_backend() { return current(); }

void gemm(const float* x, int m, int64_t ldx, const WeightMatrix& w, float* y, int64_t ldy,
          bool accumulate) {
  if (m <= 0 || w.n <= 0) return;
  switch (current()) {
    case GemmBackend::Avx2:
      return detail::gemm_avx2(x, m, ldx, w, y, ldy, accumulate);
    case GemmBackend::OneDnn:
      // f32 weights stay on the dot kernel: its result for a row does not depend on how many rows are in
      // the batch, which the f32 mode's token-identical speculative greedy decoding relies on. oneDNN
      // chooses its blocking (and so its summation order) by shape.
      if (w.dtype != DType::BF16 && cpu_features().avx2 && cpu_features().fma)
        return detail::gemm_avx2(x, m, ldx, w, y, ldy, accumulate);
      return detail::gemm_onednn(x, m, ldx, w, y, ldy, accumulate);
    default:
      return detail::gemm_reference(x, m, ldx, w, y, ldy, accumulate);
  }
}

namespace detail {

void gemm_reference(const float* x, int m, int64_t ldx, const WeightMatrix& w, float* y, int64_t ldy,
                    bool accumulate) {
  const int chunk = 16;
  int tasks = (w.n + chunk - 1) / chunk;
  parallel_for(tasks, [&](int t) {
    int n0 = t * chunk, n1 = std::min(w.n, n0 + chunk);
    for (int n = n0; n < n1; ++n) {
      for (int i = 0; i < m; ++i) {
        const float* xr = x + int64_t(i) * ldx;
        float acc = 0.f;
        if (w.dtype == DType::BF16) {
          auto* wr = static_cast<const uint16_t*>(w.data) + int64_t(n) * w.ld;
          for (int k = 0; k < w.k; ++k) acc += xr[k] * bf16_to_f32(wr[k]);
        } else {
          auto* wr = static_cast<const float*>(w.data) + int64_t(n) * w.ld;
          for (int k = 0; k < w.k; ++k) acc += xr[k] * wr[k];
        }
        float& out = y[int64_t(i) * ldy + n];
        out = accumulate ? out + acc : acc;
      }
    }
  });
}

}  // namespace detail
}  // namespace dspark
