// Matrix-product kernels at the shapes of a Qwen3-0.6B layer: dspark's AVX2 kernels against
// oneDNN, for decode (m = 1), verification (m = 8, 16) and prefill (m = 128, 512).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/gemm.h"

namespace dspark {
namespace {

struct Data {
  std::vector<float> x, y, wf;
  std::vector<uint16_t> wb;
};

void run(benchmark::State& state, GemmBackend backend, DType dtype, int n, int k, bool panels = false, bool pairs = false) {
  const int m = int(state.range(0));
  Data d;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  d.x.resize(size_t(m) * k);
  for (auto& v : d.x) v = nd(rng);
  d.y.resize(size_t(m) * n);
  d.wf.resize(size_t(n) * k);
  for (auto& v : d.wf) v = nd(rng) * 0.02f;
  if (dtype == DType::BF16) {
    d.wb.resize(d.wf.size());
    convert_f32_to_bf16(d.wf.data(), d.wb.data(), d.wf.size());
    d.wf = {};
  }
  WeightMatrix w{dtype, n, k, k, dtype == DType::BF16 ? static_cast<const void*>(d.wb.data()) : d.wf.data()};
  std::vector<uint16_t> packed;
  if (panels) {
    packed.resize(panel_bytes(n, k) / 2);
    w = pack_panels(w, packed.data(), pairs);
  }
  try {
    set_gemm_backend(backend);
    gemm(d.x.data(), m, w, d.y.data());
  } catch (const Error& e) {
    state.SkipWithError(e.what());
    set_gemm_backend(GemmBackend::Auto);
    return;
  }
  for (auto _ : state) {
    gemm(d.x.data(), m, w, d.y.data());
    benchmark::DoNotOptimize(d.y.data());
  }
  set_gemm_backend(GemmBackend::Auto);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["weight_GB/s"] = benchmark::Counter(double(n) * k * dtype_size(dtype), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// gate_up of Qwen3-0.6B: [6144, 1024]; down: [1024, 3072].
void BM_Avx2_Bf16_GateUp(benchmark::State& s) { run(s, GemmBackend::Avx2, DType::BF16, 6144, 1024); }
void BM_Avx2_Bf16_Down(benchmark::State& s) { run(s, GemmBackend::Avx2, DType::BF16, 1024, 3072); }
// lm_head of Qwen3-0.6B: 311 MB of bf16, far beyond the caches, so this streams from DRAM.
void BM_Avx2_Bf16_LmHead(benchmark::State& s) { run(s, GemmBackend::Avx2, DType::BF16, 151936, 1024); }
// 384 KiB of bf16 weights: each thread's share stays in its L2, so this is the kernel's compute
// rate without DRAM or L3 in the way (the ceiling the shapes above approach).
void BM_Avx2_Bf16_InL2(benchmark::State& s) { run(s, GemmBackend::Avx2, DType::BF16, 192, 1024); }
void BM_Panels_Bf16_GateUp(benchmark::State& s) { run(s, GemmBackend::Avx2, DType::BF16, 6144, 1024, true); }
void BM_Panels_Bf16_Down(benchmark::State& s) { run(s, GemmBackend::Avx2, DType::BF16, 1024, 3072, true); }
void BM_Panels_Bf16_LmHead(benchmark::State& s) { run(s, GemmBackend::Avx2, DType::BF16, 151936, 1024, true); }
void BM_Panels_Bf16_InL2(benchmark::State& s) { run(s, GemmBackend::Avx2, DType::BF16, 192, 1024, true); }
// The same shapes in pair panels, read by the AVX512-BF16 kernel (skipped where the CPU lacks it).
void BM_Pairs_Bf16_GateUp(benchmark::State& s) { run(s, GemmBackend::Avx512Bf16, DType::BF16, 6144, 1024, true, true); }
void BM_Pairs_Bf16_Down(benchmark::State& s) { run(s, GemmBackend::Avx512Bf16, DType::BF16, 1024, 3072, true, true); }
void BM_Pairs_Bf16_LmHead(benchmark::State& s) { run(s, GemmBackend::Avx512Bf16, DType::BF16, 151936, 1024, true, true); }
void BM_Pairs_Bf16_InL2(benchmark::State& s) { run(s, GemmBackend::Avx512Bf16, DType::BF16, 192, 1024, true, true); }
void BM_Avx2_F32_GateUp(benchmark::State& s) { run(s, GemmBackend::Avx2, DType::F32, 6144, 1024); }
void BM_OneDnn_F32_GateUp(benchmark::State& s) { run(s, GemmBackend::OneDnn, DType::F32, 6144, 1024); }
void BM_OneDnn_Bf16_GateUp(benchmark::State& s) { run(s, GemmBackend::OneDnn, DType::BF16, 6144, 1024); }

#define SHAPES ->Arg(1)->Arg(4)->Arg(8)->Arg(16)->Arg(17)->Arg(64)->Arg(512)->UseRealTime()->Unit(benchmark::kMicrosecond)
BENCHMARK(BM_Avx2_Bf16_GateUp) SHAPES;
BENCHMARK(BM_Avx2_Bf16_Down) SHAPES;
BENCHMARK(BM_Avx2_Bf16_InL2) SHAPES;
BENCHMARK(BM_Panels_Bf16_GateUp) SHAPES;
BENCHMARK(BM_Panels_Bf16_Down) SHAPES;
BENCHMARK(BM_Panels_Bf16_InL2) SHAPES;
BENCHMARK(BM_Panels_Bf16_LmHead)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Arg(16)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Pairs_Bf16_GateUp) SHAPES;
BENCHMARK(BM_Pairs_Bf16_Down) SHAPES;
BENCHMARK(BM_Pairs_Bf16_InL2) SHAPES;
BENCHMARK(BM_Pairs_Bf16_LmHead)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Arg(16)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Avx2_F32_GateUp) SHAPES;
BENCHMARK(BM_Avx2_Bf16_LmHead)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Arg(16)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_OneDnn_F32_GateUp) SHAPES;
BENCHMARK(BM_OneDnn_Bf16_GateUp) SHAPES;

}  // namespace
}  // namespace dspark

BENCHMARK_MAIN();
