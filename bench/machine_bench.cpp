// The machine's compute ceilings for the AVX2 kernels: FMA throughput with operands in
// registers, with one 256-bit load per FMA, and the 6x16 outer-product micro-kernel with its
// operands in L1. These bound what any f32-FMA matrix kernel can reach on this CPU. For the
// quantized kernels (AVX512-VNNI): vpdpbusd's throughput, and the share of it left when each
// row's eight vpdpbusd per tile are followed by F floating-point operations that fold the integer
// sums into f32 (kernels/qgemm_avx512.cpp: Q8_0 uses 2, Q4_K 3).
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstdlib>

namespace {

#define UNROLL _Pragma("GCC unroll 16")

__attribute__((target("avx2,fma"))) void BM_FmaRegisters(benchmark::State& state) {
  __m256 a[12];
  UNROLL for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(0.1f * float(i));
  const __m256 b = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-4f);
  for (auto _ : state) {
    for (int it = 0; it < 1000; ++it) {
      UNROLL for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], b, c);
      asm volatile("" : "+x"(a[0]), "+x"(a[1]), "+x"(a[2]), "+x"(a[3]), "+x"(a[4]), "+x"(a[5]));
    }
  }
  benchmark::DoNotOptimize(a[7]);
  state.counters["GFLOP/s"] = benchmark::Counter(
      12000.0 * 16, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

__attribute__((target("avx2,fma"))) void BM_FmaWithLoad(benchmark::State& state) {
  float* buf = static_cast<float*>(std::aligned_alloc(64, 4096 * 4));
  for (int i = 0; i < 4096; ++i) buf[i] = 1e-3f;
  __m256 a[10];
  UNROLL for (int i = 0; i < 10; ++i) a[i] = _mm256_setzero_ps();
  const __m256 b = _mm256_set1_ps(0.999f);
  for (auto _ : state) {
    for (int it = 0; it < 1000; ++it) {
      const float* p = buf + (it & 31) * 80;
      UNROLL for (int i = 0; i < 10; ++i) a[i] =
          _mm256_fmadd_ps(_mm256_load_ps(p + 8 * i), b, a[i]);
      asm volatile("" ::: "memory");
    }
  }
  benchmark::DoNotOptimize(a[3]);
  std::free(buf);
  state.counters["GFLOP/s"] = benchmark::Counter(
      10000.0 * 16, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

__attribute__((target("avx2,fma"), noinline)) void micro6x16(const float* a, const float* panel,
                                                             int kc, float* y) {
  __m256 c0[6], c1[6];
  UNROLL for (int i = 0; i < 6; ++i) c0[i] = c1[i] = _mm256_setzero_ps();
  for (int k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(panel + k * 16), b1 = _mm256_load_ps(panel + k * 16 + 8);
    UNROLL for (int i = 0; i < 6; ++i) {
      const __m256 x = _mm256_broadcast_ss(a + k * 6 + i);
      c0[i] = _mm256_fmadd_ps(x, b0, c0[i]);
      c1[i] = _mm256_fmadd_ps(x, b1, c1[i]);
    }
  }
  UNROLL for (int i = 0; i < 6; ++i) {
    _mm256_storeu_ps(y + 16 * i, c0[i]);
    _mm256_storeu_ps(y + 16 * i + 8, c1[i]);
  }
}

void BM_Micro6x16InL1(benchmark::State& state) {
  const int kc = 256;
  float* a = static_cast<float*>(std::aligned_alloc(64, kc * 6 * 4));
  float* panel = static_cast<float*>(std::aligned_alloc(64, kc * 16 * 4));
  float y[96];
  for (int i = 0; i < kc * 6; ++i) a[i] = 1e-3f;
  for (int i = 0; i < kc * 16; ++i) panel[i] = 1e-3f;
  for (auto _ : state) {
    micro6x16(a, panel, kc, y);
    benchmark::DoNotOptimize(y);
  }
  std::free(a);
  std::free(panel);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * 6 * 16 * kc, benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
}

#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni,fma")))

bool skipped_without_vnni(benchmark::State& state) {
  if (__builtin_cpu_supports("avx512vnni")) return false;
  state.SkipWithError("this CPU has no AVX512-VNNI");
  return true;
}

VNNI_TARGET void BM_VnniRegisters(benchmark::State& state) {
  if (skipped_without_vnni(state)) return;
  // Ten independent accumulators (vpdpbusd's latency is several cycles), named so that they
  // stay in registers.
  __m512i a0 = _mm512_set1_epi32(0), a1 = _mm512_set1_epi32(1), a2 = _mm512_set1_epi32(2),
          a3 = _mm512_set1_epi32(3), a4 = _mm512_set1_epi32(4), a5 = _mm512_set1_epi32(5),
          a6 = _mm512_set1_epi32(6), a7 = _mm512_set1_epi32(7), a8 = _mm512_set1_epi32(8),
          a9 = _mm512_set1_epi32(9);
  __m512i b = _mm512_set1_epi8(3), c = _mm512_set1_epi8(5);
  for (auto _ : state) {
    for (int it = 0; it < 1000; ++it) {
#define DSPARK_DP(x) x = _mm512_dpbusd_epi32(x, b, c)
      DSPARK_DP(a0);
      DSPARK_DP(a1);
      DSPARK_DP(a2);
      DSPARK_DP(a3);
      DSPARK_DP(a4);
      DSPARK_DP(a5);
      DSPARK_DP(a6);
      DSPARK_DP(a7);
      DSPARK_DP(a8);
      DSPARK_DP(a9);
#undef DSPARK_DP
      asm volatile("" : "+v"(b), "+v"(c));
    }
  }
  benchmark::DoNotOptimize(_mm512_add_epi32(
      _mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
      _mm512_add_epi32(_mm512_add_epi32(a4, a5),
                       _mm512_add_epi32(a6, _mm512_add_epi32(a7, _mm512_add_epi32(a8, a9))))));
  state.counters["G int8 MAC/s"] = benchmark::Counter(
      10000.0 * 64, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// 10 rows of a quantized tile: per row eight vpdpbusd against the row's broadcast activations,
// then F floating-point operations on the row's f32 output (0: a plain add; 1: convert and fused
// multiply-add; 2: also a scale multiply; 3: also the minimum's multiply-add). Compare the rate
// with BM_VnniRegisters' in the same run.
template <int F>
VNNI_TARGET void BM_VnniFold(benchmark::State& state) {
  if (skipped_without_vnni(state)) return;
  alignas(64) static int32_t act[10 * 16];
  for (int i = 0; i < 160; ++i) act[i] = i * 7;
  __m512i w[8];
  UNROLL for (int j = 0; j < 8; ++j) w[j] = _mm512_set1_epi8(char(j + 1));
  __m512 s = _mm512_set1_ps(1.0001f), u = _mm512_set1_ps(0.999f), tot[10];
  UNROLL for (int k = 0; k < 10; ++k) tot[k] = _mm512_setzero_ps();
  for (auto _ : state) {
    for (int it = 0; it < 1000; ++it) {
      __m512i acc[10];
      UNROLL for (int k = 0; k < 10; ++k) acc[k] = _mm512_setzero_si512();
      UNROLL for (int j = 0; j < 8; ++j) UNROLL for (int k = 0; k < 10; ++k) acc[k] =
          _mm512_dpbusd_epi32(acc[k], w[j], _mm512_set1_epi32(act[16 * k + j]));
      UNROLL for (int k = 0; k < 10; ++k) {
        const __m512 a = _mm512_maskz_cvtepi32_ps(0xffff, acc[k]);
        if constexpr (F == 0) tot[k] = _mm512_add_ps(tot[k], _mm512_castsi512_ps(acc[k]));
        if constexpr (F == 1) tot[k] = _mm512_fmadd_ps(a, s, tot[k]);
        if constexpr (F >= 2)
          tot[k] =
              _mm512_fmadd_ps(a, _mm512_mul_ps(s, _mm512_set1_ps(float(act[16 * k + 9]))), tot[k]);
        if constexpr (F == 3)
          tot[k] = _mm512_fnmadd_ps(u, _mm512_set1_ps(float(act[16 * k + 10])), tot[k]);
      }
      UNROLL for (int j = 0; j < 8; ++j) asm volatile("" : "+v"(w[j]));
      asm volatile("" : "+v"(s), "+v"(u));
    }
  }
  UNROLL for (int k = 1; k < 10; ++k) tot[0] = _mm512_add_ps(tot[0], tot[k]);
  benchmark::DoNotOptimize(tot[0]);
  state.counters["G int8 MAC/s"] =
      benchmark::Counter(1000.0 * 10 * 8 * 64, benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
}

BENCHMARK(BM_FmaRegisters);
BENCHMARK(BM_FmaWithLoad);
BENCHMARK(BM_Micro6x16InL1);
BENCHMARK(BM_VnniRegisters);
BENCHMARK(BM_VnniFold<0>);
BENCHMARK(BM_VnniFold<1>);
BENCHMARK(BM_VnniFold<2>);
BENCHMARK(BM_VnniFold<3>);

}  // namespace

BENCHMARK_MAIN();
