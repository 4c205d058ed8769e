// Quantized matrix products (kernels/qgemm.h): the panel repacking keeps every weight, each
// kernel matches a float64 product of the dequantized weights and activations, and the results are
// bit-identical across kernels and across the number of rows in the call (batch invariance).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "kernels/gemm.h"
#include "kernels/qgemm.h"
#include "kernels/quant.h"

namespace dspark {
namespace {

const GgmlType kTypes[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q4_K, GgmlType::Q6_K};

// n random rows of k weights in type t: random code bytes with scales of a sane size.
std::vector<uint8_t> random_rows(GgmlType t, int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  const size_t rb = ggml_row_bytes(t, k);
  std::vector<uint8_t> b(rb * size_t(n));
  for (auto& v : b) v = uint8_t(rng());
  std::uniform_real_distribution<float> scale(0.0005f, 0.004f);
  const size_t block = t == GgmlType::Q8_0 ? 34 : t == GgmlType::Q4_0 ? 18 : t == GgmlType::Q5_0 ? 22 : t == GgmlType::Q4_K ? 144 : 210;
  const size_t d_at = t == GgmlType::Q6_K ? 208 : 0;
  for (size_t o = 0; o < b.size(); o += block) {
    const uint16_t d = f32_to_f16(scale(rng) * (rng() % 2 ? 1.f : -1.f));
    std::memcpy(&b[o + d_at], &d, 2);
    if (t == GgmlType::Q4_K) {
      const uint16_t dm = f32_to_f16(scale(rng));
      std::memcpy(&b[o + 2], &dm, 2);
    }
    if (t == GgmlType::Q8_0)  // llama.cpp's codes stay in [-127, 127]; -128 is read as well
      for (size_t j = 2; j < 34; ++j) b[o + j] = uint8_t(int8_t(int(rng() % 255) - 127));
  }
  return b;
}

std::vector<float> random_x(int m, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(size_t(m) * size_t(k));
  for (auto& v : x) v = g(rng);
  x[5] = 0.f;  // an all-but-one-zero block is fine; give one block all zeros too
  for (int j = 32; j < 64; ++j) x[size_t(j)] = 0.f;
  return x;
}

struct Packed {
  std::vector<uint8_t> rows, panels;
  int64_t n, k;
};

Packed make(GgmlType t, int64_t n, int64_t k, uint32_t seed) {
  Packed p{random_rows(t, n, k, seed), {}, n, k};
  p.panels.resize(qgemm_matrix_bytes(t, n, k));
  qgemm_pack(t, p.rows.data(), n, k, p.panels.data());
  return p;
}

using Kernel = detail::QPanelsFn;

std::vector<float> run(Kernel fn, GgmlType t, const Packed& w, const std::vector<float>& x, int m, bool acc = false,
                       float init = 0.f) {
  std::vector<QActBlock> xq(size_t(m) * size_t(w.k / 32));
  quantize_activations(x.data(), m, w.k, w.k, xq.data());
  const int ldy = int(w.n) + 3;
  std::vector<float> y(size_t(m) * size_t(ldy), init);
  fn(t, w.panels.data(), w.n, w.k, 0, int((w.n + 15) / 16), xq.data(), m, y.data(), ldy, acc);
  std::vector<float> out;
  for (int i = 0; i < m; ++i)
    for (int64_t c = 0; c < w.n; ++c) out.push_back(y[size_t(i) * ldy + size_t(c)]);
  for (int i = 0; i < m; ++i)
    for (int c = int(w.n); c < ldy; ++c) EXPECT_EQ(y[size_t(i) * ldy + size_t(c)], init) << "wrote past column n";
  return out;
}

TEST(QGemm, PackingKeepsEveryWeight) {
  for (GgmlType t : kTypes) {
    const Packed w = make(t, 37, 512, 1);
    std::vector<float> want(512), got(512);
    for (int64_t r = 0; r < w.n; ++r) {
      dequantize_row(t, w.rows.data() + size_t(r) * ggml_row_bytes(t, 512), want.data(), 512);
      qgemm_unpack_row(t, w.panels.data(), 512, r, got.data());
      for (int c = 0; c < 512; ++c) ASSERT_EQ(got[size_t(c)], want[size_t(c)]) << ggml_type_name(t) << " row " << r << " col " << c;
    }
  }
}

// Every kernel against float64 sums of dequantized weights times dequantized activation codes
// (which isolates the kernel from the activation rounding), and against the unrounded x.
void check_kernel(Kernel fn) {
  for (GgmlType t : kTypes) {
    const int64_t n = 37, k = 768;
    const Packed w = make(t, n, k, 2);
    const int m = 5;
    const std::vector<float> x = random_x(m, k, 3);
    std::vector<QActBlock> xq(size_t(m) * size_t(k / 32));
    quantize_activations(x.data(), m, k, k, xq.data());
    const std::vector<float> y = run(fn, t, w, x, m);
    std::vector<float> wr(static_cast<size_t>(k));
    double err_q = 0, err_x = 0, scale = 0;
    for (int64_t r = 0; r < n; ++r) {
      dequantize_row(t, w.rows.data() + size_t(r) * ggml_row_bytes(t, k), wr.data(), k);
      for (int i = 0; i < m; ++i) {
        double sq = 0, sx = 0, mag = 0;
        for (int64_t c = 0; c < k; ++c) {
          const QActBlock& a = xq[size_t(i) * size_t(k / 32) + size_t(c / 32)];
          sq += double(wr[size_t(c)]) * double(a.q[c % 32]) * double(a.d);
          sx += double(wr[size_t(c)]) * double(x[size_t(i) * size_t(k) + size_t(c)]);
          mag += std::fabs(double(wr[size_t(c)]) * double(x[size_t(i) * size_t(k) + size_t(c)]));
        }
        const double got = y[size_t(i) * size_t(n) + size_t(r)];
        err_q = std::max(err_q, std::fabs(got - sq) / mag);
        err_x = std::max(err_x, std::fabs(got - sx) / mag);
        scale = std::max(scale, mag);
      }
    }
    EXPECT_LT(err_q, 1e-6) << ggml_type_name(t) << ": against the rounded activations";
    EXPECT_LT(err_x, 2e-2) << ggml_type_name(t) << ": against x itself (int8 activations)";
    EXPECT_GT(scale, 0.0);
  }
}

// Row i of an m-row call equals the same row computed alone, bit for bit, for m = 1..20, and with
// accumulation it equals y + the product computed with the same order.
void check_invariance(Kernel fn) {
  for (GgmlType t : kTypes) {
    const Packed w = make(t, 45, 512, 4);
    const std::vector<float> x = random_x(20, 512, 5);
    std::vector<std::vector<float>> alone;
    for (int i = 0; i < 20; ++i) {
      std::vector<float> xi(x.begin() + i * 512, x.begin() + (i + 1) * 512);
      alone.push_back(run(fn, t, w, xi, 1));
    }
    for (int m : {2, 3, 8, 9, 16, 17, 20}) {
      const std::vector<float> y = run(fn, t, w, x, m);
      for (int i = 0; i < m; ++i)
        for (int64_t c = 0; c < w.n; ++c)
          ASSERT_EQ(y[size_t(i) * size_t(w.n) + size_t(c)], alone[size_t(i)][size_t(c)])
              << ggml_type_name(t) << " m=" << m << " row " << i << " col " << c;
    }
    const std::vector<float> acc = run(fn, t, w, x, 9, true, 0.25f);
    const std::vector<float> ref = run(detail::qpanels_reference, t, w, x, 9, true, 0.25f);
    for (size_t j = 0; j < acc.size(); ++j) ASSERT_EQ(acc[j], ref[j]) << ggml_type_name(t) << " accumulate, element " << j;
  }
}

// Bit-identical to the reference kernel.
void check_same_as_reference(Kernel fn) {
  for (GgmlType t : kTypes) {
    const Packed w = make(t, 50, 1024, 6);
    const std::vector<float> x = random_x(11, 1024, 7);
    EXPECT_EQ(run(fn, t, w, x, 11), run(detail::qpanels_reference, t, w, x, 11)) << ggml_type_name(t);
  }
}

bool has_avx2() { return cpu_features().avx2 && cpu_features().fma && cpu_features().f16c; }
bool has_vnni() {
  const CpuFeatures& f = cpu_features();
  return has_avx2() && f.avx512f && f.avx512bw && f.avx512vl && f.avx512_vnni;
}

TEST(QGemm, ActivationQuantizationIsTheSameOnEveryPath) {
  if (!has_avx2()) GTEST_SKIP() << "the AVX2 path needs AVX2, FMA and F16C (" << cpu_features().describe() << ")";
  std::vector<float> x = random_x(3, 1024, 12);
  x[100] = 127.f * 3.f;  // a block whose largest value is an exact multiple
  x[200] = 0.5f * (x[201] = 1e-30f);
  std::vector<QActBlock> a(3 * 32), b(3 * 32);
  detail::quantize_activations_reference(x.data(), 3, 1024, 1024, a.data());
  detail::quantize_activations_avx2(x.data(), 3, 1024, 1024, b.data());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(std::memcmp(a[i].q, b[i].q, 32), 0) << "block " << i;
    ASSERT_EQ(a[i].d, b[i].d) << "block " << i;
    ASSERT_EQ(a[i].dsum, b[i].dsum) << "block " << i;
    ASSERT_EQ(a[i].sum, b[i].sum) << "block " << i;
    ASSERT_EQ(a[i].sum_lo, b[i].sum_lo) << "block " << i;
  }
  int nonzero = 0;
  for (const QActBlock& q : a) nonzero += q.sum != 0;
  EXPECT_GT(nonzero, 40);
}

TEST(QGemm, ReferenceMatchesFloat64) { check_kernel(detail::qpanels_reference); }
TEST(QGemm, ReferenceIsBatchInvariant) { check_invariance(detail::qpanels_reference); }

TEST(QGemm, Avx2MatchesFloat64AndTheReference) {
  if (!has_avx2()) GTEST_SKIP() << "the AVX2 kernels need AVX2, FMA and F16C (" << cpu_features().describe() << ")";
  check_kernel(detail::qpanels_avx2);
  check_same_as_reference(detail::qpanels_avx2);
}
TEST(QGemm, Avx2IsBatchInvariant) {
  if (!has_avx2()) GTEST_SKIP() << "the AVX2 kernels need AVX2, FMA and F16C (" << cpu_features().describe() << ")";
  check_invariance(detail::qpanels_avx2);
}

TEST(QGemm, Avx512VnniMatchesFloat64AndTheReference) {
  if (!has_vnni()) GTEST_SKIP() << "the AVX512-VNNI kernels need AVX512F/BW/VL/VNNI (" << cpu_features().describe() << ")";
  check_kernel(detail::qpanels_avx512vnni);
  check_same_as_reference(detail::qpanels_avx512vnni);
}
TEST(QGemm, Avx512VnniIsBatchInvariant) {
  if (!has_vnni()) GTEST_SKIP() << "the AVX512-VNNI kernels need AVX512F/BW/VL/VNNI (" << cpu_features().describe() << ")";
  check_invariance(detail::qpanels_avx512vnni);
}

// A stacked matrix whose parts have different types (Q4_K_M's q/k in Q4_K and v in Q6_K), and a
// view of its last rows, through gemm().
TEST(QGemm, MixedPartsAndViewsThroughGemm) {
  const int64_t k = 512;
  const Packed a = make(GgmlType::Q4_K, 32, k, 8), b = make(GgmlType::Q6_K, 16, k, 9), c = make(GgmlType::Q8_0, 20, k, 10);
  WeightMatrix w;
  w.n = 68;
  w.k = int(k);
  w.parts[0] = {GgmlType::Q4_K, 0, 32, a.panels.data()};
  w.parts[1] = {GgmlType::Q6_K, 32, 16, b.panels.data()};
  w.parts[2] = {GgmlType::Q8_0, 48, 20, c.panels.data()};
  w.nparts = 3;
  EXPECT_EQ(w.bytes(), a.panels.size() + b.panels.size() + c.panels.size());
  const std::vector<float> x = random_x(3, k, 11);
  std::vector<float> y(3 * 68);
  gemm(x.data(), 3, w, y.data());
  const std::vector<float> ya = run(detail::qpanels_reference, GgmlType::Q4_K, a, x, 3);
  const std::vector<float> yb = run(detail::qpanels_reference, GgmlType::Q6_K, b, x, 3);
  const std::vector<float> yc = run(detail::qpanels_reference, GgmlType::Q8_0, c, x, 3);
  for (int i = 0; i < 3; ++i) {
    for (int r = 0; r < 32; ++r) EXPECT_EQ(y[size_t(i * 68 + r)], ya[size_t(i * 32 + r)]);
    for (int r = 0; r < 16; ++r) EXPECT_EQ(y[size_t(i * 68 + 32 + r)], yb[size_t(i * 16 + r)]);
    for (int r = 0; r < 20; ++r) EXPECT_EQ(y[size_t(i * 68 + 48 + r)], yc[size_t(i * 20 + r)]);
  }
  const WeightMatrix v = w.rows(32, 36);  // the "k and v" rows of a stacked qkv
  ASSERT_EQ(v.nparts, 2);
  std::vector<float> yv(3 * 36);
  gemm(x.data(), 3, v, yv.data());
  for (int i = 0; i < 3; ++i)
    for (int r = 0; r < 36; ++r) EXPECT_EQ(yv[size_t(i * 36 + r)], y[size_t(i * 68 + 32 + r)]);
  EXPECT_EQ(weight_at(v, 20, 7), weight_at(w, 52, 7));
  std::vector<float> row(k);
  dequantize_row(GgmlType::Q8_0, c.rows.data() + 4 * ggml_row_bytes(GgmlType::Q8_0, k), row.data(), k);
  EXPECT_EQ(weight_at(w, 52, 7), row[7]);
}

}  // namespace
}  // namespace dspark
