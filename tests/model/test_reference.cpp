// The engine against an independent PyTorch reference (tests/reference/hf_reference.py) on
// random tiny Qwen3 and Llama checkpoints in real HF layout.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/mmap_file.h"
#include "kernels/ops.h"
#include "model/forward.h"
#include "model/layer.h"

namespace dspark {
namespace {

namespace fs = std::filesystem;

struct Reference {
  std::string dir;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<float> logits;  // [P, T, V]
  int P = 0, T = 0, V = 0;
  std::vector<std::vector<int32_t>> greedy;
  std::vector<int> greedy_prompts;
  // RoPE tables in float64 at positions up to 128K (absent in the GGUF cases).
  std::vector<int32_t> rope_positions;
  std::vector<std::vector<double>> rope_cos, rope_sin;

  const float* row(int p, int t) const { return logits.data() + (size_t(p) * T + t) * V; }
};

std::vector<Reference> load_references() {
  const char* env = std::getenv("DSPARK_REFERENCE_DIR");
  if (!env) throw std::runtime_error("DSPARK_REFERENCE_DIR is not set (run through ctest)");
  std::vector<Reference> refs;
  for (const auto& entry : fs::directory_iterator(env)) {
    if (!fs::exists(entry.path() / "reference.json")) continue;
    Reference r;
    r.dir = entry.path().string();
    auto j = nlohmann::json::parse(read_text_file((entry.path() / "reference.json").string()));
    r.prompts = j["prompts"].get<std::vector<std::vector<int32_t>>>();
    auto shape = j["logits_shape"].get<std::vector<int>>();
    r.P = shape[0], r.T = shape[1], r.V = shape[2];
    r.logits.resize(size_t(r.P) * r.T * r.V);
    std::ifstream in(entry.path() / j["logits_file"].get<std::string>(), std::ios::binary);
    in.read(reinterpret_cast<char*>(r.logits.data()), std::streamsize(r.logits.size() * 4));
    r.greedy = j["greedy"].get<std::vector<std::vector<int32_t>>>();
    r.greedy_prompts = j["greedy_prompts"].get<std::vector<int>>();
    if (j.contains("rope")) {
      r.rope_positions = j["rope"]["positions"].get<std::vector<int32_t>>();
      r.rope_cos = j["rope"]["cos"].get<std::vector<std::vector<double>>>();
      r.rope_sin = j["rope"]["sin"].get<std::vector<std::vector<double>>>();
    }
    refs.push_back(std::move(r));
  }
  std::sort(refs.begin(), refs.end(), [](auto& a, auto& b) { return a.dir < b.dir; });
  if (refs.size() < 4) throw std::runtime_error(std::string("expected 4 reference cases in ") + env);
  return refs;
}

const std::vector<Reference>& refs() {
  static const std::vector<Reference> r = load_references();
  return r;
}

// Logits of every position of `prompt`, run as one sequence in one batch.
std::vector<float> engine_logits(const Model& m, const std::vector<int32_t>& prompt) {
  const ModelConfig& c = m.config();
  KvCache kv(c.num_layers, c.num_kv_heads, c.head_dim, m.dtype(), 1024);
  Forward fwd(m, kv);
  int seq = kv.create_sequence();
  Batch b;
  for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], int(i), seq, true);
  const ForwardOutput& out = fwd.run(b, {});
  return std::vector<float>(out.logits, out.logits + size_t(out.n_out) * out.vocab);
}

TEST(Reference, F32LogitsMatch) {
  for (const Reference& r : refs()) {
    auto m = Model::load(r.dir, LoadOptions{DType::F32});
    float scale = 0;
    for (float v : r.logits) scale = std::max(scale, std::abs(v));
    ASSERT_GT(scale, 1.f) << r.dir;
    double worst = 0;
    for (int p = 0; p < r.P; ++p) {
      auto got = engine_logits(*m, r.prompts[size_t(p)]);
      for (size_t t = 0; t < r.prompts[size_t(p)].size(); ++t)
        for (int v = 0; v < r.V; ++v)
          worst = std::max(worst, double(std::abs(got[t * size_t(r.V) + size_t(v)] - r.row(p, int(t))[v])));
    }
    std::printf("%s: f32 max-abs logit error %.3g (logit scale %.3g, ratio %.3g)\n", r.dir.c_str(), worst, scale,
                worst / scale);
    EXPECT_LE(worst, 1e-4 * scale) << r.dir;
  }
}

TEST(Reference, F32GreedyContinuationsIdentical) {
  for (const Reference& r : refs()) {
    auto m = Model::load(r.dir, LoadOptions{DType::F32});
    const ModelConfig& c = m->config();
    for (size_t g = 0; g < r.greedy.size(); ++g) {
      const auto& prompt = r.prompts[size_t(r.greedy_prompts[g])];
      KvCache kv(c.num_layers, c.num_kv_heads, c.head_dim, DType::F32, 1024);
      Forward fwd(*m, kv);
      int seq = kv.create_sequence();
      Batch b;
      for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], int(i), seq, i + 1 == prompt.size());
      std::vector<int32_t> got;
      int pos = int(prompt.size());
      const float* logits = fwd.run(b, {}).logits_row(0);
      for (size_t step = 0; step < r.greedy[g].size(); ++step) {
        got.push_back(argmax(logits, c.vocab_size));
        b.clear();
        b.add(got.back(), pos++, seq, true);
        logits = fwd.run(b, {}).logits_row(0);
      }
      EXPECT_EQ(got, r.greedy[g]) << r.dir << " continuation " << g;
    }
  }
}

// bf16 against the float64 reference: top-1 agreement over every position. Matrices held for the
// quantized kernels (GGUF Q-types) run with int8 activations (kernels/qgemm.h), which moves these
// random models' near-tied logits more than bf16 activations do: on the GGUF cases 98.3% of
// positions agree through the quantized kernels against 99.5% with the same weights dequantized
// (DSPARK_QUANTIZED_KERNELS=0), so they get their own bound.
TEST(Reference, Bf16TopOneAgreement) {
  int agree[2] = {0, 0}, total[2] = {0, 0};
  for (const Reference& r : refs()) {
    auto m = Model::load(r.dir, LoadOptions{DType::BF16});
    const int q = m->layer(0).qkv.quantized() ? 1 : 0;
    int case_agree = 0, case_total = 0;
    for (int p = 0; p < r.P; ++p) {
      auto got = engine_logits(*m, r.prompts[size_t(p)]);
      for (size_t t = 0; t < r.prompts[size_t(p)].size(); ++t) {
        case_agree += argmax(got.data() + t * size_t(r.V), r.V) == argmax(r.row(p, int(t)), r.V);
        ++case_total;
      }
    }
    std::printf("%s: bf16 top-1 agreement %d / %d%s\n", r.dir.c_str(), case_agree, case_total,
                q ? " (quantized kernels)" : "");
    agree[q] += case_agree;
    total[q] += case_total;
  }
  EXPECT_GE(double(agree[0]), 0.99 * total[0]) << agree[0] << " of " << total[0];
  EXPECT_GE(double(agree[1]), 0.97 * total[1]) << agree[1] << " of " << total[1] << " through the quantized kernels";
}

// Several sequences of different lengths in one batch give what each gives alone, and so do
// a prompt prefilled in chunks and a batch mixing prefill rows with decode rows.
TEST(Reference, BatchedEqualsAlone) {
  const Reference& r = refs()[0];
  auto m = Model::load(r.dir, LoadOptions{DType::F32});
  const ModelConfig& c = m->config();
  std::vector<std::vector<float>> alone;
  for (const auto& p : r.prompts) alone.push_back(engine_logits(*m, p));

  KvCache kv(c.num_layers, c.num_kv_heads, c.head_dim, DType::F32, 4096);
  Forward fwd(*m, kv);
  std::vector<int> seqs;
  Batch b;
  for (size_t s = 0; s < r.prompts.size(); ++s) {
    seqs.push_back(kv.create_sequence());
    // Interleave: the first half of each prompt now, the rest in a second batch.
  }
  std::vector<std::vector<float>> got(r.prompts.size());
  for (int phase = 0; phase < 2; ++phase) {
    b.clear();
    std::vector<std::pair<size_t, size_t>> rows;  // (seq index, position) per output
    for (size_t s = 0; s < r.prompts.size(); ++s) {
      const auto& p = r.prompts[s];
      const size_t half = (p.size() + 1) / 2;
      const size_t a = phase == 0 ? 0 : half, e = phase == 0 ? half : p.size();
      for (size_t i = a; i < e; ++i) {
        b.add(p[i], int(i), seqs[s], true);
        rows.emplace_back(s, i);
      }
    }
    const ForwardOutput& out = fwd.run(b, {});
    for (size_t o = 0; o < rows.size(); ++o)
      got[rows[o].first].insert(got[rows[o].first].end(), out.logits_row(int(o)), out.logits_row(int(o)) + c.vocab_size);
  }
  for (size_t s = 0; s < r.prompts.size(); ++s) {
    ASSERT_EQ(got[s].size(), alone[s].size());
    for (size_t i = 0; i < got[s].size(); ++i)
      ASSERT_NEAR(got[s][i], alone[s][i], 2e-4f * (1 + std::abs(alone[s][i]))) << "sequence " << s << " value " << i;
  }
}

// With f32 weights a row's logits are bit-identical whether it is decoded alone or verified
// together with other rows of its sequence and of other sequences: speculative greedy output
// can then be token-identical to plain greedy decoding.
TEST(Reference, F32RowsAreBatchInvariant) {
  for (const Reference& r : refs()) {
    auto m = Model::load(r.dir, LoadOptions{DType::F32});
    const ModelConfig& c = m->config();
    const auto& prompt = r.prompts[2];   // 40 tokens
    const auto& other = r.prompts[3];    // 150 tokens, a second sequence
    const size_t split = 25;
    // Plain decoding: prefill the first `split` tokens, then one token per step.
    KvCache kv(c.num_layers, c.num_kv_heads, c.head_dim, DType::F32, 2048);
    Forward fwd(*m, kv);
    int seq = kv.create_sequence();
    Batch b;
    for (size_t i = 0; i < split; ++i) b.add(prompt[i], int(i), seq, false);
    fwd.run(b, {});
    std::vector<std::vector<float>> single;
    for (size_t i = split; i < prompt.size(); ++i) {
      b.clear();
      b.add(prompt[i], int(i), seq, true);
      const ForwardOutput& o = fwd.run(b, {});
      single.emplace_back(o.logits_row(0), o.logits_row(0) + c.vocab_size);
    }
    // Verification style: the same rows in one batch, next to another sequence's rows.
    KvCache kv2(c.num_layers, c.num_kv_heads, c.head_dim, DType::F32, 4096);
    Forward fwd2(*m, kv2);
    int s1 = kv2.create_sequence(), s2 = kv2.create_sequence();
    b.clear();
    for (size_t i = 0; i < split; ++i) b.add(prompt[i], int(i), s1, false);
    fwd2.run(b, {});
    b.clear();
    for (size_t i = 0; i < 37; ++i) b.add(other[i], int(i), s2, false);
    for (size_t i = split; i < prompt.size(); ++i) b.add(prompt[i], int(i), s1, true);
    for (size_t i = 37; i < 60; ++i) b.add(other[i], int(i), s2, false);
    const ForwardOutput& o = fwd2.run(b, {});
    ASSERT_EQ(size_t(o.n_out), single.size());
    for (size_t k = 0; k < single.size(); ++k)
      for (int v = 0; v < c.vocab_size; ++v)
        ASSERT_EQ(o.logits_row(int(k))[v], single[k][size_t(v)]) << r.dir << " row " << k << " token " << v;
  }
}

// RoPE at long positions: the engine's cos/sin tables (yarn with its attention factor, linear,
// dynamic, llama3 and plain) against the float64 reference at positions up to 131,071, where an
// angle computed in f32 would be off by up to 1e-2.
TEST(Reference, RopeTablesMatchAtLongPositions) {
  int checked = 0;
  for (const Reference& r : refs()) {
    if (r.rope_positions.empty()) continue;
    const ModelConfig c = ModelConfig::from_dir(r.dir);
    const Rope rope = c.rope();
    const size_t half = rope.inv_freq.size(), n = r.rope_positions.size();
    ASSERT_EQ(r.rope_cos.size(), n);
    std::vector<float> cos(n * half), sin(n * half);
    rope_tables(rope, r.rope_positions.data(), int(n), cos.data(), sin.data());
    double worst = 0;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(r.rope_cos[i].size(), half) << r.dir;
      for (size_t j = 0; j < half; ++j) {
        worst = std::max(worst, std::abs(double(cos[i * half + j]) - r.rope_cos[i][j]));
        worst = std::max(worst, std::abs(double(sin[i * half + j]) - r.rope_sin[i][j]));
      }
    }
    std::printf("%s: rope scaling '%s', scale %.6f, max |error| %.2e over positions up to %d\n", r.dir.c_str(),
                c.rope_scaling.type.c_str(), rope.scale, worst, r.rope_positions.back());
    EXPECT_LT(worst, 1e-6) << r.dir;
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "these reference cases carry no RoPE tables (the GGUF cases; the HF cases do)";
}

}  // namespace
}  // namespace dspark
