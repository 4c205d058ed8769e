#include <gtest/gtest.h>

#include <cstdio>

#include <array>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"

namespace dspark {
namespace {

// Dense attention in double precision over keys/values given as plain arrays.
std::vector<double> dense(const std::vector<float>& q, const std::vector<std::vector<float>>& keys,
                          const std::vector<std::vector<float>>& vals, int n_heads, int n_kv, int hd, int visible,
                          float scale, int start = 0) {
  std::vector<double> out(size_t(n_heads * hd), 0.0);
  const int group = n_heads / n_kv;
  for (int h = 0; h < n_heads; ++h) {
    const int kvh = h / group;
    std::vector<double> s(static_cast<size_t>(visible));
    double mx = -1e300;
    for (int j = start; j < visible; ++j) {
      double acc = 0;
      for (int d = 0; d < hd; ++d) acc += double(q[size_t(h * hd + d)]) * keys[size_t(j)][size_t(kvh * hd + d)];
      s[size_t(j)] = acc * scale;
      mx = std::max(mx, s[size_t(j)]);
    }
    double sum = 0;
    for (int j = start; j < visible; ++j) sum += (s[size_t(j)] = std::exp(s[size_t(j)] - mx));
    for (int j = start; j < visible; ++j)
      for (int d = 0; d < hd; ++d) out[size_t(h * hd + d)] += s[size_t(j)] / sum * vals[size_t(j)][size_t(kvh * hd + d)];
  }
  return out;
}

// Whether attention() runs the tile on bf16 pairs on this cache (attention_avx512bf16.cpp): it
// rounds the scaled queries and each block's probabilities to bf16.
bool bf16_pairs(DType dt, int hd) {
  return dt == DType::BF16 && hd % 32 == 0 && std::string(attention_kernel_name(DType::BF16)) == "avx512bf16";
}

// What one row's output must be: dense attention in double, within 2e-5 for the f32 tiles. For the
// tile on bf16 pairs, dense attention of the queries as that tile rounds them (bf16 of q * scale),
// within the bound its bf16 probabilities allow: each is within 2^-9 of its value, so each weight
// within about 2^-8 of its own, and an output within 2^-8 * sum_j w_j |v_j| (+ 2e-5).
struct Want {
  std::vector<double> value, tol;
};
Want want_row(const std::vector<float>& q, const std::vector<std::vector<float>>& keys,
              const std::vector<std::vector<float>>& vals, int n_heads, int n_kv, int hd, int visible, float scale,
              int start, bool pairs) {
  if (!pairs) {
    auto value = dense(q, keys, vals, n_heads, n_kv, hd, visible, scale, start);
    return {value, std::vector<double>(value.size(), 2e-5)};
  }
  std::vector<float> qr(q.size());
  for (size_t i = 0; i < q.size(); ++i) qr[i] = bf16_to_f32(f32_to_bf16(q[i] * scale));
  std::vector<std::vector<float>> mags(vals);
  for (auto& row : mags)
    for (auto& x : row) x = std::fabs(x);
  Want w{dense(qr, keys, vals, n_heads, n_kv, hd, visible, 1.f, start),
         dense(qr, keys, mags, n_heads, n_kv, hd, visible, 1.f, start)};
  for (auto& t : w.tol) t = 2e-5 + t / 256;
  return w;
}

void check(DType dtype, int n_heads, int n_kv, int hd, bool reference) {
  std::mt19937 rng(7 + hd + n_heads);
  std::normal_distribution<float> nd;
  const int num_blocks = 16, len = 70;
  PagedKvLayer kv{dtype, n_kv, hd, num_blocks, nullptr, nullptr};
  std::vector<uint8_t> kmem(size_t(kv.layer_elems()) * dtype_size(dtype)), vmem(kmem.size());
  kv.k = kmem.data();
  kv.v = vmem.data();
  std::vector<float> kscale(size_t(n_kv * num_blocks * kKvBlock)), vscale(kscale.size());
  if (is_fp8(dtype)) {
    kv.k_scale = kscale.data();
    kv.v_scale = vscale.data();
  }
  // Two sequences with scattered, interleaved blocks.
  std::vector<int32_t> t0{3, 9, 1, 14, 6}, t1{0, 12, 7, 2, 11};
  std::vector<std::vector<float>> keys[2], vals[2];
  for (int s = 0; s < 2; ++s)
    for (int p = 0; p < len; ++p) {
      std::vector<float> k(size_t(n_kv * hd)), v(k.size());
      for (auto& x : k) x = nd(rng);
      for (auto& x : v) x = nd(rng);
      kv_write(kv, s ? t1.data() : t0.data(), p, k.data(), v.data());
      if (dtype == DType::BF16) {  // the cache holds rounded values
        for (auto& x : k) x = bf16_to_f32(f32_to_bf16(x));
        for (auto& x : v) x = bf16_to_f32(f32_to_bf16(x));
      }
      if (is_fp8(dtype))  // each head's row scaled to the format's range, rounded, scaled back
        for (auto* row : {&k, &v})
          for (int h = 0; h < n_kv; ++h) {
            float amax = 0.f;
            for (int d = 0; d < hd; ++d) amax = std::max(amax, std::fabs((*row)[size_t(h * hd + d)]));
            const float sc = amax / fp8_max(dtype);
            for (int d = 0; d < hd; ++d) {
              float& x = (*row)[size_t(h * hd + d)];
              x = fp8_to_f32(f32_to_fp8(x / sc, dtype), dtype) * sc;
            }
          }
      keys[s].push_back(k);
      vals[s].push_back(v);
    }
  // Rows: a causal run of sequence 0, a draft block of sequence 1 (all rows see the block end),
  // and single rows of each.
  std::vector<const int32_t*> tables;
  std::vector<int32_t> visible, seq;
  // (the first tile, positions 44..51, straddles a block boundary: some rows see block 3, some not)
  for (int p = 44; p < 57; ++p) tables.push_back(t0.data()), visible.push_back(p + 1), seq.push_back(0);
  for (int p = 60; p < 67; ++p) tables.push_back(t1.data()), visible.push_back(67), seq.push_back(1);
  tables.push_back(t0.data()), visible.push_back(1), seq.push_back(0);
  tables.push_back(t1.data()), visible.push_back(70), seq.push_back(1);
  const int n = int(tables.size());
  const int ld = n_heads * hd + 4;
  std::vector<float> q(size_t(n * ld)), out(size_t(n * ld), -1.f);
  for (auto& x : q) x = nd(rng);
  const float scale = 1.f / std::sqrt(float(hd));
  AttentionRows rows{n, tables.data(), visible.data()};
  if (reference) detail::attention_reference(kv, rows, q.data(), ld, n_heads, scale, out.data(), ld);
  else attention(kv, rows, q.data(), ld, n_heads, scale, out.data(), ld);
  for (int r = 0; r < n; ++r) {
    std::vector<float> qr(q.begin() + r * ld, q.begin() + r * ld + n_heads * hd);
    const auto want = want_row(qr, keys[seq[size_t(r)]], vals[seq[size_t(r)]], n_heads, n_kv, hd,
                               visible[size_t(r)], scale, 0, !reference && bf16_pairs(dtype, hd));
    for (int i = 0; i < n_heads * hd; ++i)
      ASSERT_NEAR(out[size_t(r * ld + i)], want.value[size_t(i)], want.tol[size_t(i)]) << "row " << r << " index " << i;
  }
}

TEST(Attention, ReferenceMatchesDense) {
  check(DType::F32, 4, 2, 16, true);
  check(DType::BF16, 6, 3, 8, true);
  check(DType::F8_E4M3, 4, 2, 16, true);
  check(DType::F8_E5M2, 6, 3, 8, true);
}

// fp8: known codes, every finite code decodes and encodes back to itself, and encoding any float
// gives the nearest code (ties to the even code), saturating at the largest finite value.
TEST(Fp8, CodesRoundTripAndEncodingIsNearestEven) {
  EXPECT_EQ(f32_to_fp8(1.f, DType::F8_E4M3), 0x38);
  EXPECT_EQ(f32_to_fp8(-2.f, DType::F8_E4M3), 0xc0);
  EXPECT_EQ(f32_to_fp8(448.f, DType::F8_E4M3), 0x7e);
  EXPECT_EQ(f32_to_fp8(1e9f, DType::F8_E4M3), 0x7e);
  EXPECT_EQ(f32_to_fp8(std::ldexp(1.f, -9), DType::F8_E4M3), 0x01);  // the smallest subnormal
  EXPECT_EQ(f32_to_fp8(1.f, DType::F8_E5M2), 0x3c);
  EXPECT_EQ(f32_to_fp8(57344.f, DType::F8_E5M2), 0x7b);
  EXPECT_EQ(f32_to_fp8(std::ldexp(1.f, -16), DType::F8_E5M2), 0x01);
  EXPECT_FLOAT_EQ(fp8_max(DType::F8_E4M3), 448.f);
  EXPECT_FLOAT_EQ(fp8_max(DType::F8_E5M2), 57344.f);
  for (DType t : {DType::F8_E4M3, DType::F8_E5M2}) {
    std::vector<std::pair<float, int>> finite;  // value, code
    for (int c = 0; c < 256; ++c) {
      const int mag = c & 0x7f;
      const bool nonfinite = t == DType::F8_E4M3 ? mag == 0x7f : mag >= 0x7c;
      if (nonfinite) continue;
      const float v = fp8_to_f32(uint8_t(c), t);
      EXPECT_EQ(f32_to_fp8(v, t), c) << dtype_name(t) << " code " << c;
      finite.push_back({v, c});
    }
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1.2f, 1.2f);
    for (int i = 0; i < 20000; ++i) {
      const float x = u(rng) * fp8_max(t) * (i % 3 == 0 ? 1.f : i % 3 == 1 ? 1e-3f : 1e-6f);
      int best = -1;
      double bd = 1e300;
      for (const auto& [v, c] : finite) {
        if (std::signbit(v) != std::signbit(x) && v != 0.f) continue;
        const double dd = std::fabs(double(v) - double(x));
        if (dd < bd || (dd == bd && (c & 1) == 0 && (best & 1) == 1)) bd = dd, best = c;
      }
      if (std::fabs(x) >= fp8_max(t)) best = (x < 0 ? 0x80 : 0) | f32_to_fp8(fp8_max(t), t);
      const int got = f32_to_fp8(x, t);
      // +0 and -0 are both nearest to a zero input's magnitude
      if ((got & 0x7f) == 0 && (best & 0x7f) == 0) continue;
      ASSERT_EQ(got, best) << dtype_name(t) << " x=" << x;
    }
  }
}

TEST(Attention, DispatchedKernelMatchesDense) {
  // The kernel under test: avx512 where the CPU has AVX512F/BW (the avx2.* run of this binary
  // forces the AVX2 tile), so neither passes on the other's account.
  const bool wide = cpu_features().avx512f && cpu_features().avx512bw && gemm_backend() != GemmBackend::Avx2;
  EXPECT_STREQ(attention_kernel_name(), wide ? "avx512" : cpu_features().avx2 ? "avx2" : "reference");
  // bf16 caches: the tile on bf16 pairs where the CPU also has AVX512_BF16.
  EXPECT_STREQ(attention_kernel_name(DType::BF16), wide && cpu_features().avx512_bf16 ? "avx512bf16" : attention_kernel_name());
  std::printf("attention kernel: %s, on bf16 caches %s\n", attention_kernel_name(), attention_kernel_name(DType::BF16));
  for (DType dt : {DType::F32, DType::BF16, DType::F8_E4M3, DType::F8_E5M2}) {
    check(dt, 16, 8, 128, false);  // Qwen3-0.6B heads
    check(dt, 32, 8, 64, false);   // Llama-3.2-1B heads
    check(dt, 4, 4, 16, false);    // no GQA
    check(dt, 6, 1, 24, false);    // MQA, head_dim not a multiple of 16
    check(dt, 4, 2, 12, false);    // head_dim not a multiple of 8: reference path
  }
}

// Rows that see more than 2,048 positions are split along the sequence into parts of 2,048
// (flash-decoding) and merged. Checked against dense attention in double, and bitwise against the
// same row attended alone: rows on either side of a part boundary, one that sees exactly one
// part, one that sees none of the later parts, all in one tile with rows that see three parts.
// With `windows`, rows also start past 0 (sliding windows): inside a block, on a block edge,
// across a part boundary, a window larger than the row's prefix, and rows of different starts in
// one tile. Head dimension 12 runs the reference path.
void check_long_rows(bool windows) {
  for (DType dt : {DType::F32, DType::BF16})
    for (auto [n_heads, n_kv, hd] :
         {std::array<int, 3>{4, 2, 64}, std::array<int, 3>{6, 1, 24}, std::array<int, 3>{4, 2, 12}}) {
      std::mt19937 rng(11 + hd);
      std::normal_distribution<float> nd;
      const int len = 2 * 2048 + 300, num_blocks = len / kKvBlock + 1;
      PagedKvLayer kv{dt, n_kv, hd, num_blocks, nullptr, nullptr};
      std::vector<uint8_t> kmem(size_t(kv.layer_elems()) * dtype_size(dt)), vmem(kmem.size());
      kv.k = kmem.data();
      kv.v = vmem.data();
      std::vector<int32_t> table(static_cast<size_t>(num_blocks));
      for (int b = 0; b < num_blocks; ++b) table[size_t(b)] = int32_t((b * 37) % num_blocks);  // scattered
      std::vector<std::vector<float>> keys, vals;
      for (int p = 0; p < len; ++p) {
        std::vector<float> k(size_t(n_kv * hd)), v(k.size());
        for (auto& x : k) x = 2.f * nd(rng);
        for (auto& x : v) x = nd(rng);
        kv_write(kv, table.data(), p, k.data(), v.data());
        if (dt == DType::BF16)
          for (auto* row : {&k, &v})
            for (auto& x : *row) x = bf16_to_f32(f32_to_bf16(x));
        keys.push_back(k);
        vals.push_back(v);
      }
      // A verification of 9 rows across the boundary at 4,096, then 2,048 (one part exactly),
      // 2,049, 100 (no split alone) and the whole sequence (three parts).
      std::vector<int32_t> visible, start;
      for (int p = 4089; p < 4098; ++p) visible.push_back(p + 1);
      for (int v : {2048, 2049, 100, len}) visible.push_back(v);
      for (int32_t v : visible) start.push_back(windows ? std::max(0, v - 1000) : 0);
      if (windows) {
        start[1] = 4093, start[2] = 4090, start[9] = 2000, start[12] = 7;  // other windows
        start[11] = 80, start[10] = 2048;  // a block edge, a part boundary
      }
      const int n = int(visible.size()), ld = n_heads * hd;
      std::vector<const int32_t*> tables(size_t(n), table.data());
      std::vector<float> q(size_t(n * ld)), out(q.size(), -1.f), alone(static_cast<size_t>(ld));
      for (auto& x : q) x = nd(rng);
      const float scale = 1.f / std::sqrt(float(hd));
      attention(kv, AttentionRows{n, tables.data(), visible.data(), start.data()}, q.data(), ld, n_heads, scale,
                out.data(), ld);
      for (int r = 0; r < n; ++r) {
        const std::string where = std::string(dtype_name(dt)) + " hd " + std::to_string(hd) + " visible " +
                                  std::to_string(visible[size_t(r)]) + " start " + std::to_string(start[size_t(r)]);
        std::vector<float> qr(q.begin() + r * ld, q.begin() + (r + 1) * ld);
        const auto want = want_row(qr, keys, vals, n_heads, n_kv, hd, visible[size_t(r)], scale, start[size_t(r)],
                                   bf16_pairs(dt, hd));
        for (int i = 0; i < ld; ++i)
          ASSERT_NEAR(out[size_t(r * ld + i)], want.value[size_t(i)], want.tol[size_t(i)]) << where << " index " << i;
        attention(kv, AttentionRows{1, tables.data(), visible.data() + r, start.data() + r}, qr.data(), ld, n_heads,
                  scale, alone.data(), ld);
        for (int i = 0; i < ld; ++i)
          ASSERT_EQ(out[size_t(r * ld + i)], alone[size_t(i)]) << where << " alone, index " << i;
      }
    }
}

TEST(Attention, SplitAlongTheSequenceMatchesDenseAndIsBatchInvariant) {
  std::printf("attention kernel: %s\n", attention_kernel_name());
  check_long_rows(false);
}

TEST(Attention, SlidingWindowsMatchDenseAndAreBatchInvariant) {
  std::printf("attention kernel: %s\n", attention_kernel_name());
  check_long_rows(true);
}

// The f32 AVX-512 tile on bf16 caches, which CPUs with AVX512F but without AVX512_BF16 run: here it
// runs only with the tile on bf16 pairs turned off.
TEST(Attention, F32TileOnBf16CachesMatchesDense) {
  if (std::string(attention_kernel_name(DType::BF16)) != "avx512bf16")
    GTEST_SKIP() << "bf16 caches already take the " << attention_kernel_name(DType::BF16)
                 << " tile here (no AVX512_BF16, or the AVX2 or reference paths forced), which the other tests check";
  detail::set_attention_bf16_pairs(false);
  struct Restore {
    ~Restore() { detail::set_attention_bf16_pairs(true); }
  } restore;
  EXPECT_STREQ(attention_kernel_name(DType::BF16), "avx512");
  check(DType::BF16, 16, 8, 128, false);
  check(DType::BF16, 32, 8, 64, false);
  check_long_rows(false);
  check_long_rows(true);
}

}  // namespace
}  // namespace dspark
