// Paged attention at Qwen3-0.6B head shapes (16 query heads, 8 KV heads, head_dim 128):
// one layer's decode (1 row) and verification of 8 drafts (9 rows) over 512, 4,096 and 32,768
// cached positions: a bf16 cache with the f32 tile (third argument 0) and, where the CPU has
// AVX512_BF16, with the tile on bf16 pairs (1); an fp8 (e4m3) cache (2).
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/buffer.h"
#include "kernels/attention.h"

namespace dspark {
namespace {

void BM_Attention(benchmark::State& state) {
  const int ctx = int(state.range(0)), rows = int(state.range(1));
  const bool fp8 = state.range(2) == 2;
  detail::set_attention_bf16_pairs(state.range(2) == 1);
  const int n_heads = 16, n_kv = 8, hd = 128;
  const int blocks = (ctx + rows + kKvBlock - 1) / kKvBlock;
  PagedKvLayer kv{fp8 ? DType::F8_E4M3 : DType::BF16, n_kv, hd, blocks, nullptr, nullptr};
  // Huge pages, as the engine's KV cache (model/kv_cache.cpp) asks for.
  const size_t elems = size_t(kv.layer_elems()), bytes = elems * dtype_size(kv.dtype);
  HugeBuffer kbuf(bytes), vbuf(bytes);
  std::mt19937 rng(1);
  if (fp8) {  // values of magnitude about 1 (no NaN codes), scale 1
    auto* k = static_cast<uint8_t*>(kbuf.data());
    for (size_t i = 0; i < elems; ++i) k[i] = uint8_t(0x30 + (rng() & 0x0f) + (rng() & 0x80));
  } else {
    auto* k = static_cast<uint16_t*>(kbuf.data());
    for (size_t i = 0; i < elems; ++i) k[i] = uint16_t(0x3c00 + (rng() & 0xff));
  }
  std::memcpy(vbuf.data(), kbuf.data(), bytes);
  std::vector<float> scales(size_t(n_kv) * size_t(blocks) * kKvBlock, 1.f);
  kv.k = kbuf.data();
  kv.v = vbuf.data();
  if (fp8) kv.k_scale = kv.v_scale = scales.data();
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int i = 0; i < blocks; ++i) table[size_t(i)] = i;
  std::vector<const int32_t*> tables(size_t(rows), table.data());
  std::vector<int32_t> visible(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) visible[size_t(r)] = ctx + r + 1;
  std::vector<float> q(size_t(rows) * n_heads * hd, 0.01f), out(q.size());
  AttentionRows ar{rows, tables.data(), visible.data()};
  for (auto _ : state) {
    attention(kv, ar, q.data(), n_heads * hd, n_heads, 0.088f, out.data(), n_heads * hd);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["KV_GB/s"] = benchmark::Counter(
      double(ctx) * n_kv * hd * 2 * double(dtype_size(kv.dtype)),
      benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Attention)
    ->ArgsProduct({{512, 4096, 32768}, {1, 9}, {0, 1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace dspark

BENCHMARK_MAIN();
