#include <gtest/gtest.h>

#include <algorithm>
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
  bool pairs = false;   // with panels: the AVX512-BF16 pair layout, read by gemm_avx512bf16
};

bool has_avx512bf16() { return gemm_backend_available(GemmBackend::Avx512Bf16); }

// The same product in double precision, from the weights exactly as stored (and x rounded to
// bf16 first when `bf16_x`: the AVX512-BF16 kernels' contract).
std::vector<double> exact(std::vector<float> x, int m, int ldx, const WeightMatrix& w, bool bf16_x = false) {
  if (bf16_x)
    for (auto& v : x) v = bf16_to_f32(f32_to_bf16(v));
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
  // Pair panels are read by the AVX512-BF16 kernel wherever the CPU has it, and oneDNN takes bf16
  // weights in rows: both round x to bf16.
  const bool bf16_x = (c.panels && c.pairs && backend != GemmBackend::Reference && has_avx512bf16()) ||
                      ((backend == GemmBackend::OneDnn || onednn_direct) && c.dtype == DType::BF16 && !c.panels);
  auto ref = exact(x, c.m, ldx, w, bf16_x);
  std::vector<uint16_t> packed;
  if (c.panels) {
    packed.resize(panel_bytes(c.n, c.k) / 2);
    w = pack_panels(w, packed.data(), c.pairs);
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
          << dtype_name(c.dtype) << " acc=" << c.accumulate << " panels=" << c.panels << " pairs=" << c.pairs << " at (" << i << "," << j << ")";
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
    GTEST_SKIP() << "this CPU lacks AVX2/FMA: the avx2 backend is refused (checked), its kernels cannot run";
  }
  for (const Case& c : cases()) run_case(c, GemmBackend::Avx2);
}

std::vector<Case> panel_cases(bool pairs) {
  std::vector<Case> v;
  for (const Case& c : cases())
    if (c.dtype == DType::BF16) v.push_back({c.m, c.n, c.k, c.dtype, c.accumulate, true, pairs});
  for (int m : {1, 6, 8, 9, 12, 16, 20})
    v.push_back({m, 16 * 9 + 5, 1030, DType::BF16, false, true, pairs});  // several panels, so prefetching runs ahead
  for (bool acc : {false, true})  // prefill: several blocks of x rows and of k
    v.push_back({200, 16 * 5 + 3, 601, DType::BF16, acc, true, pairs});
  return v;
}

TEST(Gemm, PanelsMatchExactOnEveryBackend) {
  std::vector<GemmBackend> backends = {GemmBackend::Reference, GemmBackend::OneDnn};
  if (cpu_features().avx2 && cpu_features().fma) backends.push_back(GemmBackend::Avx2);
  if (has_avx512bf16()) backends.push_back(GemmBackend::Avx512Bf16);
  for (GemmBackend b : backends)
    for (bool pairs : {false, true})
      for (const Case& c : panel_cases(pairs)) {
        if (b == GemmBackend::OneDnn && !(cpu_features().avx2 && cpu_features().fma)) continue;
        if (!pairs && !(cpu_features().avx2 && cpu_features().fma) && b != GemmBackend::Reference) continue;
        run_case(c, b);
      }
}

TEST(Gemm, Avx512Bf16MatchesExactOnBf16XOrIsRefused) {
  if (!has_avx512bf16()) {
    EXPECT_THROW(set_gemm_backend(GemmBackend::Avx512Bf16), Error);  // refused, never run on this CPU
    GTEST_SKIP() << "this CPU lacks AVX512-BF16: the avx512bf16 backend is refused (checked), its kernels cannot run";
  }
  // bf16 and f32 weights in rows (the AVX2 kernels, x not rounded) and pair panels (rounded).
  for (const Case& c : cases()) run_case(c, GemmBackend::Avx512Bf16);
  for (const Case& c : panel_cases(true)) run_case(c, GemmBackend::Avx512Bf16);
  // The backend packs what it loads into pairs.
  set_gemm_backend(GemmBackend::Avx512Bf16);
  std::vector<uint16_t> wb(16 * 4, 0x3f80), packed(panel_bytes(16, 4) / 2);
  const WeightMatrix p = pack_panels(WeightMatrix{DType::BF16, 16, 4, 4, wb.data()}, packed.data());
  set_gemm_backend(GemmBackend::Auto);
  EXPECT_TRUE(p.panels && p.pairs);
}

TEST(Gemm, PanelLayoutsKeepEveryElementAndRowViews) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  const int n = 53, k = 37;  // a partial last panel and an odd k (the pair layout pads a column)
  std::vector<uint16_t> wb(size_t(n) * k);
  for (auto& v : wb) v = f32_to_bf16(nd(rng));
  const WeightMatrix rows{DType::BF16, n, k, k, wb.data()};
  for (bool pairs : {false, true}) {
    std::vector<uint16_t> packed(panel_bytes(n, k) / 2, 0xffff);
    const WeightMatrix p = pack_panels(rows, packed.data(), pairs);
    ASSERT_TRUE(p.panels);
    ASSERT_EQ(p.pairs, pairs);
    std::vector<char> seen(packed.size(), 0);
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < k; ++c) {
        ASSERT_EQ(weight_at(p, r, c), weight_at(rows, r, c)) << pairs << " " << r << "," << c;
        seen[size_t(panel_index(pairs, k, r, c))] = 1;
      }
    // Every slot that holds no element (padding rows, the pair layout's pad column) is zero.
    const size_t used = size_t((n + kPanelRows - 1) / kPanelRows) * size_t(panel_stride(pairs, k));
    for (size_t i = 0; i < used; ++i) {
      if (!seen[i]) {
        ASSERT_EQ(packed[i], 0) << "pairs=" << pairs << " padding slot " << i;
      }
    }
    if (pairs) {  // the pair layout: r0(k) r0(k+1) r1(k) ... within each 64-byte k-pair slice
      ASSERT_EQ(packed[3], wb[size_t(1) * k + 1]);
    }
    const WeightMatrix view = p.rows(32, 21), want = rows.rows(32, 21);
    for (int r = 0; r < 21; ++r)
      for (int c = 0; c < k; ++c) ASSERT_EQ(weight_at(view, r, c), weight_at(want, r, c));
    EXPECT_THROW(p.rows(8, 4), Error);  // panels cannot start mid-panel
    EXPECT_THROW(pack_panels(p, packed.data(), pairs), Error);
  }
}

// bf16 weights of shape n x k in pair panels (random normal values; row 0 all zero when `zero_row`).
struct PairMatrix {
  std::vector<uint16_t> rows, packed;
  WeightMatrix w;
  PairMatrix(int n, int k, uint32_t seed, bool zero_row = false) : rows(size_t(n) * size_t(k)), packed(panel_bytes(n, k) / 2) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    for (auto& v : rows) v = f32_to_bf16(nd(rng));
    if (zero_row)
      for (int c = 0; c < k; ++c) rows[size_t(c)] = 0;
    w = pack_panels(WeightMatrix{DType::BF16, n, k, k, rows.data()}, packed.data(), true);
  }
  float at(int r, int c) const { return bf16_to_f32(rows[size_t(r) * size_t(w.k) + size_t(c)]); }
};

TEST(Gemm, Int8QuantizationRoundsEachRowToItsOwnScale) {
  const int n = 53, k = 37;  // a partial last panel and an odd k (the pad column)
  PairMatrix m(n, k, 5, /*zero_row=*/true);
  const WeightMatrix q = quantize_int8(m.w);
  ASSERT_EQ(q.dtype, DType::I8);
  ASSERT_TRUE(q.panels && q.pairs && q.scales);
  EXPECT_EQ(q.data, m.w.data);  // in place
  for (int r = 0; r < n; ++r) {
    float mx = 0;
    for (int c = 0; c < k; ++c) mx = std::max(mx, std::fabs(m.at(r, c)));
    ASSERT_FLOAT_EQ(q.scales[r], mx / 127.f) << "row " << r;
    bool hit_max = r == 0;  // the zero row has scale 0 and all-zero elements
    for (int c = 0; c < k; ++c) {
      const int8_t e = static_cast<const int8_t*>(q.data)[panel_index(true, k, r, c)];
      ASSERT_GE(e, -127);
      // Round to nearest: within half a step of the bf16 value (and the element times the scale is weight_at).
      ASSERT_LE(std::fabs(float(e) * q.scales[r] - m.at(r, c)), 0.5f * q.scales[r] * (1 + 1e-5f) + 1e-30f) << r << "," << c;
      ASSERT_EQ(weight_at(q, r, c), float(e) * q.scales[r]);
      hit_max |= e == 127 || e == -127;
    }
    EXPECT_TRUE(hit_max) << "row " << r << ": its largest weight maps to +-127";
  }
  // Padding rows and the pad column hold zeros; the rows past n have scale 0.
  const auto* bytes = static_cast<const int8_t*>(q.data);
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < int(panel_k(k)); ++c)
      if (r >= n || c >= k) {
        ASSERT_EQ(bytes[panel_index(true, k, r, c)], 0) << r << "," << c;
      }
  for (int r = n; r < 64; ++r) ASSERT_EQ(q.scales[r], 0.f);
  // A row view carries its rows' scales.
  const WeightMatrix view = q.rows(32, 21);
  for (int r = 0; r < 21; ++r)
    for (int c = 0; c < k; ++c) ASSERT_EQ(weight_at(view, r, c), weight_at(q, 32 + r, c));
  // Only bf16 pair panels are quantized; a k below 4 has no room for the scales and stays bf16.
  EXPECT_THROW(quantize_int8(WeightMatrix{DType::BF16, n, k, k, m.rows.data()}), Error);
  EXPECT_THROW(quantize_int8(q), Error);
  PairMatrix tiny(20, 3, 6);
  EXPECT_EQ(quantize_int8(tiny.w).dtype, DType::BF16);
}

TEST(Gemm, Int8PairPanelsMatchExactOnEveryBackend) {
  std::vector<GemmBackend> backends{GemmBackend::Reference};
  if (has_avx512bf16()) backends.push_back(GemmBackend::Avx512Bf16);
  int checked = 0;
  for (GemmBackend b : backends)
    for (bool acc : {false, true})
      for (int m : {1, 2, 3, 5, 8, 9, 12, 13, 16, 17, 70, 200})
        for (auto [n, k] : std::vector<std::pair<int, int>>{{7, 33}, {29, 64}, {16 * 9 + 5, 1030}, {64, 601}, {50, 4}}) {
          PairMatrix pm(n, k, uint32_t(m * 131 + n * 7 + k));
          const WeightMatrix q = quantize_int8(pm.w);
          ASSERT_EQ(q.dtype, DType::I8);
          std::mt19937 rng(uint32_t(m + n + k));
          std::normal_distribution<float> nd;
          const int ldx = k + 3, ldy = n + 7;
          std::vector<float> x(size_t(m) * ldx), y(size_t(m) * ldy), init(y.size());
          for (auto& v : x) v = nd(rng);
          for (auto& v : init) v = nd(rng);
          if (acc) y = init;
          set_gemm_backend(b);
          gemm(x.data(), m, ldx, q, y.data(), ldy, acc);
          set_gemm_backend(GemmBackend::Auto);
          const bool bf16_x = b != GemmBackend::Reference;  // the AVX512-BF16 kernel rounds x to bf16
          for (int i = 0; i < m; ++i)
            for (int j = 0; j < n; ++j) {
              double want = acc ? init[size_t(i * ldy + j)] : 0.0;
              for (int c = 0; c < k; ++c) {
                const float xv = bf16_x ? bf16_to_f32(f32_to_bf16(x[size_t(i * ldx + c)])) : x[size_t(i * ldx + c)];
                want += double(xv) * double(weight_at(q, j, c));
              }
              ASSERT_NEAR(y[size_t(i * ldy + j)], want, 1e-5 * std::sqrt(double(k)) * 4 + 1e-5 * std::abs(want))
                  << gemm_backend_name(b) << " m=" << m << " n=" << n << " k=" << k << " acc=" << acc << " at (" << i << "," << j << ")";
              ++checked;
            }
        }
  EXPECT_GT(checked, 0);
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
  if (has_avx512bf16()) backends.push_back(GemmBackend::Avx512Bf16);
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

// bf16 panels, the default precision: a row's result is bit-identical whether it is computed alone
// (decode), among 9 rows (verification), 16, 40 or 64 (batched steps), or in a prefill-sized batch
// (65 and more on the AVX512-BF16 kernel), and with accumulation too, on every kernel of each panel
// layout this CPU runs. Speculative greedy output equals plain greedy output in bf16 because of it.
TEST(Gemm, Bf16PanelsAreBatchInvariantOnEveryKernel) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  // Several k blocks, an odd panel count and a partial panel.
  const int n = 70, k = 1100, rows = 70;
  std::vector<float> x(size_t(rows) * k), init(size_t(rows) * n);
  for (auto& v : x) v = nd(rng);
  for (auto& v : init) v = nd(rng);
  std::vector<uint16_t> wb(size_t(n) * k);
  for (auto& v : wb) v = f32_to_bf16(nd(rng));
  const WeightMatrix rows_view{DType::BF16, n, k, k, wb.data()};
  std::vector<std::pair<GemmBackend, bool>> kernels;  // backend, pair layout
  if (cpu_features().avx2 && cpu_features().fma) kernels.push_back({GemmBackend::Avx2, false});
  if (has_avx512bf16()) kernels.push_back({GemmBackend::Avx512Bf16, true});
  if (kernels.empty()) GTEST_SKIP() << "no bf16 panel kernel on this CPU (" << cpu_features().describe() << ")";
  for (auto [b, pairs] : kernels) {
    set_gemm_backend(b);
    std::vector<uint16_t> packed(panel_bytes(n, k) / 2);
    const WeightMatrix w = pack_panels(rows_view, packed.data(), pairs);
    for (bool acc : {false, true}) {
      std::vector<float> alone(init);
      for (int i = 0; i < rows; ++i) gemm(x.data() + size_t(i) * k, 1, k, w, alone.data() + size_t(i) * n, n, acc);
      for (int m : {2, 9, 16, 17, 40, 64, 65, 70}) {
        std::vector<float> y(init);
        gemm(x.data(), m, k, w, y.data(), n, acc);
        for (int i = 0; i < m; ++i)
          for (int j = 0; j < n; ++j)
            ASSERT_EQ(y[size_t(i * n + j)], alone[size_t(i * n + j)])
                << gemm_backend_name(b) << " m=" << m << " row " << i << " column " << j << (acc ? " (accumulate)" : "");
      }
    }
    set_gemm_backend(GemmBackend::Auto);
  }
}

}  // namespace
}  // namespace dspark
