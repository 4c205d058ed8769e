// Matrix-product kernels at the shapes of a Qwen3-0.6B layer: dspark's AVX2 kernels against
// oneDNN, for decode (m = 1), verification (m = 8, 16) and prefill (m = 128, 512).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "core/buffer.h"
#include "core/cpu.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/gemm.h"
#include "kernels/qgemm.h"
#include "kernels/quant.h"

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

// Quantized weights (kernels/qgemm.h) quantized from N(0, 0.02) rows with llama.cpp's reference
// rounding, on the quantized kernel of `backend` (Avx512Bf16: AVX512-VNNI where the CPU has it).
void runq(benchmark::State& state, GemmBackend backend, GgmlType type, int n, int k) {
  const int m = int(state.range(0));
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> x(size_t(m) * k), y(size_t(m) * n), row(static_cast<size_t>(k));
  for (auto& v : x) v = nd(rng);
  const size_t rb = ggml_row_bytes(type, k);
  std::vector<uint8_t> rows(rb * size_t(n));
  // 64-byte aligned, as the model's weight arena holds the panels.
  Buffer<uint8_t> panels(qgemm_matrix_bytes(type, n, k));
  for (int r = 0; r < n; ++r) {
    for (auto& v : row) v = nd(rng) * 0.02f;
    quantize_row(type, row.data(), rows.data() + size_t(r) * rb, k);
  }
  qgemm_pack(type, rows.data(), n, k, panels.data());
  WeightMatrix w;
  w.n = n;
  w.k = k;
  w.parts[0] = QuantPart{type, 0, n, panels.data()};
  w.nparts = 1;
  try {
    set_gemm_backend(backend);
  } catch (const Error& e) {
    state.SkipWithError(e.what());
    return;
  }
  state.SetLabel(qgemm_kernel_name());
  for (auto _ : state) {
    gemm(x.data(), m, w, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  set_gemm_backend(GemmBackend::Auto);
  state.counters["weight_GB/s"] = benchmark::Counter(double(panels.size()), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// gate_up of Qwen3-8B ([24576, 4096]; 56 MB in Q4_K: streams from DRAM) and a slice that stays in
// L2 (the kernel's compute rate), for each quantized type, on the AVX512-VNNI and AVX2 kernels.
#define DSPARK_Q(T)                                             \
  void BM_Q_##T##_GateUp8B(benchmark::State& s) {               \
    runq(s, GemmBackend::Avx512Bf16, GgmlType::T, 24576, 4096); \
  }                                                             \
  void BM_Q_##T##_GateUp8B_Avx2(benchmark::State& s) {          \
    runq(s, GemmBackend::Avx2, GgmlType::T, 24576, 4096);       \
  }                                                             \
  void BM_Q_##T##_InL2(benchmark::State& s) {                   \
    runq(s, GemmBackend::Avx512Bf16, GgmlType::T, 64, 4096);    \
  }                                                             \
  void BM_Q_##T##_InL2_Avx2(benchmark::State& s) {              \
    runq(s, GemmBackend::Avx2, GgmlType::T, 64, 4096);          \
  }
DSPARK_Q(Q8_0)
DSPARK_Q(Q4_0)
DSPARK_Q(Q4_K)
#undef DSPARK_Q
#define QSHAPES ->Arg(1)->Arg(2)->Arg(4)->Arg(9)->Arg(16)->UseRealTime()->Unit(benchmark::kMicrosecond)
BENCHMARK(BM_Q_Q8_0_GateUp8B) QSHAPES;
BENCHMARK(BM_Q_Q8_0_GateUp8B_Avx2) QSHAPES;
BENCHMARK(BM_Q_Q8_0_InL2) QSHAPES;
BENCHMARK(BM_Q_Q8_0_InL2_Avx2) QSHAPES;
BENCHMARK(BM_Q_Q4_0_GateUp8B) QSHAPES;
BENCHMARK(BM_Q_Q4_0_GateUp8B_Avx2) QSHAPES;
BENCHMARK(BM_Q_Q4_0_InL2) QSHAPES;
BENCHMARK(BM_Q_Q4_0_InL2_Avx2) QSHAPES;
BENCHMARK(BM_Q_Q4_K_GateUp8B) QSHAPES;
BENCHMARK(BM_Q_Q4_K_GateUp8B_Avx2) QSHAPES;
BENCHMARK(BM_Q_Q4_K_InL2) QSHAPES;
BENCHMARK(BM_Q_Q4_K_InL2_Avx2) QSHAPES;

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
BENCHMARK(BM_Pairs_Bf16_LmHead)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Arg(9)->Arg(16)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Avx2_F32_GateUp) SHAPES;
BENCHMARK(BM_Avx2_Bf16_LmHead)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Arg(16)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_OneDnn_F32_GateUp) SHAPES;
BENCHMARK(BM_OneDnn_Bf16_GateUp) SHAPES;

}  // namespace
}  // namespace dspark

BENCHMARK_MAIN();
