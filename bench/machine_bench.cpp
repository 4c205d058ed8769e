// The machine's compute ceilings for the AVX2 kernels: FMA throughput with operands in
// registers, with one 256-bit load per FMA, and the 6x16 outer-product micro-kernel with its
// operands in L1. These bound what any f32-FMA matrix kernel can reach on this CPU.
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
  state.counters["GFLOP/s"] = benchmark::Counter(12000.0 * 16, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
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
      UNROLL for (int i = 0; i < 10; ++i) a[i] = _mm256_fmadd_ps(_mm256_load_ps(p + 8 * i), b, a[i]);
      asm volatile("" ::: "memory");
    }
  }
  benchmark::DoNotOptimize(a[3]);
  std::free(buf);
  state.counters["GFLOP/s"] = benchmark::Counter(10000.0 * 16, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

__attribute__((target("avx2,fma"), noinline)) void micro6x16(const float* a, const float* panel, int kc, float* y) {
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
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * 6 * 16 * kc, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

BENCHMARK(BM_FmaRegisters);
BENCHMARK(BM_FmaWithLoad);
BENCHMARK(BM_Micro6x16InL1);

}  // namespace

BENCHMARK_MAIN();
