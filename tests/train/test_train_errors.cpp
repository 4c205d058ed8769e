// Refusals of the trainers (issue 18, "Hardening"): every flag out of range, an unfinished dataset,
// a dataset of another target and a resume that differs from the run it resumes stop the run with
// an error naming the flag, field or file, through `dspark train` (exit status 1, nothing written)
// and through the library (Error), before any training.
#include <gtest/gtest.h>

#include "../error_of.h"
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "core/crc32.h"
#include "core/error.h"
#include "datagen/hidden_dataset.h"
#include "drafter_fixtures.h"
#include "train/checkpoint.h"
#include "train/drafter_trainer.h"
#include "train/lm_trainer.h"

namespace dspark::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using dspark::testing::slurp;
using dspark::testing::TempDir;
using dspark::train::testing::pipeline;
using dspark::train::testing::step_losses;
using dspark::train::testing::tiny_config;

using dspark::testing::error_of;

struct Exit {
  int status = -1;  // the exit status; -1 when the process did not exit (a crash)
  std::string err;  // its stderr
};

using Flags = std::map<std::string, std::string>;

std::string command_line(const std::string& command, const Flags& flags) {
  std::string cmd = std::string(DSPARK_TRAIN_BIN) + " " + command;
  for (const auto& [name, value] : flags) cmd += " --" + name + (value.empty() ? "" : " '" + value + "'");
  return cmd;
}

// `dspark train <command> [flags]`, each flag "--name value" (an empty value: a switch).
Exit run_train(const std::string& command, const Flags& flags) {
  TempDir t;
  const std::string err = t.path() + "/stderr";
  const int rc = std::system((command_line(command, flags) + " > /dev/null 2> " + err).c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, slurp(err)};
}

// Several runs at once (each start loads libtorch, most of a refused run's time).
std::vector<Exit> run_all(const std::vector<std::pair<std::string, Flags>>& runs) {
  TempDir t;
  std::string script;
  for (size_t i = 0; i < runs.size(); ++i) {
    const std::string base = t.path() + "/" + std::to_string(i);
    script += "(" + command_line(runs[i].first, runs[i].second) + " > /dev/null 2> " + base + ".err; echo $? > " +
              base + ".rc) &\n";
  }
  script += "wait\n";
  const std::string path = t.write("runs.sh", script);
  EXPECT_EQ(std::system(("sh " + path).c_str()), 0);
  std::vector<Exit> out;
  for (size_t i = 0; i < runs.size(); ++i) {
    const std::string base = t.path() + "/" + std::to_string(i);
    const std::string rc = slurp(base + ".rc");
    // The shell reports a crash as 128 + the signal: only 1 is a refusal.
    out.push_back({rc.empty() ? -1 : std::stoi(rc), slurp(base + ".err")});
  }
  return out;
}

// The flags of a tiny DSpark run on the shared pipeline into `out`, with `over` replacing or adding.
std::map<std::string, std::string> drafter_flags(const std::string& out, const std::map<std::string, std::string>& over) {
  Flags f = {
      {"method", "dspark"}, {"target", pipeline().target}, {"data", pipeline().hidden}, {"out", out},
      {"layers", "1"},      {"drafts", "4"},               {"markov-rank", "8"},       {"anchors", "16"},
      {"steps", "1"},       {"batch", "4"},                {"threads", "1"},           {"precision", "f32"}};
  for (const auto& [k, v] : over) f[k] = v;
  return f;
}

// A copy of the pipeline's hidden-state dataset with its manifest edited by `edit`.
std::string edited_dataset(const TempDir& t, const std::function<void(json&)>& edit) {
  const std::string dir = (fs::path(t.path()) / "hidden").string();
  fs::copy(pipeline().hidden, dir, fs::copy_options::recursive);
  const std::string manifest = dir + "/manifest.json";
  json m = json::parse(slurp(manifest));
  edit(m);
  t.write("hidden/manifest.json", m.dump(1));
  return dir;
}

bool has_run_output(const std::string& out) {
  return fs::exists(fs::path(out) / "drafter") || latest_checkpoint(out).has_value();
}

TEST(TrainErrors, DrafterFlagsOutOfRangeAreRefusedNamingTheFlag) {
  // Each: the flag changed, its value, the flag the message must name.
  // Each: the flags changed, the flag the message must name. The library test below covers the
  // rest of the ranges; these are the CLI's own parsing of them.
  const std::vector<std::pair<Flags, std::string>> cases = {
      {{{"batch", "0"}}, "--batch"},  // trained with loss 0 and wrote a drafter before
      {{{"anchors", "0"}}, "--anchors"},
      {{{"validation-fraction", "1.5"}}, "--validation-fraction"},
      {{{"validation-fraction", "1"}}, "--validation-fraction"},  // [0, 1): nothing left to train on
      {{{"lr", "nan"}}, "--lr"},  // libtorch's message before, naming no flag
      {{{"lr", "inf"}}, "--lr"},
      {{{"lr", "0"}}, "--lr"},
      {{{"markov-head", "lstm"}}, "--markov-head"},
      {{{"stop-after", "0"}}, "--stop-after"},
      {{{"world-size", "2"}, {"rank", "2"}}, "--rank"},
  };
  std::vector<std::unique_ptr<TempDir>> outs;
  std::vector<std::pair<std::string, Flags>> runs;
  for (const auto& [flags, named] : cases) {
    outs.push_back(std::make_unique<TempDir>());
    runs.push_back({"drafter", drafter_flags(outs.back()->path(), flags)});
  }
  const std::vector<Exit> exits = run_all(runs);
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string what = command_line("drafter", cases[i].first);
    EXPECT_EQ(exits[i].status, 1) << what << ":\n" << exits[i].err;
    EXPECT_NE(exits[i].err.find(cases[i].second), std::string::npos) << what << ": " << exits[i].err;
    EXPECT_FALSE(has_run_output(outs[i]->path())) << what << " wrote a run";
  }
}

TEST(TrainErrors, DrafterConfigOutOfRangeIsRefusedByTheLibraryToo) {
  // train_drafter itself checks what the flags set (other callers than the CLI), before any work.
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<std::pair<std::function<void(DrafterTrainConfig&)>, std::string>> cases = {
      {[](DrafterTrainConfig& c) { c.batch = 0; }, "--batch"},
      {[](DrafterTrainConfig& c) { c.anchors = 0; }, "--anchors"},
      {[](DrafterTrainConfig& c) { c.validation_fraction = 1.5; }, "--validation-fraction"},
      {[](DrafterTrainConfig& c) { c.validation_fraction = 1.0; }, "--validation-fraction"},
      {[=](DrafterTrainConfig& c) { c.validation_fraction = nan; }, "--validation-fraction"},
      {[=](DrafterTrainConfig& c) { c.lr = nan; }, "--lr"},
      {[=](DrafterTrainConfig& c) { c.lr = inf; }, "--lr"},
      {[](DrafterTrainConfig& c) { c.lr = 0; }, "--lr"},
      {[=](DrafterTrainConfig& c) { c.clip = nan; }, "--clip"},
      {[](DrafterTrainConfig& c) { c.decay = 0; }, "--decay"},
      {[](DrafterTrainConfig& c) { c.ce_weight = -1; }, "--ce"},
      {[](DrafterTrainConfig& c) { c.markov_head = "lstm"; }, "--markov-head"},
      {[](DrafterTrainConfig& c) { c.save_every = 0; }, "--save-every"},
      {[](DrafterTrainConfig& c) {
         c.batch = 3;
         c.world_size = 2;
       }, "--world-size"},
      {[](DrafterTrainConfig& c) { c.method = SpecMethod::Ngram; }, "--method"},
  };
  for (const auto& [edit, named] : cases) {
    TempDir out;
    DrafterTrainConfig c = tiny_config(SpecMethod::DSpark, out.path());
    edit(c);
    const std::string msg = error_of([&] { train_drafter(c); });
    EXPECT_NE(msg.find(named), std::string::npos) << msg;
    EXPECT_FALSE(has_run_output(out.path())) << msg;
  }
}

TEST(TrainErrors, UnfinishedDatasetIsRefusedNamingTheManifestField) {
  TempDir t, out;
  const std::string data = edited_dataset(t, [](json& m) { m["complete"] = false; });
  const std::string manifest = data + "/manifest.json";
  DrafterTrainConfig c = tiny_config(SpecMethod::DSpark, out.path());
  c.data = data;
  std::string msg = error_of([&] { train_drafter(c); });
  EXPECT_NE(msg.find(manifest), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"complete\""), std::string::npos) << msg;
  const Exit e = run_train("drafter", drafter_flags(out.path(), {{"data", data}}));
  EXPECT_EQ(e.status, 1) << e.err;
  EXPECT_NE(e.err.find(manifest), std::string::npos) << e.err;
  EXPECT_NE(e.err.find("\"complete\""), std::string::npos) << e.err;
  EXPECT_FALSE(has_run_output(out.path()));
}

TEST(TrainErrors, DatasetOfAnotherTargetConfigIsRefused) {
  // The dataset records the CRC32 of the target's config.json (dspark datagen hidden does).
  TempDir t;
  const std::string config = pipeline().target + "/config.json";
  const std::string data = edited_dataset(t, [&](json& m) {
    m["target"]["config_crc32"] = crc32_hex(crc32_file(config));
  });
  const std::string manifest = data + "/manifest.json";
  {
    TempDir out;  // the recorded target trains
    DrafterTrainConfig c = tiny_config(SpecMethod::DSpark, out.path());
    c.data = data;
    c.steps = 1;
    EXPECT_EQ(error_of([&] { train_drafter(c); }), "");
  }
  // Another target: the same weights, a config.json that differs (another rms_norm_eps).
  const std::string other = (fs::path(t.path()) / "other").string();
  fs::copy(pipeline().target, other, fs::copy_options::recursive);
  json cfg = json::parse(slurp(config));
  cfg["rms_norm_eps"] = 1e-5;
  t.write("other/config.json", cfg.dump(2));
  TempDir out;
  DrafterTrainConfig c = tiny_config(SpecMethod::DSpark, out.path());
  c.data = data;
  c.target = other;
  const std::string msg = error_of([&] { train_drafter(c); });
  EXPECT_NE(msg.find(manifest), std::string::npos) << msg;
  EXPECT_NE(msg.find("target.config_crc32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--target"), std::string::npos) << msg;
  const Exit e = run_train("drafter", drafter_flags(out.path(), {{"data", data}, {"target", other}}));
  EXPECT_EQ(e.status, 1) << e.err;
  EXPECT_NE(e.err.find("target.config_crc32"), std::string::npos) << e.err;
  EXPECT_FALSE(has_run_output(out.path()));
}

TEST(TrainErrors, DrafterResumeMustRepeatTheRunsDataMethodAndShape) {
  TempDir whole, run, t;
  train_drafter(tiny_config(SpecMethod::DSpark, whole.path()));
  DrafterTrainConfig first = tiny_config(SpecMethod::DSpark, run.path());
  first.stop_after = 1;
  train_drafter(first);
  const std::string copy = edited_dataset(t, [](json&) {});  // the same samples at another path
  // Each: how the resumed run differs, the flag the message must name. Before, another --data
  // resumed silently and another method, depth or rank failed on a tensor name or shape.
  const std::vector<std::pair<std::function<void(DrafterTrainConfig&)>, std::string>> cases = {
      {[&](DrafterTrainConfig& c) { c.data = copy; }, "--data"},
      {[](DrafterTrainConfig& c) { c.method = SpecMethod::DFlash; }, "--method"},
      {[](DrafterTrainConfig& c) { c.layers = 2; }, "--layers"},
      {[](DrafterTrainConfig& c) { c.markov_rank = 4; }, "--markov-rank"},
      {[](DrafterTrainConfig& c) { c.drafts = 3; }, "--drafts"},
      {[](DrafterTrainConfig& c) { c.markov_head = "gated"; }, "--markov-head"},
  };
  for (const auto& [edit, named] : cases) {
    DrafterTrainConfig c = tiny_config(SpecMethod::DSpark, run.path());
    c.resume = true;
    edit(c);
    const std::string msg = error_of([&] { train_drafter(c); });
    EXPECT_NE(msg.find(named), std::string::npos) << msg;
    EXPECT_NE(msg.find(run.path()), std::string::npos) << msg;
  }
  const Exit e = run_train("drafter", drafter_flags(run.path(), {{"resume", ""}, {"layers", "2"}, {"steps", "3"}}));
  EXPECT_EQ(e.status, 1) << e.err;
  EXPECT_NE(e.err.find("--layers"), std::string::npos) << e.err;
  EXPECT_FALSE(fs::exists(fs::path(run.path()) / "drafter"));
  // The same run resumes (the data spelled with a trailing separator is the same data) and ends
  // where the uninterrupted run ends.
  DrafterTrainConfig same = tiny_config(SpecMethod::DSpark, run.path());
  same.resume = true;
  same.data = pipeline().hidden + "/";
  EXPECT_EQ(error_of([&] { train_drafter(same); }), "");
  EXPECT_TRUE(fs::exists(fs::path(run.path()) / "drafter" / "model.safetensors"));
  EXPECT_EQ(step_losses(run.path()), step_losses(whole.path()));
}

TEST(TrainErrors, LmAndEvalFlagsOutOfRangeAreRefusedNamingTheFlag) {
  // The flags are read before anything is opened, so no corpus is needed to be refused.
  TempDir t;
  const Flags lm = {{"config", t.path() + "/none.json"}, {"tokenizer", t.path() + "/tokenizer.json"},
                   {"data", t.path() + "/tokens"}, {"out", t.path() + "/run"}};
  const Flags eval = {{"model", pipeline().target}, {"data", t.path()}};
  auto with = [](Flags f, const std::string& flag, const std::string& value) {
    f[flag] = value;
    return f;
  };
  // Each: the command and its flags, the flag the message must name.
  const std::vector<std::tuple<std::string, Flags, std::string>> cases = {
      {"lm", with(lm, "batch", "0"), "--batch"},
      {"lm", with(lm, "seq-len", "1"), "--seq-len"},
      {"lm", with(lm, "lr", "nan"), "--lr"},
      {"lm", with(lm, "save-every", "0"), "--save-every"},  // step % 0 before
      {"lm", with(lm, "threads", "5000"), "--threads"},
      {"eval", with(eval, "windows", "0"), "--windows"},
      {"eval", with(eval, "seq-len", "-4"), "--seq-len"},
      {"bench-matmul", {{"m", "0"}}, "--m"},
  };
  std::vector<std::pair<std::string, Flags>> runs;
  for (const auto& [command, flags, named] : cases) runs.push_back({command, flags});
  const std::vector<Exit> exits = run_all(runs);
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string what = command_line(runs[i].first, runs[i].second);
    EXPECT_EQ(exits[i].status, 1) << what << ":\n" << exits[i].err;
    EXPECT_NE(exits[i].err.find(std::get<2>(cases[i])), std::string::npos) << what << ": " << exits[i].err;
  }
  EXPECT_FALSE(fs::exists(t.path() + "/run"));
}

TEST(TrainErrors, LmConfigOutOfRangeIsRefusedByTheLibraryToo) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<std::pair<std::function<void(LmTrainConfig&)>, std::string>> cases = {
      {[](LmTrainConfig& c) { c.batch = 0; }, "--batch"},
      {[](LmTrainConfig& c) { c.accum = 0; }, "--accum"},
      {[](LmTrainConfig& c) { c.seq_len = 1; }, "--seq-len"},
      {[](LmTrainConfig& c) { c.seq_len = 1 << 20; }, "max_position_embeddings"},
      {[=](LmTrainConfig& c) { c.lr = nan; }, "--lr"},
      {[=](LmTrainConfig& c) { c.lr = inf; }, "--lr"},
      {[](LmTrainConfig& c) { c.lr = -1; }, "--lr"},
      {[=](LmTrainConfig& c) { c.clip = nan; }, "--clip"},
      {[=](LmTrainConfig& c) { c.weight_decay = inf; }, "--weight-decay"},
      {[](LmTrainConfig& c) { c.save_every = 0; }, "--save-every"},
      {[](LmTrainConfig& c) { c.eval_windows = 0; }, "--eval-windows"},
      {[](LmTrainConfig& c) { c.stop_after = 0; }, "--stop-after"},
      {[](LmTrainConfig& c) { c.precision = "fp16"; }, "--precision"},
  };
  TempDir t;
  for (const auto& [edit, named] : cases) {
    LmTrainConfig c;
    c.model = shape_config("tiny-qwen3");
    c.model.max_position_embeddings = 128;
    c.tokenizer = t.path() + "/tokenizer.json";
    c.data = t.path() + "/tokens";
    c.out = t.path() + "/run";
    c.seq_len = 32;
    edit(c);
    const std::string msg = error_of([&] { train_lm(c); });
    EXPECT_NE(msg.find(named), std::string::npos) << msg;
  }
  EXPECT_FALSE(fs::exists(t.path() + "/run"));
  std::string msg = error_of([] { evaluate_lm(pipeline().target, "unused", "validation", 0, 8); });
  EXPECT_NE(msg.find("--windows"), std::string::npos) << msg;
  msg = error_of([] { evaluate_lm(pipeline().target, "unused", "validation", 1, 1 << 24); });
  EXPECT_NE(msg.find("--seq-len"), std::string::npos) << msg;
  EXPECT_NE(msg.find("max_position_embeddings"), std::string::npos) << msg;
}

}  // namespace
}  // namespace dspark::train
