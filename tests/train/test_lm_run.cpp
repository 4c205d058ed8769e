// End-to-end trainer runs on a tiny generated corpus: exact resume, and clear errors for bad
// inputs (corrupt shards, a mismatched tokenizer, damaged checkpoints, impossible shapes).
#include <gtest/gtest.h>

#include "../error_of.h"

#include <filesystem>
#include <fstream>

#include "../data/test_util.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "data/corpus.h"
#include "data/tokenize_corpus.h"
#include "train/checkpoint.h"
#include "train/lm_trainer.h"

namespace dspark::train {
namespace {

namespace fs = std::filesystem;
using dspark::testing::TempDir;

// One tiny tokenized corpus (generated math problems) shared by the tests of this file.
struct TinyCorpus {
  TempDir dir;
  std::string tokenizer, tokens;
  TinyCorpus() {
    tokenizer = dir.write("tok/tokenizer.json", dspark::testing::tiny_tokenizer_json());
    data::CorpusOptions co;
    co.out_dir = dir.sub("corpus");
    co.domains = {"math"};
    co.max_mb = 0.15;
    co.use_packages = false;
    co.prompts_per_domain = 5;
    data::build_corpus(co);
    data::TokenizeOptions to;
    to.corpus_dir = co.out_dir;
    to.tokenizer_file = tokenizer;
    to.out_dir = dir.sub("tokens");
    to.threads = 1;
    data::tokenize_corpus(to);
    tokens = to.out_dir;
  }
};

TinyCorpus& corpus() {
  static TinyCorpus c;
  return c;
}

LmTrainConfig config(const std::string& out) {
  LmTrainConfig c;
  c.model = shape_config("tiny-qwen3");
  c.model.vocab_size = 320;
  c.model.max_position_embeddings = 128;
  c.tokenizer = corpus().tokenizer;
  c.data = corpus().tokens;
  c.out = out;
  c.steps = 6;
  c.batch = 2;
  c.accum = 2;
  c.seq_len = 32;
  c.warmup = 2;
  c.lr = 3e-3;
  c.eval_every = 3;
  c.eval_windows = 2;
  c.save_every = 100;
  c.threads = 1;
  c.precision = "f32";
  return c;
}

std::vector<uint8_t> weights_bytes(const std::string& run_dir) {
  auto ck = latest_checkpoint(run_dir);
  EXPECT_TRUE(ck.has_value());
  SafetensorsFile f((fs::path(*ck) / "weights.safetensors").string());
  std::vector<uint8_t> out;
  for (const auto& [name, t] : f.tensors()) out.insert(out.end(), t.data, t.data + t.nbytes);
  return out;
}

using dspark::testing::error_of;

TEST(LmRun, ResumeEqualsUninterrupted) {
  TempDir a, b;
  const double loss_a = train_lm(config(a.path()));
  LmTrainConfig first = config(b.path());
  first.stop_after = 3;
  train_lm(first);
  EXPECT_FALSE(fs::exists(fs::path(b.path()) / "model"));  // stopped early: no final model yet
  LmTrainConfig second = config(b.path());
  second.resume = true;
  const double loss_b = train_lm(second);
  EXPECT_EQ(loss_a, loss_b);
  EXPECT_EQ(weights_bytes(a.path()), weights_bytes(b.path()));
  EXPECT_TRUE(fs::exists(fs::path(b.path()) / "model" / "model.safetensors"));
  // The loss went down on this easy data.
  std::ifstream log(fs::path(a.path()) / "train_log.jsonl");
  double first_loss = -1, last = -1;
  for (std::string l; std::getline(log, l);) {
    auto j = nlohmann::json::parse(l);
    if (!j.contains("loss")) continue;
    if (first_loss < 0) first_loss = j["loss"].get<double>();
    last = j["loss"].get<double>();
  }
  EXPECT_LT(last, first_loss);
}

TEST(LmRun, CorruptShardIsNamed) {
  TempDir t;
  fs::copy(corpus().tokens, t.sub("tokens"), fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  const std::string shard = (fs::path(t.path()) / "tokens" / "math" / "train.bin").string();
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(10);
    f.put('\x7f');
  }
  LmTrainConfig c = config(t.sub("run"));
  c.data = (fs::path(t.path()) / "tokens").string();
  const std::string msg = error_of([&] { train_lm(c); });
  EXPECT_NE(msg.find("train.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("corrupt"), std::string::npos) << msg;
}

TEST(LmRun, MissingShardIsNamed) {
  TempDir t;
  fs::copy(corpus().tokens, t.sub("tokens"), fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  fs::remove(fs::path(t.path()) / "tokens" / "math" / "train.bin");
  LmTrainConfig c = config(t.sub("run"));
  c.data = (fs::path(t.path()) / "tokens").string();
  const std::string msg = error_of([&] { train_lm(c); });
  EXPECT_NE(msg.find("train.bin"), std::string::npos) << msg;
}

TEST(LmRun, MismatchedTokenizerIsRefused) {
  TempDir t;
  LmTrainConfig c = config(t.sub("run"));
  c.tokenizer = t.write("other/tokenizer.json", dspark::testing::tiny_tokenizer_json(310));
  const std::string msg = error_of([&] { train_lm(c); });
  EXPECT_NE(msg.find("is not the tokenizer"), std::string::npos) << msg;
}

TEST(LmRun, VocabularySmallerThanTokenizerIsRefused) {
  TempDir t;
  LmTrainConfig c = config(t.sub("run"));
  c.model.vocab_size = 100;
  const std::string msg = error_of([&] { train_lm(c); });
  EXPECT_NE(msg.find("vocab_size"), std::string::npos) << msg;
}

TEST(LmRun, SequenceLongerThanPositionsIsRefused) {
  TempDir t;
  LmTrainConfig c = config(t.sub("run"));
  c.seq_len = 256;
  const std::string msg = error_of([&] { train_lm(c); });
  EXPECT_NE(msg.find("max_position_embeddings"), std::string::npos) << msg;
}

TEST(LmRun, DamagedCheckpointIsNeverSilentlyReinitialised) {
  TempDir t;
  LmTrainConfig c = config(t.path());
  c.stop_after = 2;
  train_lm(c);
  auto ck = latest_checkpoint(t.path());
  ASSERT_TRUE(ck.has_value());
  const fs::path opt = fs::path(*ck) / "optimizer.pt";
  fs::resize_file(opt, fs::file_size(opt) / 2);
  LmTrainConfig r = config(t.path());
  r.resume = true;
  std::string msg = error_of([&] { train_lm(r); });
  EXPECT_NE(msg.find("optimizer.pt"), std::string::npos) << msg;
  EXPECT_NE(msg.find("corrupt or truncated"), std::string::npos) << msg;
  // Without --resume, the earlier run is not overwritten either.
  msg = error_of([&] { train_lm(config(t.path())); });
  EXPECT_NE(msg.find("--resume"), std::string::npos) << msg;
  // --resume with nothing to resume.
  TempDir empty;
  LmTrainConfig e = config(empty.path());
  e.resume = true;
  msg = error_of([&] { train_lm(e); });
  EXPECT_NE(msg.find("no checkpoint"), std::string::npos) << msg;
}

// A resumed run must train the same model on the same data: another --config, --data or --domains
// is refused naming the flag before any tensor is loaded (before, another config failed on a tensor
// shape and other data resumed silently). The data spelled differently is the same data.
TEST(LmRun, ResumeMustRepeatTheRunsConfigAndData) {
  TempDir t;
  LmTrainConfig c = config(t.sub("run"));
  c.steps = 2;
  c.eval_every = 0;
  c.stop_after = 1;
  train_lm(c);
  const std::string copy = t.sub("tokens");
  fs::copy(corpus().tokens, copy, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  const std::vector<std::pair<std::function<void(LmTrainConfig&)>, std::string>> cases = {
      {[](LmTrainConfig& r) { r.model.intermediate_size *= 2; }, "--config"},
      {[&](LmTrainConfig& r) { r.data = copy; }, "--data"},
      {[](LmTrainConfig& r) { r.domains = {"math"}; }, "--domains"},
  };
  for (const auto& [edit, named] : cases) {
    LmTrainConfig r = c;
    r.resume = true;
    r.stop_after = -1;
    edit(r);
    const std::string msg = error_of([&] { train_lm(r); });
    EXPECT_NE(msg.find(named), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.out), std::string::npos) << msg;
  }
  const std::string msg = error_of([&] {
    LmTrainConfig r = c;
    r.resume = true;
    r.stop_after = -1;
    r.model.intermediate_size *= 2;
    train_lm(r);
  });
  EXPECT_NE(msg.find("intermediate_size"), std::string::npos) << msg;
  LmTrainConfig same = c;
  same.resume = true;
  same.stop_after = -1;
  same.data = corpus().tokens + "/";
  EXPECT_EQ(error_of([&] { train_lm(same); }), "");
  EXPECT_TRUE(fs::exists(fs::path(c.out) / "model" / "model.safetensors"));
}

}  // namespace
}  // namespace dspark::train
