// The server's cost per token of a response's logprobs (top 5): building a streamed chunk's
// logprobs JSON and dumping it, in the chat and the completions shape, with the demo target's
// tokenizer (run from the repository root). Each iteration formats one 8-token chunk, a DSpark
// round's worth.
#include <benchmark/benchmark.h>

#include <random>

#include "server/openai_logprobs.h"
#include "server/openai_response.h"
#include "tokenizer/tokenizer.h"

namespace dspark {
namespace {

const Tokenizer& demo_tokenizer() {
  static const std::unique_ptr<Tokenizer> tok = Tokenizer::from_dir("models/demo");
  return *tok;
}

Logprobs chunk_logprobs(int tokens, int top_n, int vocab) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> id(0, vocab - 1);
  std::uniform_real_distribution<float> lp(-12.f, 0.f);
  Logprobs l;
  l.top_n = top_n;
  for (int i = 0; i < tokens; ++i) {
    l.token.push_back(id(rng));
    l.logprob.push_back(lp(rng));
    l.rank.push_back(1);
    for (int k = 0; k < top_n; ++k) {
      l.top_token.push_back(id(rng));
      l.top_logprob.push_back(lp(rng));
    }
  }
  return l;
}

void BM_ChatLogprobsJson(benchmark::State& state) {
  const Tokenizer& tok = demo_tokenizer();
  const Logprobs l = chunk_logprobs(8, int(state.range(0)), tok.vocab_size());
  for (auto _ : state) {
    std::string s = dump_json(chat_logprobs(l, int(state.range(0)), tok));
    benchmark::DoNotOptimize(s.data());
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * 8);
}

void BM_CompletionLogprobsJson(benchmark::State& state) {
  const Tokenizer& tok = demo_tokenizer();
  const Logprobs l = chunk_logprobs(8, int(state.range(0)), tok.vocab_size());
  CompletionLogprobs c(tok, int(state.range(0)));
  for (auto _ : state) {
    c.add(l);
    std::string s = dump_json(c.take());
    benchmark::DoNotOptimize(s.data());
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * 8);
}

BENCHMARK(BM_ChatLogprobsJson)->Arg(0)->Arg(5)->Arg(20)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CompletionLogprobsJson)->Arg(0)->Arg(5)->Arg(20)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace dspark

BENCHMARK_MAIN();
