// Hidden-state extraction: stored slots == Forward taps of the sequence alone, the manifest,
// resume and repair, and the reader's errors.
#include <gtest/gtest.h>

#include "../error_of.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/crc32.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "datagen/hidden.h"
#include "datagen/hidden_dataset.h"
#include "datagen/regen_file.h"
#include "fixtures.h"
#include "model/forward.h"
#include "core/rng.h"

namespace dspark::testing {
namespace {

namespace fs = std::filesystem;
using datagen::HiddenDataset;
using datagen::HiddenOptions;
using json = nlohmann::json;

// Regenerated-style records of assorted lengths (one longer than a forward pass in the tests).
std::vector<datagen::RegenRecord> make_records(int n, uint64_t seed) {
  Rng rng(seed);
  std::vector<datagen::RegenRecord> out;
  const int lengths[] = {5, 23, 1, 57, 12, 31, 8, 40, 2, 17};
  for (int i = 0; i < n; ++i) {
    datagen::RegenRecord r;
    r.id = 100 + i;
    const int T = lengths[i % 10];
    r.prompt_tokens = T / 2;
    for (int t = 0; t < T; ++t) {
      r.input_ids.push_back(int32_t(rng.next() % 303));
      r.loss_mask.push_back(t >= r.prompt_tokens ? 1 : 0);
    }
    r.finish_reason = "length";
    out.push_back(r);
  }
  return out;
}

std::string write_regen(const TempDir& d, const std::vector<datagen::RegenRecord>& recs) {
  std::string text;
  for (const auto& r : recs) text += datagen::regen_record_line(r) + "\n";
  return d.write("regen.jsonl", text);
}

HiddenOptions quiet(std::vector<int> layers, int shard = 3, int max_batch_tokens = 40) {
  HiddenOptions o;
  o.layer_ids = std::move(layers);
  o.shard_size = shard;
  o.max_batch_tokens = max_batch_tokens;
  o.progress = false;
  o.log = [](const std::string&) {};
  return o;
}

using dspark::testing::error_of;

uint16_t bf16(float x) { return f32_to_bf16(x); }

TEST(DatagenHidden, StoredSlotsEqualForwardTapsOfTheSequenceAlone) {
  TempDir d;
  auto model = tiny_model(DType::F32);
  const ModelConfig& c = model->config();
  const auto recs = make_records(10, 1);
  const std::string regen = write_regen(d, recs);
  const std::vector<int> layers = {0, 2, -1};
  auto st = datagen::extract_hidden(*model, regen, d.path() + "/hs", quiet(layers));
  EXPECT_EQ(st.written, 10);
  EXPECT_GT(st.forwards, 1);
  EXPECT_LT(st.forwards, 10) << "sequences are packed into shared passes";

  HiddenDataset ds = HiddenDataset::open(d.path() + "/hs");
  ASSERT_EQ(ds.size(), 10u);
  EXPECT_EQ(ds.layer_ids(), layers);
  EXPECT_EQ(ds.speculators_layer_ids(), (std::vector<int>{1, 3, 0}));
  EXPECT_EQ(ds.hidden_size(), c.hidden_size);
  const int64_t H = c.hidden_size;
  for (size_t i = 0; i < recs.size(); ++i) {
    const auto& r = recs[i];
    const HiddenDataset::Sample s = ds.load(i);
    EXPECT_EQ(s.id, r.id);
    EXPECT_EQ(s.tokens, r.input_ids);
    EXPECT_EQ(s.loss_mask, r.loss_mask);
    ASSERT_EQ(s.layers, 3);
    ASSERT_EQ(s.hidden, H);
    // The reference: the sequence alone, one pass, in a fresh cache.
    KvCache kv(c.num_layers, c.num_kv_heads, c.head_dim, DType::F32, 256);
    Forward fwd(*model, kv);
    const int seq = kv.create_sequence();
    Batch b;
    for (size_t t = 0; t < r.input_ids.size(); ++t) b.add(r.input_ids[t], int32_t(t), seq, true);
    ForwardRequest req;
    req.tap_layers = layers;
    req.logits = false;
    req.final_hidden = true;
    const ForwardOutput& o = fwd.run(b, req);
    int mismatches = 0;
    for (int64_t t = 0; t < int64_t(r.input_ids.size()); ++t) {
      for (int l = 0; l <= 3; ++l) {
        const float* want = l < 3 ? o.tap(int(t), l) : o.final_row(int(t));
        const float* got = s.at(t, l);
        for (int64_t h = 0; h < H; ++h) mismatches += bf16(want[h]) != bf16(got[h]);
      }
    }
    EXPECT_EQ(mismatches, 0) << "sample " << i << " (" << r.input_ids.size() << " tokens)";
  }

  // Layout on disk: shards of 3, the Speculators tensor names, dtypes and metadata.
  EXPECT_TRUE(fs::exists(d.path() + "/hs/shard-00003/sample-000009.safetensors"));
  SafetensorsFile f(d.path() + "/hs/shard-00001/sample-000004.safetensors");
  EXPECT_EQ(f.tensors().at("hidden_states").dtype, DType::BF16);
  EXPECT_EQ(f.tensors().at("hidden_states").shape, (std::vector<int64_t>{12, 4, H}));
  EXPECT_EQ(f.tensors().at("token_ids").dtype, DType::I64);
  EXPECT_EQ(f.tensors().at("loss_mask").dtype, DType::U8);
  EXPECT_EQ(f.metadata().at("id"), "104");
  EXPECT_EQ(f.metadata().at("layer_ids"), "[0,2,-1]");
  EXPECT_EQ(f.metadata().at("speculators_layer_ids"), "[1,3,0]");

  // The manifest: CRCs of the files, counts, both layer conventions, the last slot.
  const json m = json::parse(slurp(d.path() + "/hs/manifest.json"));
  EXPECT_EQ(m["complete"], true);
  EXPECT_EQ(m["speculators_layer_ids"], json({1, 3, 0}));
  EXPECT_EQ(m["final_slot"], "final_norm");
  EXPECT_EQ(m["hidden_size"], H);
  ASSERT_EQ(m["samples"].size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    const json& e = m["samples"][i];
    EXPECT_EQ(e["crc32"], crc32_hex(crc32_file(d.path() + "/hs/" + e["file"].get<std::string>())));
    EXPECT_EQ(e["tokens"], recs[i].input_ids.size());
    EXPECT_EQ(e["loss_tokens"], recs[i].loss_tokens());
    EXPECT_EQ(e["id"], recs[i].id);
  }
}

// One token per pass (every sequence split over many passes) and everything packed into one
// pass store identical files: rows land in the right sample and position (f32 is batch-invariant).
TEST(DatagenHidden, PackingDoesNotMixUpRows) {
  TempDir d;
  auto model = tiny_model(DType::F32);
  const auto recs = make_records(7, 2);
  const std::string regen = write_regen(d, recs);
  datagen::extract_hidden(*model, regen, d.path() + "/a", quiet({1}, 256, 1));
  datagen::extract_hidden(*model, regen, d.path() + "/b", quiet({1}, 256, 2048));
  for (int i = 0; i < 7; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "/shard-00000/sample-%06d.safetensors", i);
    EXPECT_EQ(slurp(d.path() + "/a" + name), slurp(d.path() + "/b" + name)) << name;
  }
}

TEST(DatagenHidden, ResumeSkipsDoneSamplesAndRepairsDamagedOnes) {
  TempDir d;
  auto model = tiny_model(DType::F32);
  const auto recs = make_records(8, 3);
  const std::string regen = write_regen(d, recs);
  const std::string out = d.path() + "/hs";
  HiddenOptions o = quiet({0, 1});
  o.limit = 5;  // an interrupted run: samples 0-4 done
  auto st = datagen::extract_hidden(*model, regen, out, o);
  EXPECT_EQ(st.written, 5);
  EXPECT_EQ(json::parse(slurp(out + "/manifest.json"))["complete"], false);
  o.limit = -1;
  st = datagen::extract_hidden(*model, regen, out, o);
  EXPECT_EQ(st.skipped, 5);
  EXPECT_EQ(st.written, 3);
  EXPECT_EQ(st.repaired, 0);
  const std::string f1 = out + "/shard-00000/sample-000001.safetensors";
  const std::string f6 = out + "/shard-00002/sample-000006.safetensors";
  const std::string good1 = slurp(f1), good6 = slurp(f6);

  // Damage one sample (a flipped byte in its data), delete another.
  std::string bad = good1;
  bad[bad.size() - 3] ^= 0x40;
  std::ofstream(f1, std::ios::binary) << bad;
  fs::remove(f6);
  EXPECT_NE(error_of([&] { HiddenDataset::open(out); }).find(f6), std::string::npos);
  st = datagen::extract_hidden(*model, regen, out, o);
  EXPECT_EQ(st.skipped, 6);
  EXPECT_EQ(st.repaired, 2);
  EXPECT_EQ(st.written, 2);
  EXPECT_EQ(slurp(f1), good1);
  EXPECT_EQ(slurp(f6), good6);
  HiddenDataset ds = HiddenDataset::open(out);
  EXPECT_EQ(ds.size(), 8u);
  ds.verify();

  // A changed source record makes its sample stale.
  auto changed = recs;
  changed[2].input_ids[0] = (changed[2].input_ids[0] + 1) % 303;
  write_regen(d, changed);
  st = datagen::extract_hidden(*model, regen, out, o);
  EXPECT_EQ(st.repaired, 1);
  EXPECT_EQ(HiddenDataset::open(out).load(2).tokens, changed[2].input_ids);

  // Other layers into the same directory are refused, naming the manifest.
  const std::string err = error_of([&] { datagen::extract_hidden(*model, regen, out, quiet({0, 2})); });
  EXPECT_NE(err.find(out + "/manifest.json"), std::string::npos) << err;
  EXPECT_NE(err.find("layer"), std::string::npos) << err;
}

TEST(DatagenHidden, ReaderErrorsNameTheFile) {
  TempDir d;
  auto model = tiny_model(DType::F32);
  const auto recs = make_records(4, 4);
  const std::string regen = write_regen(d, recs);
  const std::string out = d.path() + "/hs";
  EXPECT_NE(error_of([&] { HiddenDataset::open(out); }).find(out + "/manifest.json"), std::string::npos);
  datagen::extract_hidden(*model, regen, out, quiet({1}));
  const std::string f2 = out + "/shard-00000/sample-000002.safetensors";
  const std::string good = slurp(f2);

  // CRC mismatch.
  std::string bad = good;
  bad[bad.size() - 1] ^= 1;
  std::ofstream(f2, std::ios::binary) << bad;
  HiddenDataset ds = HiddenDataset::open(out);
  std::string err = error_of([&] { ds.load(2); });
  EXPECT_NE(err.find(f2), std::string::npos) << err;
  EXPECT_NE(err.find("CRC32 mismatch"), std::string::npos) << err;
  err = error_of([&] { ds.verify(); });
  EXPECT_NE(err.find(f2), std::string::npos) << err;
  EXPECT_NO_THROW(ds.load(1));

  // Shape mismatch, with a CRC that matches (the manifest updated to the new file).
  {
    SafetensorsFile orig(out + "/shard-00000/sample-000001.safetensors");
    const TensorView& hs = orig.tensors().at("hidden_states");
    SafetensorsWriter w;
    const int64_t T = hs.shape[0], H = hs.shape[2];
    w.add("hidden_states", DType::BF16, {T, 1, 2 * H}, hs.data);  // same bytes, wrong shape
    w.add("token_ids", DType::I64, {T}, orig.tensors().at("token_ids").data);
    w.add("loss_mask", DType::U8, {T}, orig.tensors().at("loss_mask").data);
    w.write(f2 + ".new");
  }
  fs::rename(f2 + ".new", f2);
  json m = json::parse(slurp(out + "/manifest.json"));
  m["samples"][2]["crc32"] = crc32_hex(crc32_file(f2));
  m["samples"][2]["tokens"] = m["samples"][1]["tokens"];
  m["samples"][2]["loss_tokens"] = m["samples"][1]["loss_tokens"];
  std::ofstream(out + "/manifest.json") << m.dump();
  err = error_of([&] { HiddenDataset::open(out).load(2); });
  EXPECT_NE(err.find(f2), std::string::npos) << err;
  EXPECT_NE(err.find("shape"), std::string::npos) << err;

  // A missing sample file, named at open.
  fs::remove(f2);
  err = error_of([&] { HiddenDataset::open(out); });
  EXPECT_NE(err.find(f2), std::string::npos) << err;
  EXPECT_NE(err.find("missing"), std::string::npos) << err;

  // A manifest without a required field.
  m.erase("layer_ids");
  std::ofstream(out + "/manifest.json") << m.dump();
  err = error_of([&] { HiddenDataset::open(out); });
  EXPECT_NE(err.find(out + "/manifest.json"), std::string::npos) << err;
  EXPECT_NE(err.find("layer_ids"), std::string::npos) << err;
}

TEST(DatagenHidden, BadInputsAreErrors) {
  TempDir d;
  auto model = tiny_model(DType::F32);
  const std::string regen = write_regen(d, make_records(2, 5));
  EXPECT_NE(error_of([&] { datagen::extract_hidden(*model, regen, d.path() + "/x", quiet({3})); }).find("outside"),
            std::string::npos);
  EXPECT_NE(error_of([&] { datagen::extract_hidden(*model, regen, d.path() + "/x", quiet({1, 1})); }).find("twice"),
            std::string::npos);
  auto recs = make_records(2, 5);
  recs[1].input_ids[0] = 9999;
  const std::string big = write_regen(d, recs);
  const std::string err = error_of([&] { datagen::extract_hidden(*model, big, d.path() + "/y", quiet({1})); });
  EXPECT_NE(err.find(big), std::string::npos) << err;
  EXPECT_NE(err.find("vocabulary"), std::string::npos) << err;
}

// Issue 18: a rerun with another --data file (3 samples before, 1 record now) used to exit 0 with
// a manifest saying complete and 3 samples, 2 of them stale samples of the old source.
TEST(DatagenHidden, RerunWithAnotherSourceIsRefusedNamingBoth) {
  TempDir d;
  auto model = tiny_model(DType::F32);
  const std::string out = d.path() + "/hs", manifest = out + "/manifest.json";
  const std::string first = write_regen(d, make_records(3, 6));
  datagen::extract_hidden(*model, first, out, quiet({1}));
  const std::string before = slurp(manifest);
  EXPECT_EQ(json::parse(before)["source"]["records"], 3);
  const std::string text = slurp(first);
  EXPECT_EQ(json::parse(before)["source"]["crc32"], crc32_hex(crc32_bytes(text.data(), text.size())));

  const std::string other = d.write("other.jsonl", datagen::regen_record_line(make_records(1, 7)[0]) + "\n");
  const std::string err = error_of([&] { datagen::extract_hidden(*model, other, out, quiet({1})); });
  EXPECT_NE(err.find(manifest), std::string::npos) << err;
  EXPECT_NE(err.find(first), std::string::npos) << err;
  EXPECT_NE(err.find(other), std::string::npos) << err;
  EXPECT_EQ(slurp(manifest), before) << "a refused run writes nothing";
  HiddenDataset ds = HiddenDataset::open(out);
  EXPECT_EQ(ds.size(), 3u);
  ds.verify();

  // The same records at another path are the same source (the CRC says so): a resume.
  const std::string copy = d.write("copy.jsonl", slurp(first));
  const auto st = datagen::extract_hidden(*model, copy, out, quiet({1}));
  EXPECT_EQ(st.skipped, 3);
  EXPECT_EQ(st.written, 0);
  EXPECT_EQ(HiddenDataset::open(out).size(), 3u);
}

// The same path rewritten with 1 record: the source changed in place, so every sample is checked
// against its record; those past the new source are dropped (files too), a changed one recomputed.
TEST(DatagenHidden, SourceShrunkInPlaceKeepsNoStaleSample) {
  TempDir d;
  auto model = tiny_model(DType::F32);
  const std::string out = d.path() + "/hs";
  const std::string regen = write_regen(d, make_records(3, 6));
  datagen::extract_hidden(*model, regen, out, quiet({1}));
  const auto now = make_records(1, 7);
  write_regen(d, now);
  const auto st = datagen::extract_hidden(*model, regen, out, quiet({1}));
  EXPECT_EQ(st.samples, 1);
  EXPECT_EQ(st.repaired, 1);
  EXPECT_EQ(st.written, 1);
  const json m = json::parse(slurp(out + "/manifest.json"));
  EXPECT_EQ(m["num_samples"], 1);
  EXPECT_EQ(m["samples"].size(), 1u);
  EXPECT_EQ(m["complete"], true);
  EXPECT_EQ(m["source"]["records"], 1);
  EXPECT_FALSE(fs::exists(out + "/shard-00000/sample-000001.safetensors"));
  EXPECT_FALSE(fs::exists(out + "/shard-00000/sample-000002.safetensors"));
  HiddenDataset ds = HiddenDataset::open(out);
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds.load(0).tokens, now[0].input_ids);

  // A grown source (regenerate resumed): the old samples stay, the new records are computed.
  write_regen(d, make_records(4, 7));
  const auto grown = datagen::extract_hidden(*model, regen, out, quiet({1}));
  EXPECT_EQ(grown.skipped, 1);
  EXPECT_EQ(grown.written, 3);
  EXPECT_EQ(HiddenDataset::open(out).size(), 4u);
}

// The reader refuses a manifest whose samples disagree with its header: what the old writer left
// after the 3-then-1 rerun (complete, 3 samples, a source of 1 record) never reaches the trainer.
TEST(DatagenHidden, ReaderRefusesSamplesThatDisagreeWithTheHeader) {
  TempDir d;
  auto model = tiny_model(DType::F32);
  const std::string out = d.path() + "/hs", manifest = out + "/manifest.json";
  datagen::extract_hidden(*model, write_regen(d, make_records(3, 6)), out, quiet({1}));
  const json good = json::parse(slurp(manifest));
  auto open_with = [&](const std::function<void(json&)>& edit) {
    json m = good;
    edit(m);
    std::ofstream(manifest) << m.dump();
    return error_of([&] { HiddenDataset::open(out); });
  };
  std::string err = open_with([](json& m) { m["source"]["records"] = 1; });
  EXPECT_NE(err.find(manifest), std::string::npos) << err;
  EXPECT_NE(err.find("past the source's 1 records"), std::string::npos) << err;
  err = open_with([](json& m) {  // the stale samples cut from the list, the header still claiming 3
    m["samples"].erase(1);
    m["samples"].erase(1);
  });
  EXPECT_NE(err.find("num_samples"), std::string::npos) << err;
  err = open_with([](json& m) {
    m["samples"].erase(2);
    m["num_samples"] = 2;
  });
  EXPECT_NE(err.find("complete with 2 samples"), std::string::npos) << err;
  EXPECT_NE(err.find("3 records"), std::string::npos) << err;
  err = open_with([](json& m) { m["samples"][1]["index"] = 0; });
  EXPECT_NE(err.find("samples[1]"), std::string::npos) << err;
  EXPECT_NE(err.find("rise"), std::string::npos) << err;
  err = open_with([](json& m) { m["samples"][0].erase("index"); });
  EXPECT_NE(err.find("index"), std::string::npos) << err;
  // An incomplete run still reads (datagen resumes from it); the trainer refuses it (TrainErrors.UnfinishedDataset...).
  EXPECT_EQ(open_with([](json& m) {
              m["samples"].erase(2);
              m["num_samples"] = 2;
              m["complete"] = false;
            }),
            "");
}

// The engine's length rule: a record of T tokens needs T <= max_model_len (max_position_embeddings).
TEST(DatagenHidden, RecordsLongerThanTheMaxModelLengthAreRefused) {
  TempDir d;
  ModelConfig c = tiny_config();
  c.max_position_embeddings = 40;
  auto model = Model::build(c, BiasedSource(7, kImEnd, 0.25f), LoadOptions{DType::F32});
  const std::string regen = write_regen(d, make_records(5, 8));  // lengths 5, 23, 1, 57, 12
  const std::string out = d.path() + "/hs";
  const std::string err = error_of([&] { datagen::extract_hidden(*model, regen, out, quiet({1})); });
  EXPECT_NE(err.find(regen), std::string::npos) << err;
  EXPECT_NE(err.find("record 3"), std::string::npos) << err;
  EXPECT_NE(err.find("57 tokens"), std::string::npos) << err;
  EXPECT_NE(err.find("40"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(out)) << "refused before any work";
  // Exactly max_model_len tokens fit.
  c.max_position_embeddings = 57;
  auto fits = Model::build(c, BiasedSource(7, kImEnd, 0.25f), LoadOptions{DType::F32});
  EXPECT_EQ(datagen::extract_hidden(*fits, regen, out, quiet({1})).written, 5);
}

}  // namespace
}  // namespace dspark::testing
