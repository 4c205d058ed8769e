// The per-token distribution work of sampled (T > 0) speculative decoding, at the demo target's
// vocabulary (8192) and Qwen3's (151936): one row's dense distribution, a draw from it, block
// verification of 8 drafts, and the argmax that greedy decoding does instead.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kernels/ops.h"
#include "runtime/logprobs.h"
#include "sample/sampler.h"
#include "spec_decode/verify.h"

namespace dspark {
namespace {

std::vector<float> logits(int rows, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 3.f);
  std::vector<float> x(size_t(rows) * size_t(vocab));
  for (auto& v : x) v = nd(rng);
  return x;
}

void dense_row(benchmark::State& state, const SamplingParams& sp) {
  const int V = int(state.range(0));
  auto x = logits(1, V, 1);
  std::vector<float> p(static_cast<size_t>(V));
  Sampler s;
  for (auto _ : state) {
    s.dense(x.data(), V, sp, p.data());
    benchmark::DoNotOptimize(p.data());
  }
}

void BM_DenseT1(benchmark::State& state) {
  SamplingParams sp;
  sp.temperature = 1.f;
  dense_row(state, sp);
}

void BM_DenseTopP(benchmark::State& state) {
  SamplingParams sp;
  sp.temperature = 0.7f;
  sp.top_p = 0.8f;
  sp.top_k = 20;
  dense_row(state, sp);
}

void BM_DrawDense(benchmark::State& state) {
  const int V = int(state.range(0));
  auto x = logits(1, V, 3);
  std::vector<float> p(static_cast<size_t>(V));
  Sampler s;
  SamplingParams sp;
  sp.temperature = 1.f;
  s.dense(x.data(), V, sp, p.data());
  Rng rng(1);
  for (auto _ : state) benchmark::DoNotOptimize(Sampler::draw_dense(p.data(), V, rng));
}

void BM_VerifyBlock8(benchmark::State& state) {
  const int V = int(state.range(0)), l = 8;
  auto zp = logits(l + 1, V, 4), zq = logits(l, V, 5);
  std::vector<float> p(zp.size()), q(zq.size());
  Sampler s;
  SamplingParams sp;
  sp.temperature = 1.f;
  for (int i = 0; i <= l; ++i) s.dense(zp.data() + size_t(i) * V, V, sp, p.data() + size_t(i) * V);
  for (int i = 0; i < l; ++i) {
    // Drafts close to the target, as a trained drafter's are: q = softmax(z_p + noise).
    for (int v = 0; v < V; ++v) zq[size_t(i) * V + v] = zp[size_t(i) * V + v] + 0.3f * zq[size_t(i) * V + v];
    s.dense(zq.data() + size_t(i) * V, V, sp, q.data() + size_t(i) * V);
  }
  std::vector<int32_t> draft(static_cast<size_t>(l));
  for (int i = 0; i < l; ++i) draft[size_t(i)] = argmax(q.data() + size_t(i) * V, V);
  Rng a(1, 2), r(1, 3);
  for (auto _ : state) {
    const VerifyInput in{V, draft, q.data(), p.data()};
    benchmark::DoNotOptimize(verify_block(in, {&a, &r}));
  }
}

void BM_Argmax(benchmark::State& state) {
  const int V = int(state.range(0));
  auto x = logits(1, V, 6);
  for (auto _ : state) benchmark::DoNotOptimize(argmax(x.data(), V));
}

// One emitted token's logprobs with the top 5 (the chosen token, its rank, the log-sum-exp).
void BM_Logprobs5(benchmark::State& state) {
  const int V = int(state.range(0));
  auto x = logits(1, V, 7);
  Logprobs out;
  for (auto _ : state) {
    out.clear();
    append_logprobs(x.data(), V, 17, 5, out);
    benchmark::DoNotOptimize(out.logprob.data());
  }
}

#define VOCABS ->Arg(8192)->Arg(151936)->Unit(benchmark::kMicrosecond)
BENCHMARK(BM_DenseT1) VOCABS;
BENCHMARK(BM_DenseTopP) VOCABS;
BENCHMARK(BM_DrawDense) VOCABS;
BENCHMARK(BM_VerifyBlock8) VOCABS;
BENCHMARK(BM_Argmax) VOCABS;
BENCHMARK(BM_Logprobs5) VOCABS;

}  // namespace
}  // namespace dspark

BENCHMARK_MAIN();
