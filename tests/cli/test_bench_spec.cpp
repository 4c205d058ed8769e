// `dspark bench spec` end to end, the real binary on real files: --per-category selection (with
// and without --limit), the per-category and overall figures, the verification-length
// histogram, the --outputs JSONL, "n/a (sampled)" at T > 0 and bad flags refused naming the
// flag. A random tiny-qwen3 model with n-gram speculation (no drafter) for most cases; the demo
// target and drafter at f32 for token identity on varied text (the random model repeats one
// token).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

const std::string kNgram = R"({"method": "ngram", "num_speculative_tokens": 4})";
constexpr int kNgramK = 4;

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Result {
  int rc = -1;
  std::string out, err;
};

class BenchSpec : public ::testing::Test {
 protected:
  static std::string dir_, model_, spec_bench_, corpus_;

  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/dspark_bench_spec_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    model_ = dir_ + "/model";
    ASSERT_EQ(std::system((std::string(DSPARK_BIN) + " model init --shape tiny-qwen3 --out " +
                           quote(model_) + " > /dev/null 2>&1")
                              .c_str()),
              0);
    // Spec-Bench format, three categories interleaved: alpha 3, beta 1, gamma 4.
    const std::vector<std::pair<int, std::string>> rows = {
        {11, "beta"},  {12, "gamma"}, {13, "alpha"}, {14, "gamma"},
        {15, "gamma"}, {16, "alpha"}, {17, "gamma"}, {18, "alpha"}};
    spec_bench_ = dir_ + "/spec_bench.jsonl";
    std::ofstream sb(spec_bench_);
    const char* texts[] = {"Write a short poem about the sea and the sky.",
                           "What is 12 times 7? Explain the steps.",
                           "List three uses of a paper clip, then two more.",
                           "Translate 'good morning' into French and German.",
                           "Summarize: the cat sat on the mat and the dog ran to the cat.",
                           "Name the planets of the solar system in order.",
                           "Why is the sky blue? Answer in two sentences.",
                           "Write a Python function that reverses a list."};
    for (size_t i = 0; i < rows.size(); ++i)
      sb << json{{"question_id", rows[i].first},
                 {"category", rows[i].second},
                 {"turns", {texts[i], "And a second turn."}}}
                .dump()
         << "\n";
    corpus_ = dir_ + "/corpus.jsonl";
    std::ofstream c(corpus_);
    c << R"({"prompt": "Count from one to ten.", "domain": "math"})"
      << "\n"
      << R"({"prompt": "Write a haiku about rain.", "domain": "poetry"})"
      << "\n"
      << R"({"prompt": "Add 2 and 3.", "domain": "math"})"
      << "\n";
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // dspark bench spec on the tiny model with n-gram speculation, plus `flags`.
  static Result bench(const std::vector<std::string>& flags, const std::string& model = model_,
                      const std::string& spec = kNgram) {
    std::string cmd = "timeout 120 " + std::string(DSPARK_BIN) + " bench spec --model " +
                      quote(model) + " --speculative-config " + quote(spec);
    for (const std::string& f : flags) cmd += " " + quote(f);
    const std::string out = dir_ + "/stdout", err = dir_ + "/stderr";
    cmd += " > " + quote(out) + " 2> " + quote(err);
    const int status = std::system(cmd.c_str());
    Result r;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

  static json bench_json(const std::vector<std::string>& flags) {
    std::vector<std::string> f = flags;
    f.push_back("--json");
    const Result r = bench(f);
    EXPECT_EQ(r.rc, 0) << r.err;
    return json::parse(r.out);
  }

  static std::vector<json> read_jsonl(const std::string& path) {
    std::vector<json> v;
    std::ifstream f(path);
    for (std::string line; std::getline(f, line);) v.push_back(json::parse(line));
    return v;
  }

  static int64_t sum(const json& a) {
    int64_t s = 0;
    for (const auto& x : a) s += x.get<int64_t>();
    return s;
  }
  static int64_t weighted(const json& a) {
    int64_t s = 0;
    for (size_t l = 0; l < a.size(); ++l) s += int64_t(l) * a[l].get<int64_t>();
    return s;
  }
};

std::string BenchSpec::dir_, BenchSpec::model_, BenchSpec::spec_bench_, BenchSpec::corpus_;

TEST_F(BenchSpec, PerCategoryTakesTheFirstNOfEachCategoryInFileOrder) {
  const std::string outputs = dir_ + "/per_category.jsonl";
  const json j = bench_json({"--prompts", spec_bench_, "--per-category", "2", "--max-tokens", "24",
                             "--dtype", "f32", "--outputs", outputs});
  EXPECT_EQ(j["category_order"], json({"beta", "gamma", "alpha"}));
  EXPECT_EQ(j["categories"]["alpha"]["prompts"], 2);
  EXPECT_EQ(j["categories"]["beta"]["prompts"], 1);  // it has only one
  EXPECT_EQ(j["categories"]["gamma"]["prompts"], 2);
  EXPECT_EQ(j["all"]["prompts"], 5);
  EXPECT_EQ(j["mean_over_categories"]["categories"], 3);
  EXPECT_EQ(j["mean_over_categories"]["prompts"], 5);
  // The mean over categories is each category once, not the pooled figure.
  double mean_tpr = 0;
  for (const char* c : {"alpha", "beta", "gamma"})
    mean_tpr += j["categories"][c]["mean_accepted_length"].get<double>() / 3;
  EXPECT_NEAR(j["mean_over_categories"]["mean_accepted_length"].get<double>(), mean_tpr, 1e-9);

  const std::vector<json> lines = read_jsonl(outputs);
  ASSERT_EQ(lines.size(), 5u);
  std::vector<int> ids;
  int64_t rounds = 0;
  for (const json& l : lines) {
    ids.push_back(l["question_id"].get<int>());
    for (const char* f : {"category", "prompt", "plain_text", "spec_text", "plain_tokens",
                          "spec_tokens", "plain_token_ids", "spec_token_ids", "identical",
                          "tokens_per_round", "verified_per_round", "rounds"})
      EXPECT_TRUE(l.contains(f)) << f << " missing in " << l.dump();
    EXPECT_EQ(l["plain_tokens"].get<size_t>(), l["plain_token_ids"].size());
    EXPECT_EQ(l["spec_tokens"].get<size_t>(), l["spec_token_ids"].size());
    EXPECT_GT(l["spec_tokens"].get<int>(), 0);
    EXPECT_EQ(l["identical"], true) << l.dump();  // f32, T = 0
    EXPECT_EQ(sum(l["verify_length_hist"]), l["rounds"].get<int64_t>());
    rounds += l["rounds"].get<int64_t>();
  }
  EXPECT_EQ(ids, (std::vector<int>{11, 12, 13, 14, 16}));
  EXPECT_EQ(lines[0]["category"], "beta");
  EXPECT_EQ(lines[4]["category"], "alpha");
  EXPECT_EQ(rounds, j["all"]["rounds"].get<int64_t>());
  EXPECT_EQ(j["all"]["identical_outputs"], 5);
}

TEST_F(BenchSpec, HistogramCountsSumToTheRounds) {
  const json j = bench_json(
      {"--prompts", spec_bench_, "--per-category", "3", "--max-tokens", "32", "--dtype", "f32"});
  const json& h = j["verify_length_hist"];
  ASSERT_EQ(h["counts"].size(), size_t(kNgramK + 1));
  ASSERT_GT(j["all"]["rounds"].get<int64_t>(), 0);
  EXPECT_EQ(sum(h["counts"]), j["all"]["rounds"].get<int64_t>());
  EXPECT_EQ(h["rounds"], j["all"]["rounds"]);
  EXPECT_EQ(weighted(h["counts"]), j["all"]["drafted_tokens"].get<int64_t>());
  double shares = 0;
  for (const auto& s : h["shares"]) shares += s.get<double>();
  EXPECT_NEAR(shares, 1.0, 1e-9);
  int64_t cat_rounds = 0;
  for (const auto& [name, c] : j["categories"].items()) {
    EXPECT_EQ(sum(c["verify_length_hist"]), c["rounds"].get<int64_t>()) << name;
    EXPECT_EQ(weighted(c["verify_length_hist"]), c["drafted_tokens"].get<int64_t>()) << name;
    cat_rounds += c["rounds"].get<int64_t>();
  }
  EXPECT_EQ(cat_rounds, j["all"]["rounds"].get<int64_t>());
  EXPECT_NEAR(j["all"]["mean_verified_drafts"].get<double>(),
              double(weighted(h["counts"])) / double(sum(h["counts"])), 1e-9);

  const Result t = bench(
      {"--prompts", spec_bench_, "--per-category", "3", "--max-tokens", "32", "--dtype", "f32"});
  ASSERT_EQ(t.rc, 0) << t.err;
  EXPECT_NE(t.out.find("verification lengths chosen over " +
                       std::to_string(j["all"]["rounds"].get<int64_t>()) + " rounds"),
            std::string::npos)
      << t.out;
  EXPECT_NE(t.out.find("mean of categories"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("pooled"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("3/3"), std::string::npos) << t.out;  // alpha's identical count at T = 0
}

TEST_F(BenchSpec, LimitAppliesAfterPerCategory) {
  json j = bench_json(
      {"--prompts", spec_bench_, "--per-category", "1", "--limit", "2", "--max-tokens", "8"});
  EXPECT_EQ(j["all"]["prompts"], 2);
  EXPECT_EQ(j["category_order"], json({"beta", "gamma"}));
  j = bench_json({"--prompts", spec_bench_, "--per-category", "10", "--max-tokens", "8"});
  EXPECT_EQ(j["all"]["prompts"], 8);
  EXPECT_EQ(j["categories"]["gamma"]["prompts"], 4);
  j = bench_json({"--prompts", spec_bench_, "--limit", "3", "--max-tokens", "8"});
  EXPECT_EQ(j["all"]["prompts"], 3);
  EXPECT_EQ(j["categories"]["alpha"]["prompts"], 1);
}

TEST_F(BenchSpec, SampledRunsSayNotApplicableInsteadOfZeroIdentical) {
  const std::string outputs = dir_ + "/sampled.jsonl";
  const std::vector<std::string> flags = {"--prompts",    spec_bench_, "--per-category", "1",
                                          "--max-tokens", "16",        "--temperature",  "1",
                                          "--outputs",    outputs};
  const Result t = bench(flags);
  ASSERT_EQ(t.rc, 0) << t.err;
  EXPECT_NE(t.out.find("n/a (sampled)"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("SpecLossless"), std::string::npos) << t.out;
  EXPECT_EQ(t.out.find("0/1"), std::string::npos) << t.out;
  for (const json& l : read_jsonl(outputs)) {
    EXPECT_TRUE(l["identical"].is_null()) << l.dump();
    EXPECT_TRUE(l["identical_reason"].is_string());
  }
  std::vector<std::string> jf = flags;
  jf.push_back("--json");
  const Result r = bench(jf);
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["sampled"], true);
  EXPECT_TRUE(j["all"]["identical_outputs"].is_null());
  EXPECT_TRUE(j["all"]["identical_reason"].is_string());
  EXPECT_TRUE(j["mean_over_categories"]["identical_outputs"].is_null());
  for (const auto& [name, c] : j["categories"].items()) {
    EXPECT_TRUE(c["identical_outputs"].is_null()) << name;
    EXPECT_NE(c["identical_reason"].get<std::string>().find("chi-square"), std::string::npos);
  }
}

TEST_F(BenchSpec, CorpusPromptsKeepTheirDomains) {
  const std::string outputs = dir_ + "/corpus_out.jsonl";
  const json j =
      bench_json({"--prompts", corpus_, "--limit", "2", "--max-tokens", "8", "--outputs", outputs});
  EXPECT_EQ(j["all"]["prompts"], 2);
  EXPECT_EQ(j["category_order"], json({"math", "poetry"}));
  const std::vector<json> lines = read_jsonl(outputs);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_FALSE(lines[0].contains("question_id"));
  EXPECT_EQ(lines[0]["prompt"], "Count from one to ten.");
  EXPECT_EQ(lines[1]["category"], "poetry");
}

TEST_F(BenchSpec, BadFlagsAreRefusedNamingTheFlag) {
  struct Case {
    std::vector<std::string> flags;
    std::string fragment;
  };
  const std::string missing_dir = dir_ + "/no/such/dir/out.jsonl";
  const std::vector<Case> cases = {
      {{"--per-category", "-1"}, "flag --per-category must be from 0"},
      {{"--per-category", "two"}, "--per-category"},
      {{"--per-category", "4294967297"}, "flag --per-category must be from 0"},
      {{"--per-category", "1", "--limit", "-2"}, "flag --limit must be from 0"},
      {{"--outputs", missing_dir}, "flag --outputs: cannot write '" + missing_dir + "'"},
      {{"--outputs", dir_}, "flag --outputs: cannot write '" + dir_ + "'"},
      {{"--outputs", ""}, "flag --outputs"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> f = {"--prompts", spec_bench_, "--max-tokens", "4"};
    f.insert(f.end(), c.flags.begin(), c.flags.end());
    const Result r = bench(f);
    EXPECT_NE(r.rc, 0) << c.flags[0] << " " << c.flags[1];
    EXPECT_LT(r.rc, 124) << c.flags[0] << " " << c.flags[1] << ": " << r.err;
    EXPECT_NE(r.err.find(c.fragment), std::string::npos)
        << c.flags[0] << " " << c.flags[1] << ": " << r.err;
  }
  EXPECT_FALSE(fs::exists(missing_dir));
}

// Several configs side by side: one report per config over the same plain runs, labels that tell
// them apart, every prompt once per config in --outputs, and an SVG plot of each config's figures
// per category against its mean prompt length.
TEST_F(BenchSpec, ConfigsSideBySideShareThePlainRunsAndArePlotted) {
  const std::string outputs = dir_ + "/side.jsonl", plot = dir_ + "/side.svg";
  const std::string specs =
      "[" + kNgram + R"(, {"method": "ngram", "num_speculative_tokens": 2}, )" + kNgram + "]";
  const Result r = bench({"--prompts", spec_bench_, "--max-tokens", "12", "--outputs", outputs,
                          "--plot", plot, "--json"},
                         model_, specs);
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  ASSERT_EQ(j["runs"].size(), 3u);
  EXPECT_EQ(j["runs"][0]["label"], "ngram");
  EXPECT_EQ(j["runs"][1]["label"], "ngram #2");
  EXPECT_EQ(j["runs"][2]["label"], "ngram #3");
  EXPECT_EQ(j["runs"][1]["num_speculative_tokens"], 2);
  const std::vector<json> lines = read_jsonl(outputs);
  ASSERT_EQ(lines.size(), 3u * 8u);
  for (const std::string c : {"alpha", "beta", "gamma"}) {
    double tokens = 0;
    int n = 0;
    for (const json& l : lines)
      if (l["category"] == c && l["method"] == "ngram")
        tokens += l["prompt_tokens"].get<double>(), n++;
    ASSERT_GT(n, 0) << c;
    for (const json& run : j["runs"]) {
      const json& cat = run["categories"][c];
      EXPECT_DOUBLE_EQ(cat["mean_prompt_tokens"].get<double>(), tokens / n) << c;
      // One plain run per prompt, shared by every config.
      EXPECT_EQ(cat["plain_tokens"], j["runs"][0]["categories"][c]["plain_tokens"]) << c;
      EXPECT_EQ(cat["plain_tok_s"], j["runs"][0]["categories"][c]["plain_tok_s"]) << c;
    }
  }
  for (size_t i = 0; i < 8; ++i) {  // prompt i's lines: one per config, in config order
    EXPECT_EQ(lines[3 * i]["method"], "ngram");
    EXPECT_EQ(lines[3 * i + 1]["method"], "ngram #2");
    EXPECT_EQ(lines[3 * i + 1]["plain_token_ids"], lines[3 * i]["plain_token_ids"]);
  }
  const std::string svg = slurp(plot);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  for (const std::string s : {"Tokens per round", "Speedup over plain decoding", "Drafting round",
                              "ngram #2", "ngram #3", "</svg>"})
    EXPECT_NE(svg.find(s), std::string::npos) << s;
  size_t lines_drawn = 0;  // 3 panels x 3 configs, one polyline each (plus the 3 axes)
  for (size_t p = svg.find("<polyline"); p != std::string::npos; p = svg.find("<polyline", p + 1))
    lines_drawn++;
  EXPECT_EQ(lines_drawn, 3u * 3u + 3u);
  // The text report ends with the table side by side.
  const Result t = bench({"--prompts", spec_bench_, "--max-tokens", "4"}, model_, specs);
  ASSERT_EQ(t.rc, 0) << t.err;
  EXPECT_NE(t.out.find("== ngram #2 =="), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("side by side"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("[3] t/r"), std::string::npos) << t.out;
  // Bad arrays and plot paths are refused naming the flag, before any work.
  struct Case {
    std::string spec, flag, fragment;
  };
  const std::vector<Case> bad = {
      {"[]", "", "flag --speculative-config: the array holds no config"},
      {"[" + kNgram + R"(, {"method": "nope"}])", "", "flag --speculative-config: config 2 of 2"},
      {kNgram, dir_ + "/no/such/dir/p.svg", "flag --plot: cannot write"},
  };
  for (const Case& c : bad) {
    std::vector<std::string> f = {"--prompts", spec_bench_, "--max-tokens", "4"};
    if (!c.flag.empty()) f.insert(f.end(), {"--plot", c.flag});
    const Result b = bench(f, model_, c.spec);
    EXPECT_NE(b.rc, 0) << c.spec;
    EXPECT_LT(b.rc, 124) << b.err;
    EXPECT_NE(b.err.find(c.fragment), std::string::npos) << b.err;
  }
}

// Token identity on varied text: the demo target with its DSpark drafter, full blocks, f32, T = 0.
TEST_F(BenchSpec, F32GreedyOutputsAreTokenIdenticalWithTheDemoDrafter) {
  const std::string models = DSPARK_MODELS_DIR;
  const std::string spec = R"({"model": ")" + models +
                           R"(/demo-dspark", "method": "dspark", "num_speculative_tokens": 8})";
  const std::string outputs = dir_ + "/demo.jsonl";
  const Result r = bench({"--prompts", spec_bench_, "--per-category", "2", "--max-tokens", "32",
                          "--dtype", "f32", "--outputs", outputs, "--json"},
                         models + "/demo", spec);
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["all"]["identical_outputs"], 5);
  EXPECT_EQ(sum(j["verify_length_hist"]["counts"]), j["all"]["rounds"].get<int64_t>());
  EXPECT_GT(j["verify_length_hist"]["counts"][8].get<int64_t>(), 0);  // full blocks verified
  const std::vector<json> lines = read_jsonl(outputs);
  ASSERT_EQ(lines.size(), 5u);
  for (const json& l : lines) {
    EXPECT_EQ(l["identical"], true) << l.dump();
    EXPECT_EQ(l["plain_token_ids"], l["spec_token_ids"]);
    EXPECT_EQ(l["plain_text"], l["spec_text"]);
    EXPECT_GE(l["tokens_per_round"].get<double>(), 1.0);
  }
}

}  // namespace

namespace {

// `dspark bench step --sps-out FILE` writes the curve that a speculative config names: one entry
// per step size B = 1 .. --max-step-tokens (serve's --max-num-batched-tokens, 2048, by default),
// positive and never rising (a larger step is never faster), for the K it was asked for; and
// bench spec's adaptive verification length runs on it (token-identical at f32, every verification
// length counted).
TEST(BenchStep, SpsOutWritesTheCurveTheLengthPolicyLoads) {
  const std::string models = DSPARK_MODELS_DIR;
  char tmpl[] = "/tmp/dspark_bench_step_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string curve = dir + "/sps.json", err = dir + "/stderr";
  auto run = [&](const std::string& args) {
    const int status = std::system(("timeout 300 " + std::string(DSPARK_BIN) + " " + args + " > " +
                                    quote(dir + "/stdout") + " 2> " + quote(err))
                                       .c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  };
  const std::string step = "bench step --model " + quote(models + "/demo") +
                           " --contexts 64 --batches 1 --tokens 1 --reps 1 --prefill-tokens 0";
  // The last one is for the bench spec run below: f32, as that run is.
  for (const auto& [flags, size, k, dtype] :
       std::vector<std::tuple<std::string, size_t, int, std::string>>{
           {"", 2048, 8, "BF16"},
           {" --max-step-tokens 100 --num-speculative-tokens 4 --dtype f32", 100, 4, "F32"}}) {
    ASSERT_EQ(run(step + flags + " --sps-out " + quote(curve)), 0) << slurp(err);
    const json f = json::parse(slurp(curve));
    EXPECT_EQ(f["num_speculative_tokens"], k);
    EXPECT_EQ(f["dtype"], dtype);
    const std::vector<double> sps = f["dspark_sps_curve"].get<std::vector<double>>();
    ASSERT_EQ(sps.size(), size) << flags;
    EXPECT_GT(sps.back(), 0.0);
    for (size_t b = 1; b < sps.size(); ++b) EXPECT_LE(sps[b], sps[b - 1]) << "B = " << b + 1;
    EXPECT_GT(sps[0], sps.back()) << "a step of " << size << " tokens costs more than one of 1";
  }
  const std::string prompts = dir + "/prompts.jsonl";
  std::ofstream(prompts)
      << R"({"prompt": "What is 12 times 7? Explain the steps.", "domain": "math"})"
      << "\n";
  const std::string spec =
      R"({"model": ")" + models + R"(/demo-dspark", "method": "dspark", )" +
      R"("num_speculative_tokens": 4, "enable_adaptive_verification": true, )" +
      R"("dspark_sps_curve": ")" + curve + R"("})";
  ASSERT_EQ(run("bench spec --model " + quote(models + "/demo") + " --prompts " + quote(prompts) +
                " --max-tokens 24 --dtype f32 --json --speculative-config " + quote(spec)),
            0)
      << slurp(err);
  const json j = json::parse(slurp(dir + "/stdout"));
  EXPECT_EQ(j["all"]["identical_outputs"], 1);
  const json& counts = j["verify_length_hist"]["counts"];
  ASSERT_EQ(counts.size(), 5u);  // lengths 0..K, K = 4 from the config
  int64_t rounds = 0;
  for (const auto& c : counts) rounds += c.get<int64_t>();
  EXPECT_EQ(rounds, j["all"]["rounds"].get<int64_t>());
  // A curve measured on another CPU, with other kernels, threads or dtype is refused, naming the
  // file and the field: the policy's lengths are only right on the machine it describes.
  const json good = json::parse(slurp(curve));
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, json>>{{"cpu", "Some Other CPU (avx2 fma)"},
                                                 {"gemm", "reference"},
                                                 {"threads", 7},
                                                 {"dtype", "BF16"}}) {
    json bad = good;
    bad[field] = value;
    std::ofstream(curve) << bad.dump();
    EXPECT_NE(run("bench spec --model " + quote(models + "/demo") + " --prompts " + quote(prompts) +
                  " --max-tokens 4 --dtype f32 --speculative-config " + quote(spec)),
              0)
        << field;
    EXPECT_NE(slurp(err).find(curve + ": field '" + field + "' is '"), std::string::npos)
        << slurp(err);
  }
  // A curve for a smaller K than the config's is refused, naming the field.
  std::ofstream(curve) << R"({"dspark_sps_curve": [500, 400, 300]})";
  EXPECT_NE(run("bench spec --model " + quote(models + "/demo") + " --prompts " + quote(prompts) +
                " --max-tokens 4 --speculative-config " + quote(spec)),
            0);
  EXPECT_NE(slurp(err).find("'dspark_sps_curve' has 3 entries but needs at least 5"),
            std::string::npos)
      << slurp(err);
  fs::remove_all(dir);
}

}  // namespace
