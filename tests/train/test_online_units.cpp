// The pure parts of online drafter training (issue 21): the store sample -> training sample
// conversion (layer selection, the final norm, the loss mask, the token-id check), the
// exactly-once bookkeeping (journal + checkpoint trained set -> what to fetch, delete, request)
// on crash scenarios, and the server client's response parsing and backoff.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../data/test_util.h"
#include "core/dtype.h"
#include "core/error.h"
#include "train/online_ledger.h"
#include "train/online_sample.h"
#include "train/server_client.h"

namespace dspark::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using dspark::testing::slurp;
using dspark::testing::TempDir;

// A store sample of `T` tokens whose value at (t, slot, j) is value(t, slot, j), in `dtype`.
float value(int64_t t, int slot, int j) {
  return float((t * 7 + slot * 3 + j) % 17 - 8) / 4.0f;
}

connector::HiddenSample store_sample(const std::vector<int64_t>& tokens,
                                     const std::vector<int>& layer_ids, int hidden,
                                     const std::string& dtype) {
  connector::HiddenSample s;
  s.handle = "run-p3-a0";
  s.token_ids = tokens;
  s.layer_ids = layer_ids;
  s.hidden = hidden;
  s.dtype = dtype;
  const int n = int(layer_ids.size());
  for (int64_t t = 0; t < int64_t(tokens.size()); ++t)
    for (int k = 0; k < n; ++k)
      for (int j = 0; j < hidden; ++j) {
        const float v = value(t, k, j);
        if (dtype == "bfloat16") {
          const uint16_t b = f32_to_bf16(v);  // multiples of 1/4: exact
          s.hidden_bytes.append(reinterpret_cast<const char*>(&b), 2);
        } else {
          s.hidden_bytes.append(reinterpret_cast<const char*>(&v), 4);
        }
      }
  return s;
}

TargetNorm norm_of(int layers, int hidden) {
  TargetNorm n;
  n.num_layers = layers;
  n.hidden = hidden;
  n.eps = 1e-5f;
  for (int j = 0; j < hidden; ++j) n.weight.push_back(0.5f + 0.1f * float(j));
  return n;
}

TEST(OnlineSample, SelectsTheDrafterLayersAndNormsTheLastSlot) {
  // A 6-layer target; the server exports vLLM ids [0, 2, 3, 5, 6]; the drafter taps dspark
  // layers -1 (embeddings), 2 and 4, i.e. vLLM 0, 3, 5, then L = 6.
  const int H = 8, L = 6;
  const std::vector<int32_t> prompt = {11, 12, 13}, generated = {21, 22, 23};
  const std::vector<int64_t> tokens = {11, 12, 13, 21, 22};
  const TargetNorm norm = norm_of(L, H);
  EXPECT_EQ(store_layer_ids({-1, 2, 4}, L), (std::vector<int>{0, 3, 5, 6}));
  for (const std::string dtype : {"float32", "bfloat16"}) {
    SCOPED_TRACE(dtype);
    const auto s = store_sample(tokens, {0, 2, 3, 5, 6}, H, dtype);
    const auto out = to_train_sample(s, prompt, generated, {-1, 2, 4}, norm);
    ASSERT_EQ(out.layers, 3);
    ASSERT_EQ(out.hidden, H);
    EXPECT_EQ(out.tokens, (std::vector<int32_t>{11, 12, 13, 21, 22}));
    EXPECT_EQ(out.loss_mask, (std::vector<uint8_t>{0, 0, 0, 1, 1}));  // the generated positions
    ASSERT_EQ(out.hidden_states.size(), tokens.size() * 4 * H);
    const int store_slot[3] = {0, 2, 3};  // vLLM 0, 3, 5 in the sample's list
    for (int64_t t = 0; t < 5; ++t) {
      for (int k = 0; k < 3; ++k)
        for (int j = 0; j < H; ++j)
          EXPECT_EQ(out.at(t, k)[j], value(t, store_slot[k], j)) << t << " " << k;
      // The final slot: RMSNorm of vLLM 6 (store slot 4), computed directly.
      double ss = 0;
      for (int j = 0; j < H; ++j) ss += double(value(t, 4, j)) * value(t, 4, j);
      const double r = 1.0 / std::sqrt(ss / H + 1e-5);
      for (int j = 0; j < H; ++j)
        EXPECT_NEAR(out.at(t, 3)[j], value(t, 4, j) * r * norm.weight[size_t(j)], 1e-5)
            << t << " " << j;
    }
  }
}

TEST(OnlineSample, TokenIdsMustBePromptPlusAllButTheLastGenerated) {
  const int H = 4;
  const TargetNorm norm = norm_of(2, H);
  const std::vector<int32_t> prompt = {5, 6}, generated = {7, 8};
  // The sample holds the last generated token too: refused as corrupt (re-requested).
  auto s = store_sample({5, 6, 7, 8}, {1, 2}, H, "float32");
  try {
    to_train_sample(s, prompt, generated, {0}, norm);
    FAIL() << "accepted token ids " << s.token_ids.size();
  } catch (const CorruptSample& e) {
    EXPECT_NE(std::string(e.what()).find("run-p3-a0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("token_ids"), std::string::npos) << e.what();
  }
  s = store_sample({5, 9, 7}, {1, 2}, H, "float32");  // another prompt
  EXPECT_THROW(to_train_sample(s, prompt, generated, {0}, norm), CorruptSample);
  s = store_sample({5, 6, 7}, {1, 2}, H, "float32");
  EXPECT_NO_THROW(to_train_sample(s, prompt, generated, {0}, norm));
  s.hidden_bytes.pop_back();  // bytes that do not hold [T, n, H]
  EXPECT_THROW(to_train_sample(s, prompt, generated, {0}, norm), CorruptSample);
}

TEST(OnlineSample, MissingLayersAreAnErrorNamingTheHandleAndBothLists) {
  const int H = 4;
  const auto s = store_sample({5, 6, 7}, {1, 3}, H, "float32");
  try {
    to_train_sample(s, {5, 6}, {7, 8}, {1}, norm_of(3, H));  // needs vLLM [2, 3]
    FAIL() << "accepted a sample without layer 2";
  } catch (const CorruptSample& e) {
    FAIL() << "a layer mismatch is a configuration error, not a corrupt sample: " << e.what();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("run-p3-a0"), std::string::npos) << m;
    EXPECT_NE(m.find("[1, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
  }
  // Without the L slot (the final state) too.
  EXPECT_THROW(to_train_sample(s, {5, 6}, {7, 8}, {0}, norm_of(4, H)), Error);
  // Another hidden size.
  EXPECT_THROW(to_train_sample(s, {5, 6}, {7, 8}, {0}, norm_of(3, H + 1)), Error);
}

TEST(OnlineLedger, IndexSetMergesRangesAndRoundTrips) {
  IndexSet s;
  for (int64_t i : {5, 3, 4, 9, 0, 1, 2, 8, 4}) s.insert(i);
  EXPECT_EQ(s.size(), 8);
  EXPECT_EQ(s.to_json(), json::parse("[[0, 6], [8, 10]]"));
  EXPECT_TRUE(s.contains(0) && s.contains(5) && s.contains(9));
  EXPECT_FALSE(s.contains(6) || s.contains(7) || s.contains(10) || s.contains(-1));
  EXPECT_EQ(IndexSet::from_json(s.to_json(), "x"), s);
  EXPECT_EQ(IndexSet::from_json(s.to_json(), "x").size(), 8);
  EXPECT_THROW(IndexSet::from_json(json::parse("[[3, 2]]"), "x"), Error);
  EXPECT_THROW(IndexSet::from_json(json::parse("[[0, 4], [2, 6]]"), "x"), Error);
  EXPECT_THROW(IndexSet::from_json(json::parse("{}"), "x"), Error);
}

JournalEntry sent(int64_t p, int a) {
  JournalEntry e;
  e.kind = JournalEntry::Kind::Sent;
  e.prompt = p;
  e.attempt = a;
  e.handle = "r-p" + std::to_string(p) + "-a" + std::to_string(a);
  e.server = "http://s";
  return e;
}
JournalEntry handle(int64_t p, int a) {
  JournalEntry e = sent(p, a);
  e.kind = JournalEntry::Kind::Handle;
  e.attempt = -1;
  e.generated = {1, 2, int32_t(p)};
  return e;
}
JournalEntry corrupt(int64_t p, int a) {
  JournalEntry e = sent(p, a);
  e.kind = JournalEntry::Kind::Corrupt;
  e.attempt = -1;
  e.why = "crc";
  return e;
}
JournalEntry failed(int64_t p) {
  JournalEntry e;
  e.kind = JournalEntry::Kind::Failed;
  e.prompt = p;
  e.why = "status 400";
  return e;
}
std::string h(int64_t p, int a) {
  return "r-p" + std::to_string(p) + "-a" + std::to_string(a);
}
IndexSet set_of(std::initializer_list<int64_t> l) {
  IndexSet s;
  for (int64_t i : l) s.insert(i);
  return s;
}

TEST(OnlineLedger, AFreshRunRequestsEveryPrompt) {
  const ResumePlan p = plan_resume(4, {}, {}, "j");
  EXPECT_EQ(p.request, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_TRUE(p.fetch.empty() && p.remove.empty() && p.failed.empty());
}

TEST(OnlineLedger, CrashAfterACheckpointRefetchesTheUntrainedAndDeletesTheTrained) {
  // Prompts 0-4 answered; the checkpoint trained 0-2 (3 and 4 were trained after it, or never);
  // prompt 5 was sent when the trainer died (its sample may yet land: delete it, ask again);
  // prompts 6, 7 never sent.
  std::vector<JournalEntry> j;
  for (int p = 0; p < 5; ++p) j.insert(j.end(), {sent(p, 0), handle(p, 0)});
  j.push_back(sent(5, 0));
  const ResumePlan plan = plan_resume(8, j, set_of({0, 1, 2}), "j");
  ASSERT_EQ(plan.fetch.size(), 2u);
  EXPECT_EQ(plan.fetch[0].prompt, 3);
  EXPECT_EQ(plan.fetch[0].handle, h(3, 0));
  EXPECT_EQ(plan.fetch[0].generated, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(plan.fetch[1].prompt, 4);
  EXPECT_EQ(plan.remove, (std::vector<std::string>{h(0, 0), h(1, 0), h(2, 0), h(5, 0)}));
  EXPECT_EQ(plan.request, (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(plan.state.at(5).next_attempt, 1);  // a0 is never reused: its sample may exist
  EXPECT_TRUE(plan.failed.empty());
}

TEST(OnlineLedger, CorruptSamplesAreSupersededAndCountedAcrossTheCrash) {
  std::vector<JournalEntry> j = {
      sent(0, 0),   handle(0, 0),  corrupt(0, 0), sent(0, 1),
      handle(0, 1),                                            // re-requested, answered
      sent(1, 0),   handle(1, 0),  corrupt(1, 0), sent(1, 1),  // re-request in flight
      sent(2, 0),   handle(2, 0),  corrupt(2, 0), sent(2, 1),
      handle(2, 1), corrupt(2, 1),  // corrupt last
  };
  const ResumePlan plan = plan_resume(3, j, {}, "j");
  ASSERT_EQ(plan.fetch.size(), 1u);
  EXPECT_EQ(plan.fetch[0].handle, h(0, 1));
  EXPECT_EQ(plan.remove, (std::vector<std::string>{h(0, 0), h(1, 0), h(1, 1), h(2, 0), h(2, 1)}));
  EXPECT_EQ(plan.request, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(plan.state.at(0).corrupt, 1);
  EXPECT_EQ(plan.state.at(2).corrupt, 2);
  EXPECT_EQ(plan.state.at(2).next_attempt, 2);
}

TEST(OnlineLedger, FailedPromptsStayFailed) {
  std::vector<JournalEntry> j = {sent(0, 0), failed(0)};  // a 4xx
  for (int a = 0; a < kMaxCorruptAttempts; ++a)  // three corrupt samples, the crash before "failed"
    j.insert(j.end(), {sent(1, a), handle(1, a), corrupt(1, a)});
  const ResumePlan plan = plan_resume(3, j, {}, "j");
  EXPECT_EQ(plan.failed, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(plan.request, (std::vector<int64_t>{2}));
  EXPECT_TRUE(plan.fetch.empty());
  EXPECT_EQ(plan.remove.size(), 4u);  // every handle of both
}

TEST(OnlineLedger, ATrainedPromptIsNeverFetchedAgain) {
  // Trained (in the checkpoint) though the journal shows a later corrupt entry or re-request:
  // the checkpoint wins, every handle goes.
  std::vector<JournalEntry> j = {sent(0, 0), handle(0, 0), sent(0, 1)};
  const ResumePlan plan = plan_resume(1, j, set_of({0}), "j");
  EXPECT_TRUE(plan.fetch.empty());
  EXPECT_TRUE(plan.request.empty());
  EXPECT_EQ(plan.remove, (std::vector<std::string>{h(0, 0), h(0, 1)}));
}

TEST(OnlineLedger, AJournalOfAnotherPromptsFileIsRefused) {
  try {
    plan_resume(2, {sent(5, 0)}, {}, "OUT/online_journal.jsonl");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("OUT/online_journal.jsonl"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("--prompts"), std::string::npos) << e.what();
  }
}

TEST(OnlineLedger, JournalRoundTripsAndATornLastLineIsCutOff) {
  TempDir t;
  const std::string path = t.path() + "/journal.jsonl";
  const std::vector<JournalEntry> in = {sent(0, 0), handle(0, 0), corrupt(0, 0), failed(1)};
  {
    SyncedLog log(path);
    for (const auto& e : in) log.append(e.to_json());
    EXPECT_EQ(log.bytes(), int64_t(fs::file_size(path)));
  }
  const size_t good = fs::file_size(path);
  std::ofstream(path, std::ios::app) << "{\"prompt\": 2, \"hand";  // the crash mid-write
  auto out = read_journal(path, /*repair=*/true);
  ASSERT_EQ(out.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(out[i].to_json(), in[i].to_json()) << i;
  EXPECT_EQ(fs::file_size(path), good);
  {
    SyncedLog log(path);
    log.append(sent(2, 0).to_json());
  }
  EXPECT_EQ(read_journal(path, false).size(), in.size() + 1);
  // A malformed line before the end is an error naming the file and line.
  std::ofstream(path, std::ios::app) << "not json\n{\"prompt\": 1, \"event\": \"failed\"}\n";
  try {
    read_journal(path, false);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ":6"), std::string::npos) << e.what();
  }
}

TEST(OnlineLedger, TruncateFileCutsToTheCheckpointsLength) {
  TempDir t;
  const std::string path = t.write("consumed.jsonl", "line 1\nline 2\n");
  truncate_file(path, 7);
  EXPECT_EQ(slurp(path), "line 1\n");
  EXPECT_THROW(truncate_file(path, 100), Error);
}

TEST(OnlineClient, ParsesTheResponseTheServerSends) {
  const std::string body = R"({"id": "x", "prompt_token_ids": [1, 2, 3],
      "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "token_ids": [7, 8]}],
      "kv_transfer_params": {"handle": "run-p0-a0"}})";
  const ChatReply r = parse_chat_reply(body, "srv");
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(r.token_ids, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(r.handle, "run-p0-a0");
  for (
      const char* bad :
      {R"({"choices": [{"token_ids": [1]}], "kv_transfer_params": {"handle": "h"}})",
       R"({"prompt_token_ids": [1], "choices": [{"token_ids": [1]}]})",
       R"({"prompt_token_ids": [1], "kv_transfer_params": {"handle": "h"}, "choices": []})",
       R"({"prompt_token_ids": [-1], "choices": [{"token_ids": [1]}], "kv_transfer_params": {"handle": "h"}})",
       "not json"}) {
    try {
      parse_chat_reply(bad, "POST http://s/v1/chat/completions");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("POST http://s"), std::string::npos) << e.what();
    }
  }
  const json req = chat_request_body("m", {{"system", "s"}, {"user", "u"}}, 16);
  EXPECT_EQ(req["temperature"], 0);
  EXPECT_EQ(req["return_token_ids"], true);
  EXPECT_EQ(req["kv_transfer_params"]["include_output_tokens"], true);
  EXPECT_EQ(req["messages"][1]["content"], "u");
}

TEST(OnlineClient, BackoffDoublesUpToEightSecondsAndOnlyClientErrorsAreFinal) {
  EXPECT_EQ(retry_backoff_s(0), 0.5);
  EXPECT_EQ(retry_backoff_s(1), 1.0);
  EXPECT_EQ(retry_backoff_s(3), 4.0);
  EXPECT_EQ(retry_backoff_s(4), 8.0);
  EXPECT_EQ(retry_backoff_s(40), 8.0);
  EXPECT_TRUE(is_final_status(400) && is_final_status(404) && is_final_status(422));
  EXPECT_FALSE(is_final_status(-1) || is_final_status(500) || is_final_status(503) ||
               is_final_status(429) || is_final_status(408) || is_final_status(200));
}

}  // namespace
}  // namespace dspark::train
