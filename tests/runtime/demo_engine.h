// The demo target in f32 and engines around it, for the engine tests: prompts, an independent
// greedy reference, engines with or without the demo DSpark drafter, and a loop that steps an
// engine on the test's thread until every request has finished.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/forward.h"
#include "runtime/engine.h"
#include "runtime/generate.h"
#include "runtime/spec_generate.h"

#ifndef DSPARK_MODELS_DIR
#error "DSPARK_MODELS_DIR must name the repository's models/ directory"
#endif

namespace dspark::testing {

inline const std::string kModels = DSPARK_MODELS_DIR;

inline bool have_demo_models() {
  return std::filesystem::exists(kModels + "/demo/config.json") &&
         std::filesystem::exists(kModels + "/demo-dspark/config.json");
}

// The demo DSpark drafter's config: full 8-token blocks, or the prefix length policy.
inline std::string demo_spec(bool adaptive) {
  nlohmann::json j = {{"model", kModels + "/demo-dspark"},
                      {"method", "dspark"},
                      {"num_speculative_tokens", 8},
                      {"draft_sample_method", "probabilistic"},
                      {"rejection_sample_method", "block"}};
  if (adaptive) j["enable_adaptive_verification"] = true;
  return j.dump();
}

// log_softmax of one logits row, in double.
inline std::vector<double> log_softmax(const float* x, int n) {
  const double mx = *std::max_element(x, x + n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(double(x[i]) - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out[size_t(i)] = double(x[i]) - lse;
  return out;
}

struct Demo {
  std::unique_ptr<Model> target;
  std::unique_ptr<Tokenizer> tok;
  std::vector<std::vector<int32_t>> prompts;  // six chat prompts

  Demo() {
    const std::string dir = kModels + "/demo";
    target = Model::load(dir, LoadOptions{DType::F32});
    tok = Tokenizer::from_dir(dir);
    const char* texts[] = {
        "Tom has 15 apples and gives 6 to Ana. How many apples does Tom have left?",
        "Write a short note about the weather.",
        "What is 7 times 8?",
        "A train travels 60 km in 1 hour. How far does it go in 3 hours? Explain step by step.",
        "List three colours.",
        "Sam buys 4 pens at 3 dollars each and pays with a 20 dollar bill. What is his change?"};
    const ChatFormat fmt = detect_chat_format(*tok);
    for (const char* t : texts)
      prompts.push_back(tok->encode(apply_chat_template(fmt, {{"user", t}}, true)));
  }
  int vocab() const { return target->config().vocab_size; }
  GenerateParams params(int max_tokens) const {
    GenerateParams gp;
    gp.max_tokens = max_tokens;
    gp.stop_token_ids = target->config().eos_token_ids;
    return gp;
  }
  // The reference, independent of the engine: prefill, then one target step per token, argmax.
  // With `rows`, each generated token's row's log-softmax too.
  std::vector<int32_t> alone(const std::vector<int32_t>& prompt, const GenerateParams& gp,
                             std::vector<std::vector<double>>* rows = nullptr) const {
    const ModelConfig& c = target->config();
    KvCache kv(c.num_layers, c.num_kv_heads, c.head_dim, DType::F32, 4096);
    Forward fwd(*target, kv);
    const int seq = kv.create_sequence();
    const float* logits = prefill(fwd, seq, prompt, 512);
    std::vector<int32_t> out;
    Batch b;
    for (int pos = int(prompt.size());; ++pos) {
      const int32_t t = int32_t(std::max_element(logits, logits + c.vocab_size) - logits);
      out.push_back(t);
      if (rows) rows->push_back(log_softmax(logits, c.vocab_size));
      if (int(out.size()) == gp.max_tokens ||
          std::find(gp.stop_token_ids.begin(), gp.stop_token_ids.end(), t) !=
              gp.stop_token_ids.end())
        return out;
      b.clear();
      b.add(t, pos, seq, true);
      logits = fwd.run(b, ForwardRequest{}).logits_row(0);
    }
  }
  // An engine with f32 weights and a `kv_dtype` cache; with `spec_json`, its drafter and policy.
  std::unique_ptr<Engine> engine(EngineOptions opt, const std::string& spec_json,
                                 DType kv_dtype = DType::F32) const {
    opt.kv_dtype = kv_dtype;
    if (spec_json.empty()) return std::make_unique<Engine>(*target, *tok, opt);
    SpecConfig sc = SpecConfig::parse(spec_json);
    auto d = load_drafter(sc, *target, DType::F32);
    auto policy = make_verify_policy(sc, *target, kv_dtype, opt.max_num_batched_tokens);
    return std::make_unique<Engine>(*target, *tok, opt, std::move(d), sc, std::move(policy));
  }
};

// Submits every request (arrival[i]: the step before which request i is submitted; empty: all
// at once) and steps the engine on this thread until all are done. Request i's outputs go to
// on_output(i, output); returns whether each one finished.
inline std::vector<bool> run_requests(Engine& e, const std::vector<EngineRequest>& reqs,
                                      const std::vector<int>& arrival,
                                      const std::function<void(size_t, RequestOutput&&)>& on_output) {
  std::vector<bool> finished(reqs.size(), false);
  size_t submitted = 0;
  for (int step = 0;; ++step) {
    for (size_t i = submitted; i < reqs.size(); ++i) {
      if (!arrival.empty() && arrival[i] > step) break;
      e.submit(reqs[i], [&, i](RequestOutput&& o) {
        EXPECT_FALSE(finished[i]) << "output after the end of request " << i;
        if (o.finished) finished[i] = true;
        on_output(i, std::move(o));
      });
      submitted = i + 1;
    }
    const bool busy = e.step();
    if (!busy && submitted == reqs.size()) break;
    if (step > 100000) {
      ADD_FAILURE() << "the engine never finished";
      break;
    }
  }
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_TRUE(finished[i]) << "request " << i;
  return finished;
}

}  // namespace dspark::testing
