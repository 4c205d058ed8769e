#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/gemm.h"

namespace dspark {
namespace {

struct Case {
  int m, n, k;
  DType dtype;
  bool accumulate;
  bool panels = false;  // bf16 weights packed into the panel layout first
};

// The same product in double precision, from the weights exactly as stored.
std::vector<double> exact(const std::vector<float>& x, int m, int ldx, const WeightMatrix& w) {
  std::vector<double> y(size_t(m) * size_t(w.n));
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < w.n; ++j) {
      double acc = 0;
      for (int k = 0; k < w.k; ++k) {
        double wv = w.dtype == DType::BF16 ? bf16_to_f32(static_cast<const uint16_t*>(w.data)[j * w.ld + k])
                                           : static_cast<const float*>(w.data)[j * w.ld + k];
        acc += double(x[size_t(i * ldx + k)]) * wv;
      }
      y[size_t(i * w.n + j)] = acc;
    }
  return y;
}

void run_case(const Case& c, GemmBackend backend, bool onednn_direct = false) {
  std::mt19937 rng(c.m * 1000003 + c.n * 1009 + c.k);
  std::normal_distribution<float> nd;
  const int ldx = c.k + 3, ldw = c.k + 5, ldy = c.n + 7;  // strides wider than the rows
  std::vector<float> x(size_t(c.m) * ldx);
  for (auto& v : x) v = nd(rng);
  std::vector<float> wf(size_t(c.n) * ldw);
  for (auto& v : wf) v = nd(rng);
  std::vector<uint16_t> wb(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) wb[i] = f32_to_bf16(wf[i]);
  WeightMatrix w{c.dtype, c.n, c.k, ldw, c.dtype == DType::BF16 ? static_cast<const void*>(wb.data()) : wf.data()};
  auto ref = exact(x, c.m, ldx, w);
  std::vector<uint16_t> packed;
  if (c.panels) {
    packed.resize(panel_bytes(c.n, c.k) / 2);
    w = pack_panels(w, packed.data());
  }
  std::vector<float> y(size_t(c.m) * ldy, 0.f), init(y.size());
  for (auto& v : init) v = nd(rng);
  if (c.accumulate) y = init;
  if (onednn_direct) {
    detail::gemm_onednn(x.data(), c.m, ldx, w, y.data(), ldy, c.accumulate);
  } else {
    set_gemm_backend(backend);
    gemm(x.data(), c.m, ldx, w, y.data(), ldy, c.accumulate);
    set_gemm_backend(GemmBackend::Auto);
  }
  for (int i = 0; i < c.m; ++i)
    for (int j = 0; j < c.n; ++j) {
      double want = ref[size_t(i * c.n + j)] + (c.accumulate ? init[size_t(i * ldy + j)] : 0.0);
      double tol = 1e-5 * std::sqrt(double(c.k)) * 4 + 1e-5 * std::abs(want);
      ASSERT_NEAR(y[size_t(i * ldy + j)], want, tol)
          << gemm_backend_name(backend) << " m=" << c.m << " n=" << c.n << " k=" << c.k << " "
          << dtype_name(c.dtype) << " acc=" << c.accumulate << " panels=" << c.panels << " at (" << i << "," << j << ")";
    }
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (DType dt : {DType::BF16, DType::F32})
    for (bool acc : {false, true})
      for (int m : {1, 2, 3, 4, 5, 8, 13, 16, 17, 33, 70})
        for (auto [n, k] : std::vector<std::pair<int, int>>{{1, 16}, {7, 33}, {29, 64}, {50, 520}, {64, 1100}, {3, 8}})
          v.push_back({m, n, k, dt, acc});
  return v;
}

TEST(Gemm, ReferenceMatchesExact) {
  for (const Case& c : cases()) run_case(c, GemmBackend::Reference);
}

TEST(Gemm, Avx2MatchesExact) {
  if (!cpu_features().avx2 || !cpu_features().fma) {
    EXPECT_THROW(set_gemm_backend(GemmBackend::Avx2), Error);  // refused, never run on this CPU
    return;
  }
  for (const Case& c : cases()) run_case(c, GemmBackend::Avx2);
}

std::vector<Case> panel_cases() {
  std::vector<Case> v;
  for (const Case& c : cases())
    if (c.dtype == DType::BF16) v.push_back({c.m, c.n, c.k, c.dtype, c.accumulate, true});
  for (int m : {1, 6, 8, 12, 16, 20})
    v.push_back({m, 16 * 9 + 5, 1030, DType::BF16, false, true});  // several panels, so prefetching runs ahead
  return v;
}

TEST(Gemm, PanelsMatchExactOnEveryBackend) {
  std::vector<GemmBackend> backends = {GemmBackend::Reference, GemmBackend::OneDnn};
  if (cpu_features().avx2 && cpu_features().fma) backends.push_back(GemmBackend::Avx2);
  for (GemmBackend b : backends)
    for (const Case& c : panel_cases()) {
      if (b == GemmBackend::OneDnn && !(cpu_features().avx2 && cpu_features().fma)) continue;
      run_case(c, b);
    }
}

TEST(Gemm, PanelLayoutKeepsEveryElementAndRowViews) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  const int n = 53, k = 37;
  std::vector<uint16_t> wb(size_t(n) * k), packed(panel_bytes(n, k) / 2, 0xffff);
  for (auto& v : wb) v = f32_to_bf16(nd(rng));
  const WeightMatrix rows{DType::BF16, n, k, k, wb.data()};
  const WeightMatrix p = pack_panels(rows, packed.data());
  ASSERT_TRUE(p.panels);
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < k; ++c) ASSERT_EQ(weight_at(p, r, c), weight_at(rows, r, c)) << r << "," << c;
  const int last = n / kPanelRows;  // the padding rows of the last panel are zero
  for (int c = 0; c < k; ++c)
    for (int i = n % kPanelRows; i < kPanelRows; ++i)
      ASSERT_EQ(packed[size_t((int64_t(last) * k + c) * kPanelRows + panel_slot(i))], 0) << "padding row " << i;
  const WeightMatrix view = p.rows(32, 21), want = rows.rows(32, 21);
  for (int r = 0; r < 21; ++r)
    for (int c = 0; c < k; ++c) ASSERT_EQ(weight_at(view, r, c), weight_at(want, r, c));
  EXPECT_THROW(p.rows(8, 4), Error);  // panels cannot start mid-panel
  EXPECT_THROW(pack_panels(p, packed.data()), Error);
}

TEST(Gemm, OneDnnBf16IsExactOrRefusedClearly) {
  // oneDNN runs bf16 products only where the CPU supports them; elsewhere it must say so.
  try {
    run_case({5, 29, 64, DType::BF16, false}, GemmBackend::OneDnn);
  } catch (const Error& e) {
    set_gemm_backend(GemmBackend::Auto);
    EXPECT_NE(std::string(e.what()).find("oneDNN"), std::string::npos) << e.what();
  }
}

TEST(Gemm, OneDnnF32MatchesExact) {
  for (const Case& c : cases())
    if (c.dtype == DType::F32 && c.m <= 17) run_case(c, GemmBackend::OneDnn, /*onednn_direct=*/true);
}

// Whatever backend is chosen, a row's f32 result does not depend on the other rows in the batch: the f32
// mode's token-identical speculative greedy decoding rests on it.
TEST(Gemm, F32RowsAreBatchInvariantOnEveryBackend) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  const int n = 37, k = 300, m = 9;
  std::vector<float> wf(size_t(n) * k), x(size_t(m) * k);
  for (auto& v : wf) v = nd(rng);
  for (auto& v : x) v = nd(rng);
  WeightMatrix w{DType::F32, n, k, k, wf.data()};
  std::vector<GemmBackend> backends = {GemmBackend::Reference, GemmBackend::OneDnn};
  if (cpu_features().avx2 && cpu_features().fma) backends.push_back(GemmBackend::Avx2);
  for (GemmBackend b : backends) {
    set_gemm_backend(b);
    std::vector<float> one(static_cast<size_t>(n)), all(static_cast<size_t>(m * n));
    gemm(x.data() + 4 * k, 1, k, w, one.data(), n, false);
    gemm(x.data(), m, k, w, all.data(), n, false);
    set_gemm_backend(GemmBackend::Auto);
    for (int j = 0; j < n; ++j)
      ASSERT_EQ(one[size_t(j)], all[size_t(4 * n + j)]) << gemm_backend_name(b) << " column " << j;
  }
}

}  // namespace
}  // namespace dspark
