// One drafting pass for B sequences, the way the serving engine drafts each step: B calls of
// Drafter::propose (one sequence at a time) against one Drafter::propose_batch, on the demo
// target's real hidden states. Both paths give the same drafts (DrafterBatch in test_spec), so
// the ratio is what batching the drafter saves.
//
//   DSPARK_MODEL=models/demo DSPARK_DRAFTER=DIR build/bench/drafter_bench
// DSPARK_DRAFTER defaults to models/demo-dspark; any DSpark, DFlash or EAGLE-3 drafter of the
// target works (its config names the method). Greedy drafts of K = 8 (the drafter's own limit if
// lower), 64-token prompts, bf16.
//
// BM_ProposeAtContext/C/W: one sequence's drafting round after C context positions, the drafter
// run with sliding_window W (0: none; the drafter's config.json copied with the field set). The
// context rows are synthetic features (a round's cost does not depend on their values), so C may
// pass the target's own position limit.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/forward.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "spec_decode/drafter.h"
#include "spec_decode/spec_config.h"

namespace dspark {
namespace {

std::string env_or(const char* name, const char* def) {
  const char* v = std::getenv(name);
  return v && *v ? v : def;
}

struct Setup {
  std::unique_ptr<Model> target;
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<Forward> fwd;
  std::unique_ptr<Drafter> drafter;
  int k = 8;
  std::vector<int> dseqs, positions;

  explicit Setup(int sequences) {
    target = Model::load(env_or("DSPARK_MODEL", "models/demo"));
    SpecConfig sc =
        SpecConfig::parse(R"({"model": ")" + env_or("DSPARK_DRAFTER", "models/demo-dspark") +
                          R"(", "num_speculative_tokens": 8})");
    drafter = load_drafter(sc, *target, DType::BF16);
    k = std::min(8, drafter->max_draft_tokens());
    const ModelConfig& c = target->config();
    kv = std::make_unique<KvCache>(c.num_layers, c.num_kv_heads, c.head_dim, DType::BF16, 1 << 14);
    fwd = std::make_unique<Forward>(*target, *kv);
    for (int s = 0; s < sequences; ++s) {
      std::vector<int32_t> prompt;
      for (int i = 0; i < 64; ++i) prompt.push_back(int32_t(300 + (i * 37 + s * 101) % 4000));
      const int seq = kv->create_sequence();
      Batch b;
      for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], int(i), seq, true);
      ForwardRequest req;
      req.tap_layers = drafter->target_layers();
      req.logits = false;
      const ForwardOutput& out = fwd->run(b, req);
      dseqs.push_back(drafter->begin());
      drafter->extend(dseqs.back(), prompt, 0,
                      TargetFeatures{out.taps, out.n_out, out.n_taps * out.hidden});
      positions.push_back(int(prompt.size()));
    }
  }
};

void run(benchmark::State& state, bool batched) {
  const int B = int(state.range(0));
  static std::unique_ptr<Setup> setup;
  if (!setup || int(setup->dseqs.size()) < B) setup = std::make_unique<Setup>(16);
  Setup& s = *setup;
  SamplingParams sp;
  sp.temperature = 0.f;
  Rng rng(1);
  std::vector<Draft> drafts(static_cast<size_t>(B));
  std::vector<DraftJob> jobs;
  for (int j = 0; j < B; ++j)
    jobs.push_back({s.dseqs[size_t(j)], 1000, s.positions[size_t(j)], s.k,
                    DraftSampling{true, sp, &rng}, &drafts[size_t(j)]});
  for (auto _ : state) {
    if (batched) {
      s.drafter->propose_batch(jobs);
    } else {
      for (const DraftJob& j : jobs)
        s.drafter->propose(j.seq, j.anchor, j.pos, j.k, j.sampling, *j.out);
    }
    benchmark::DoNotOptimize(drafts.data());
  }
  state.counters["sequences_per_s"] =
      benchmark::Counter(double(B), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_ProposeOneByOne(benchmark::State& state) {
  run(state, false);
}
void BM_ProposeBatch(benchmark::State& state) {
  run(state, true);
}

// The drafter DSPARK_DRAFTER with config.json's sliding_window set to `window` (0: none), from a
// copy of its directory in the temporary folder (the weights linked).
std::unique_ptr<Drafter> windowed_drafter(const Model& target, int window) {
  namespace fs = std::filesystem;
  const fs::path src = env_or("DSPARK_DRAFTER", "models/demo-dspark");
  const fs::path dir = fs::temp_directory_path() / ("dspark-drafter-window-" + std::to_string(window));
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(src))
    if (e.path().filename() != "config.json" && !fs::exists(dir / e.path().filename()))
      fs::create_symlink(fs::absolute(e.path()), dir / e.path().filename());
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(src / "config.json"));
  if (window > 0) cfg["sliding_window"] = window;
  else cfg.erase("sliding_window");
  std::ofstream(dir / "config.json") << cfg.dump(2);
  SpecConfig sc = SpecConfig::parse(R"({"model": ")" + dir.string() + R"(", "num_speculative_tokens": 8})");
  return load_drafter(sc, target, DType::BF16);
}

void BM_ProposeAtContext(benchmark::State& state) {
  const int context = int(state.range(0)), window = int(state.range(1));
  static std::unique_ptr<Model> target;
  if (!target) target = Model::load(env_or("DSPARK_MODEL", "models/demo"));
  auto drafter = windowed_drafter(*target, window);
  const int k = std::min(8, drafter->max_draft_tokens());
  // Synthetic context rows: token i, a feature row of small values that vary with i.
  const int width = int(drafter->target_layers().size()) * target->config().hidden_size;
  std::vector<int32_t> tokens(static_cast<size_t>(context));
  std::vector<float> feats(size_t(context) * size_t(width));
  for (int i = 0; i < context; ++i) tokens[size_t(i)] = int32_t(300 + (i * 37) % 4000);
  for (size_t i = 0; i < feats.size(); ++i) feats[i] = 0.01f * float(int(i % 101) - 50);
  const int seq = drafter->begin();
  drafter->extend(seq, tokens, 0, TargetFeatures{feats.data(), context, width});
  SamplingParams sp;
  sp.temperature = 0.f;
  Rng rng(1);
  Draft draft;
  for (auto _ : state) {
    drafter->propose(seq, 1000, context, k, DraftSampling{true, sp, &rng}, draft);
    benchmark::DoNotOptimize(draft.tokens.data());
  }
  drafter->end(seq);
}

BENCHMARK(BM_ProposeAtContext)
    ->ArgsProduct({{1024, 4096, 16384, 32768, 131072}, {0, 1024}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ProposeOneByOne)->Arg(1)->Arg(4)->Arg(8)->Arg(16)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ProposeBatch)->Arg(1)->Arg(4)->Arg(8)->Arg(16)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dspark

BENCHMARK_MAIN();
