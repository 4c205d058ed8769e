#include "kernels/gemm.h"

#include <cstdlib>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>
#include <string>

#include "core/cpu.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace dspark {

bool gemm_backend_available(GemmBackend b) {
  const CpuFeatures& f = cpu_features();
  switch (b) {
    case GemmBackend::Avx2: return f.avx2 && f.fma;
    // Its kernels also use the AVX2 ones (f32 weights, bf16 rows) and 256-bit masked AVX-512 stores.
    case GemmBackend::Avx512Bf16: return f.avx512f && f.avx512bw && f.avx512vl && f.avx512_bf16 && f.avx2 && f.fma;
    default: return true;
  }
}

namespace {

void require_available(GemmBackend b, const std::string& what) {
  if (b == GemmBackend::Avx2 && !gemm_backend_available(b))
    fail(what, ": gemm backend avx2 needs a CPU with AVX2 and FMA");
  if (b == GemmBackend::Avx512Bf16 && !gemm_backend_available(b))
    fail(what, ": gemm backend avx512bf16 needs a CPU with AVX512F, AVX512BW, AVX512VL and AVX512_BF16 (this one: ",
         cpu_features().describe(), ")");
}

GemmBackend pick_auto() {
  // DSPARK_GEMM=avx2|avx512bf16|onednn|reference overrides the choice (benchmarks, and testing every backend on one machine).
  if (const char* env = std::getenv("DSPARK_GEMM"); env && *env) {
    const std::string what = std::string("environment variable DSPARK_GEMM=") + env;
    const GemmBackend b = gemm_backend_from_name(env, "environment variable DSPARK_GEMM");
    if (b != GemmBackend::Auto) {
      require_available(b, what);
      return b;
    }
  }
  // oneDNN is not the default: with weights in rows, the demo target's decode step took 4.6x the
  // pair-panel kernel's time on an idle machine and ~100x with another process on the cores,
  // where its OpenMP barrier waits for descheduled threads (docs/performance.md).
  if (gemm_backend_available(GemmBackend::Avx512Bf16)) return GemmBackend::Avx512Bf16;
  if (gemm_backend_available(GemmBackend::Avx2)) return GemmBackend::Avx2;
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
  if (quantized()) {
    if (begin % kQPanelRows != 0) fail("internal: a view of quantized weights must start at a multiple of ", kQPanelRows, " rows, not ", begin);
    r.nparts = 0;
    for (int j = 0; j < nparts; ++j) {
      const QuantPart& q = parts[j];
      const int lo = std::max(begin, q.row0), hi = std::min(begin + count, q.row0 + q.rows);
      if (lo >= hi) continue;
      QuantPart v = q;
      v.row0 = lo - begin;
      v.rows = hi - lo;
      v.data = q.data + size_t((lo - q.row0) / kQPanelRows) * qgemm_matrix_bytes(q.type, kQPanelRows, k);
      r.parts[r.nparts++] = v;
    }
    return r;
  }
  if (panels) {
    if (begin % kPanelRows != 0) fail("internal: a view of panel-packed weights must start at a multiple of ", kPanelRows, " rows, not ", begin);
    r.data = static_cast<const uint8_t*>(data) + int64_t(begin / kPanelRows) * panel_stride(pairs, k) * int64_t(dtype_size(dtype));
    if (scales) r.scales = scales + begin;
  } else {
    r.data = static_cast<const uint8_t*>(data) + int64_t(begin) * ld * int64_t(dtype_size(dtype));
  }
  return r;
}

WeightMatrix pack_panels(const WeightMatrix& w, void* dst) { return pack_panels(w, dst, current() == GemmBackend::Avx512Bf16); }

WeightMatrix pack_panels(const WeightMatrix& w, void* dst, bool pairs) {
  if (w.dtype != DType::BF16 || w.panels) fail("internal: pack_panels takes bf16 weights in rows");
  const int64_t K = w.k;
  // Copy first: dst may be the rows' own memory.
  std::vector<uint16_t> rows(size_t(w.n) * size_t(K));
  for (int r = 0; r < w.n; ++r)
    std::memcpy(rows.data() + size_t(r) * K, static_cast<const uint16_t*>(w.data) + r * w.ld, size_t(K) * 2);
  auto* out = static_cast<uint16_t*>(dst);
  const int64_t np = (w.n + kPanelRows - 1) / kPanelRows;
  std::memset(out, 0, size_t(np) * size_t(panel_stride(pairs, K)) * 2);  // padding rows and the pad column
  for (int64_t r = 0; r < w.n; ++r)
    for (int64_t c = 0; c < K; ++c) out[panel_index(pairs, K, r, c)] = rows[size_t(r) * K + c];
  WeightMatrix v = w;
  v.data = dst;
  v.ld = K;
  v.panels = true;
  v.pairs = pairs;
  return v;
}

WeightMatrix quantize_int8(const WeightMatrix& w) {
  if (w.dtype != DType::BF16 || !w.panels || !w.pairs) fail("internal: quantize_int8 takes bf16 weights in pair panels");
  if (w.k < 4) return w;  // too few columns for the scales to fit in the freed half
  const int64_t K = w.k, kp2 = panel_k(K), np = (w.n + kPanelRows - 1) / kPanelRows, rows = np * kPanelRows;
  const int64_t total = rows * kp2;  // elements, padding included
  auto* src = static_cast<uint16_t*>(const_cast<void*>(w.data));
  std::vector<float> scale(size_t(rows), 0.f);
  for (int64_t r = 0; r < w.n; ++r) {
    float mx = 0.f;
    for (int64_t c = 0; c < K; ++c) mx = std::max(mx, std::fabs(bf16_to_f32(src[panel_index(true, K, r, c)])));
    scale[size_t(r)] = mx / 127.f;
  }
  // In place, forward: byte i is written after element i (bytes 2i, 2i+1) and every element
  // before it were read. The row of element i follows from the pair layout.
  auto* dst = reinterpret_cast<int8_t*>(src);
  for (int64_t i = 0; i < total; ++i) {
    const int64_t r = (i / panel_stride(true, K)) * kPanelRows + (i % (2 * kPanelRows)) / 2;
    const float s = scale[size_t(r)];
    const float v = bf16_to_f32(src[i]);
    dst[i] = s > 0.f ? int8_t(std::clamp(std::nearbyint(v / s), -127.f, 127.f)) : int8_t(0);
  }
  auto* sc = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(src) + total);  // total is a multiple of 32
  std::memcpy(sc, scale.data(), scale.size() * 4);
  WeightMatrix q = w;
  q.dtype = DType::I8;
  q.scales = sc;
  return q;
}

size_t WeightMatrix::bytes() const {
  if (quantized()) {
    size_t b = 0;
    for (int j = 0; j < nparts; ++j) b += qgemm_matrix_bytes(parts[j].type, parts[j].rows, k);
    return b;
  }
  return size_t(n) * size_t(k) * dtype_size(dtype);
}

float weight_at(const WeightMatrix& w, int64_t r, int64_t c) {
  for (int j = 0; j < w.nparts; ++j) {
    const QuantPart& q = w.parts[j];
    if (r >= q.row0 && r < q.row0 + q.rows) return qgemm_weight_at(q.type, q.data, w.k, r - q.row0, c);
  }
  if (w.dtype == DType::I8)
    return float(static_cast<const int8_t*>(w.data)[panel_index(true, w.k, r, c)]) * w.scales[r];
  if (w.panels) return bf16_to_f32(static_cast<const uint16_t*>(w.data)[panel_index(w.pairs, w.k, r, c)]);
  if (w.dtype == DType::BF16) return bf16_to_f32(static_cast<const uint16_t*>(w.data)[r * w.ld + c]);
  return static_cast<const float*>(w.data)[r * w.ld + c];
}

bool gemm_wants_panels() { return current() == GemmBackend::Avx2 || current() == GemmBackend::Avx512Bf16; }

const char* gemm_backend_name(GemmBackend b) {
  switch (b) {
    case GemmBackend::Auto: return "auto";
    case GemmBackend::Reference: return "reference";
    case GemmBackend::Avx2: return "avx2";
    case GemmBackend::Avx512Bf16: return "avx512bf16";
    case GemmBackend::OneDnn: return "onednn";
  }
  return "?";
}

GemmBackend gemm_backend_from_name(const std::string& name, const std::string& what) {
  for (GemmBackend b : {GemmBackend::Auto, GemmBackend::Reference, GemmBackend::Avx2, GemmBackend::Avx512Bf16, GemmBackend::OneDnn})
    if (name == gemm_backend_name(b)) return b;
  fail(what, " must be auto, reference, avx2, avx512bf16 or onednn, got '", name, "'");
}

void set_gemm_backend(GemmBackend b) {
  if (b == GemmBackend::Auto) b = pick_auto();
  require_available(b, "set_gemm_backend");
  current() = b;
}

GemmBackend gemm_backend() { return current(); }

void gemm(const float* x, int m, int64_t ldx, const WeightMatrix& w, float* y, int64_t ldy,
          bool accumulate) {
  if (m <= 0 || w.n <= 0) return;
  if (w.quantized()) return qgemm(x, m, ldx, w.k, w.parts, w.nparts, y, ldy, accumulate);
  // Panels are read by the kernels of their layout, whatever the backend is now (it may have been
  // switched after loading); pair panels without AVX512-BF16 only by the reference loops.
  if (w.panels && w.pairs) {
    if (gemm_backend_available(GemmBackend::Avx512Bf16) && current() != GemmBackend::Reference) return detail::gemm_avx512bf16(x, m, ldx, w, y, ldy, accumulate);
    return detail::gemm_reference(x, m, ldx, w, y, ldy, accumulate);
  }
  switch (current()) {
    case GemmBackend::Avx512Bf16:  // bf16 rows and f32 weights (the exact mode) take the AVX2 kernels
    case GemmBackend::Avx2:
      return detail::gemm_avx2(x, m, ldx, w, y, ldy, accumulate);
    case GemmBackend::OneDnn:
      // Weights packed for the AVX2 kernels (the backend was switched after loading) stay there.
      if (w.panels) return detail::gemm_avx2(x, m, ldx, w, y, ldy, accumulate);
      // f32 weights stay on the dot kernel: its result for a row does not depend on how many rows are in
      // the batch, which the f32 mode's token-identical speculative greedy decoding relies on. oneDNN
      // chooses its blocking (and so its summation order) by shape.
      if (w.dtype != DType::BF16 && gemm_backend_available(GemmBackend::Avx2))
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
        if (w.panels) {
          for (int k = 0; k < w.k; ++k) acc += xr[k] * weight_at(w, n, k);
        } else if (w.dtype == DType::BF16) {
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
