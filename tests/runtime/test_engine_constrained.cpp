// Structured output (response_format) in the engine, on the f32 demo target: the JSON mask
// applied to verification and drafting keeps DSpark's greedy output token-identical to plain
// decoding under the same mask, alone and all requests at once; every finished output is JSON
// that the schema accepts.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "demo_engine.h"
#include "sample/json_constraint.h"

namespace dspark {
namespace {

using namespace dspark::testing;

const char* kSchema = R"({"type": "object", "properties": {
    "answer": {"type": "integer"}, "unit": {"enum": ["apples", "km", "dollars"]},
    "steps": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    "sure": {"type": "boolean"}}, "required": ["answer"]})";

struct Outputs {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::string> text, finish;
};

Outputs run(Engine& e, const std::vector<EngineRequest>& reqs, bool one_at_a_time) {
  Outputs o;
  o.tokens.resize(reqs.size());
  o.text.resize(reqs.size());
  o.finish.resize(reqs.size());
  auto on = [&](size_t i, RequestOutput&& r) {
    o.tokens[i].insert(o.tokens[i].end(), r.token_ids.begin(), r.token_ids.end());
    o.text[i] += r.text;
    if (r.finished) o.finish[i] = r.finish_reason;
  };
  if (!one_at_a_time) {
    run_requests(e, reqs, {}, on);
  } else {
    for (size_t i = 0; i < reqs.size(); ++i)
      run_requests(e, {reqs[i]}, {}, [&](size_t, RequestOutput&& r) { on(i, std::move(r)); });
  }
  return o;
}

TEST(EngineConstrained, JsonOutputIsLosslessWithDSpark) {
  if (!have_demo_models()) GTEST_SKIP() << "models/demo or models/demo-dspark is missing";
  Demo demo;
  for (const bool schema : {false, true}) {
    GenerateParams gp = demo.params(96);
    for (int32_t id : chat_stop_tokens(*demo.tok, detect_chat_format(*demo.tok))) gp.stop_token_ids.push_back(id);
    // The demo target writes a space wherever the grammar lets it; the schema's grammar allows two
    // in a row (the default is 16), so that its documents end within the budget.
    gp.logits_params.grammar = schema ? JsonGrammar::from_schema(nlohmann::json::parse(kSchema), "schema", 2)
                                      : JsonGrammar::any_object();
    gp.logits_params.grammar_vocab = TokenVocab::build(*demo.tok, gp.stop_token_ids);
    std::vector<EngineRequest> reqs;
    for (size_t i = 0; i < demo.prompts.size(); ++i)
      reqs.emplace_back("r" + std::to_string(i), demo.prompts[i], gp);
    EngineOptions opt;
    opt.max_num_seqs = 8;
    auto plain = demo.engine(opt, "");
    const Outputs want = run(*plain, reqs, true);
    int parsed = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_FALSE(want.tokens[i].empty());
      JsonMatcher m(gp.logits_params.grammar, gp.logits_params.grammar_vocab);
      for (int32_t t : want.tokens[i]) EXPECT_TRUE(m.push(t)) << "prompt " << i << ": token " << t << " left the grammar";
      EXPECT_EQ(want.text[i].find_first_not_of(" \t\r\n"), want.text[i].find('{'))
          << "prompt " << i << ": the output does not start as an object: " << want.text[i];
      if (want.finish[i] != "stop") continue;  // cut by max_tokens: a prefix of a document
      const nlohmann::json j = nlohmann::json::parse(want.text[i], nullptr, false);
      EXPECT_FALSE(j.is_discarded()) << "prompt " << i << ": " << want.text[i];
      EXPECT_TRUE(j.is_object()) << want.text[i];
      if (schema && j.is_object()) {
        EXPECT_TRUE(j.contains("answer") && j["answer"].is_number_integer()) << want.text[i];
        for (const auto& [k, v] : j.items()) {
          EXPECT_TRUE(k == "answer" || k == "unit" || k == "steps" || k == "sure") << want.text[i];
          if (k == "sure") {
            EXPECT_TRUE(v.is_boolean()) << want.text[i];
          }
          if (k == "unit") {
            EXPECT_TRUE(v == "apples" || v == "km" || v == "dollars") << want.text[i];
          }
          if (k == "steps") {
            EXPECT_TRUE(v.is_array() && v.size() <= 3) << want.text[i];
          }
        }
      }
      ++parsed;
    }
    EXPECT_GT(parsed, 0) << "no output finished as a whole document within " << gp.max_tokens << " tokens";
    for (const bool together : {false, true}) {
      auto spec = demo.engine(opt, demo_spec(false));
      const Outputs got = run(*spec, reqs, !together);
      for (size_t i = 0; i < reqs.size(); ++i)
        EXPECT_EQ(got.tokens[i], want.tokens[i])
            << (schema ? "schema" : "json_object") << (together ? ", together" : ", alone") << ", prompt " << i
            << "\n  plain: " << want.text[i] << "\n  spec:  " << got.text[i];
      EXPECT_GT(spec->metrics().spec_num_accepted_tokens, 0);
    }
  }
}

}  // namespace
}  // namespace dspark
