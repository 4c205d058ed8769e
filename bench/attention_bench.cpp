// Paged attention at Qwen3-0.6B head shapes (16 query heads, 8 KV heads, head_dim 128):
// one layer's decode (1 row) and verification of 8 drafts (9 rows) over 512, 4,096 and 32,768
// cached positions, with the f32 tile (third argument 0) and, where the CPU has AVX512_BF16, the
// tile on bf16 pairs (1).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "core/buffer.h"
#include "kernels/attention.h"

namespace dspark {
namespace {

void BM_Attention(benchmark::State& state) {
  const int ctx = int(state.range(0)), rows = int(state.range(1));
  detail::set_attention_bf16_pairs(state.range(2) != 0);
  const int n_heads = 16, n_kv = 8, hd = 128;
  const int blocks = (ctx + rows + kKvBlock - 1) / kKvBlock;
  PagedKvLayer kv{DType::BF16, n_kv, hd, blocks, nullptr, nullptr};
  Buffer<uint16_t> k(size_t(kv.layer_elems())), v(size_t(kv.layer_elems()));
  std::mt19937 rng(1);
  for (size_t i = 0; i < k.size(); ++i) k[i] = v[i] = uint16_t(0x3c00 + (rng() & 0xff));
  kv.k = k.data();
  kv.v = v.data();
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
  state.counters["KV_GB/s"] = benchmark::Counter(double(ctx) * n_kv * hd * 2 * 2, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Attention)
    ->ArgsProduct({{512, 4096, 32768}, {1, 9}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace dspark

BENCHMARK_MAIN();
