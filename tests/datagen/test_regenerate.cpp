// Response regeneration: records, stops, batching, determinism, resume.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "core/crc32.h"
#include "core/error.h"
#include "datagen/prompts.h"
#include "datagen/regen_file.h"
#include "datagen/regenerate.h"
#include "fixtures.h"
#include "sample/json_constraint.h"

namespace dspark::testing {
namespace {

namespace fs = std::filesystem;
using datagen::RegenOptions;
using datagen::RegenPrompt;
using datagen::RegenRecord;

RegenOptions quiet_options(int batch, int max_tokens = 12, uint64_t seed = 3) {
  RegenOptions o;
  o.batch = batch;
  o.max_tokens = max_tokens;
  o.sampling.seed = seed;
  o.progress = false;
  o.log = [](const std::string&) {};
  return o;
}

std::vector<RegenRecord> records_of(const std::string& path) { return datagen::read_regen_file(path).records; }

// CRC32 of every logits row each prompt sampled from, in order.
using LogitTrace = std::map<int64_t, std::vector<uint32_t>>;
RegenOptions traced(RegenOptions o, LogitTrace& trace) {
  o.on_logits = [&trace](int64_t id, const float* logits, int vocab) {
    trace[id].push_back(crc32_bytes(logits, size_t(vocab) * sizeof(float)));
  };
  return o;
}

TEST(DatagenPrompts, ChatmlFirstUserTurn) {
  EXPECT_EQ(datagen::chatml_first_user_turn("<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n"),
            "Hi there");
  EXPECT_EQ(datagen::chatml_first_user_turn("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ\nmore<|im_end|>\n"
                                            "<|im_start|>user\nsecond<|im_end|>\n"),
            "Q\nmore");
  EXPECT_FALSE(datagen::chatml_first_user_turn("<|im_start|>assistant\nA<|im_end|>\n").has_value());
  EXPECT_FALSE(datagen::chatml_first_user_turn("<|im_start|>user\nunterminated").has_value());
}

TEST(DatagenPrompts, CorpusAndPromptFiles) {
  TempDir d;
  d.write("c/instructions/train.jsonl",
          "{\"text\": \"<|im_start|>user\\nFirst?<|im_end|>\\n<|im_start|>assistant\\nA<|im_end|>\\n\"}\n"
          "{\"text\": \"<|im_start|>user\\nSecond?<|im_end|>\\n<|im_start|>assistant\\nB<|im_end|>\\n\"}\n");
  auto ps = datagen::load_corpus_prompts(d.path() + "/c", "train");
  ASSERT_EQ(ps.size(), 2u);
  EXPECT_EQ(ps[0].id, 0);
  EXPECT_EQ(ps[1].id, 1);
  EXPECT_EQ(ps[1].turns, std::vector<std::string>{"Second?"});

  const std::string f = d.write("p.jsonl", "{\"domain\": \"math\", \"prompt\": \"2+2?\", \"reference\": \"4\"}\n\n"
                                           "{\"turns\": [\"a\", \"b\"], \"system\": \"be brief\"}\n");
  auto qs = datagen::load_prompt_file(f);
  ASSERT_EQ(qs.size(), 2u);
  EXPECT_EQ(qs[0].turns, std::vector<std::string>{"2+2?"});
  EXPECT_EQ(qs[1].id, 1);
  EXPECT_EQ(qs[1].turns, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(qs[1].system, "be brief");

  // Errors name the file and line.
  const std::string bad = d.write("bad.jsonl", "{\"prompt\": \"ok\"}\n{\"turns\": [1]}\n");
  try {
    datagen::load_prompt_file(bad);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(bad + ":2"), std::string::npos) << e.what();
  }
  d.write("c/instructions/validation.jsonl", "{\"text\": \"no chat here\"}\n");
  try {
    datagen::load_corpus_prompts(d.path() + "/c", "validation");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("validation.jsonl:1"), std::string::npos) << e.what();
  }
}

TEST(DatagenPrompts, SpreadSampleTakesEvenlySpacedPromptsAndKeepsIds) {
  std::vector<datagen::RegenPrompt> all(10);
  for (int i = 0; i < 10; ++i) {
    all[size_t(i)].id = i;
    all[size_t(i)].turns = {"p" + std::to_string(i)};
  }
  auto ids = [](const std::vector<datagen::RegenPrompt>& v) {
    std::vector<int64_t> r;
    for (const auto& p : v) r.push_back(p.id);
    return r;
  };
  EXPECT_EQ(ids(datagen::spread_sample(all, 3)), (std::vector<int64_t>{0, 3, 6}));
  EXPECT_EQ(ids(datagen::spread_sample(all, 4)), (std::vector<int64_t>{0, 2, 5, 7}));
  const auto one = datagen::spread_sample(all, 1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].turns, std::vector<std::string>{"p0"});
  EXPECT_EQ(ids(datagen::spread_sample(all, 10)), ids(all));
  EXPECT_EQ(ids(datagen::spread_sample(all, 25)), ids(all));
  // A source grouped by kind (5 of kind A, then 5 of kind B): the first 4 are all A, the
  // spread sample takes both kinds in proportion.
  int b = 0;
  for (const auto& p : datagen::spread_sample(all, 4)) b += p.id >= 5;
  EXPECT_EQ(b, 2);
  EXPECT_THROW(datagen::spread_sample(all, 0), Error);
}

TEST(DatagenRegen, StopTokensAreTheChatFormatsAndEos) {
  TempDir d;
  auto tok = chat_tokenizer(d);
  ModelConfig c = tiny_config();
  c.eos_token_ids = {5};
  auto stops = datagen::regen_stop_tokens(*tok, c);
  for (int32_t t : {kImEnd, kEndOfText, 5}) EXPECT_NE(std::find(stops.begin(), stops.end(), t), stops.end()) << t;
  EXPECT_EQ(std::find(stops.begin(), stops.end(), kImStart), stops.end());
}

TEST(DatagenRegen, RecordsHoldTemplatedPromptAndMaskedResponse) {
  TempDir d;
  auto tok = chat_tokenizer(d);
  auto model = tiny_model();
  const auto prompts = some_prompts(14);
  const std::string out = d.path() + "/regen.jsonl";
  const int max_tokens = 10;
  auto st = datagen::regenerate(*model, *tok, prompts, out, quiet_options(4, max_tokens));
  EXPECT_EQ(st.generated, 14);
  auto recs = records_of(out);
  ASSERT_EQ(recs.size(), 14u);
  int stops = 0, lengths = 0;
  for (size_t i = 0; i < recs.size(); ++i) {
    const RegenRecord& r = recs[i];
    EXPECT_EQ(r.id, int64_t(i)) << "records are written in prompt order";
    const auto want = tok->encode(apply_chat_template(ChatFormat::ChatML, {{"user", prompts[i].turns[0]}}, true));
    ASSERT_EQ(r.prompt_tokens, int(want.size()));
    EXPECT_TRUE(std::equal(want.begin(), want.end(), r.input_ids.begin())) << "prompt tokens of record " << i;
    ASSERT_EQ(r.loss_mask.size(), r.input_ids.size());
    for (size_t t = 0; t < r.loss_mask.size(); ++t) EXPECT_EQ(r.loss_mask[t], t >= want.size() ? 1 : 0);
    const std::vector<int32_t> resp(r.input_ids.begin() + r.prompt_tokens, r.input_ids.end());
    ASSERT_FALSE(resp.empty());
    // No stop token before the end; the end is a stop token iff finish_reason is "stop".
    for (size_t t = 0; t + 1 < resp.size(); ++t) EXPECT_TRUE(resp[t] != kImEnd && resp[t] != kEndOfText);
    const bool ends_in_stop = resp.back() == kImEnd || resp.back() == kEndOfText;
    if (r.finish_reason == "stop") {
      ++stops;
      EXPECT_TRUE(ends_in_stop);
      EXPECT_LE(int(resp.size()), max_tokens);
    } else {
      ++lengths;
      EXPECT_EQ(r.finish_reason, "length");
      EXPECT_FALSE(ends_in_stop);
      EXPECT_EQ(int(resp.size()), max_tokens);
    }
  }
  // Both ways of ending are exercised (the biased lm_head makes <|im_end|> likely, not certain).
  EXPECT_GT(stops, 0);
  EXPECT_GT(lengths, 0);
}

TEST(DatagenRegen, BatchedEqualsOneAtATimeF32) {
  TempDir d;
  auto tok = chat_tokenizer(d);
  auto model = tiny_model(DType::F32);
  const auto prompts = some_prompts(11);
  LogitTrace t1, t5;
  auto st1 = datagen::regenerate(*model, *tok, prompts, d.path() + "/b1.jsonl", traced(quiet_options(1), t1));
  auto st5 = datagen::regenerate(*model, *tok, prompts, d.path() + "/b5.jsonl", traced(quiet_options(5), t5));
  datagen::regenerate(*model, *tok, prompts, d.path() + "/b32.jsonl", quiet_options(32));
  EXPECT_LT(st5.forwards * 2, st1.forwards) << "batching must share forward passes";
  const std::string one = slurp(d.path() + "/b1.jsonl");
  EXPECT_EQ(one, slurp(d.path() + "/b5.jsonl"));
  EXPECT_EQ(one, slurp(d.path() + "/b32.jsonl"));
  EXPECT_TRUE(t1 == t5) << "logits differ between --batch 1 and --batch 5";
  // The seed matters (so the equality above is not vacuous).
  datagen::regenerate(*model, *tok, prompts, d.path() + "/seed9.jsonl", quiet_options(5, 12, 9));
  EXPECT_NE(one, slurp(d.path() + "/seed9.jsonl"));
}

// bf16 weights: bit-identical logits for batches of up to 16 rows on the AVX2 kernels (see
// regenerate.h). Tokens alone would rarely show a difference; the logits fail this test when a
// lone decode row is not padded, since a one-row bf16 GEMM sums in another order.
TEST(DatagenRegen, BatchedEqualsOneAtATimeBf16) {
  TempDir d;
  auto tok = chat_tokenizer(d);
  auto model = tiny_model(DType::BF16);
  const auto prompts = some_prompts(9);
  LogitTrace t1, t4;
  datagen::regenerate(*model, *tok, prompts, d.path() + "/b1.jsonl", traced(quiet_options(1), t1));
  datagen::regenerate(*model, *tok, prompts, d.path() + "/b4.jsonl", traced(quiet_options(4), t4));
  EXPECT_EQ(slurp(d.path() + "/b1.jsonl"), slurp(d.path() + "/b4.jsonl"));
  ASSERT_EQ(t1.size(), 9u);
  EXPECT_TRUE(t1 == t4) << "logits differ between --batch 1 and --batch 4";
}

TEST(DatagenRegen, ResumeAfterCrashReproducesTheFile) {
  TempDir d;
  auto tok = chat_tokenizer(d);
  auto model = tiny_model();
  const auto prompts = some_prompts(10);
  const std::string full = d.path() + "/full.jsonl";
  datagen::regenerate(*model, *tok, prompts, full, quiet_options(3));
  const std::string want = slurp(full);
  const auto lines = lines_of(want);
  ASSERT_EQ(lines.size(), 10u);

  // A crash in the middle of writing record 4: records 0-3 and half a line.
  std::string cut;
  for (int i = 0; i < 4; ++i) cut += lines[size_t(i)] + "\n";
  cut += lines[4].substr(0, lines[4].size() / 2);
  const std::string out = d.write("crashed.jsonl", cut);
  std::vector<std::string> logged;
  RegenOptions o = quiet_options(3);
  o.log = [&](const std::string& s) { logged.push_back(s); };
  auto st = datagen::regenerate(*model, *tok, prompts, out, o);
  EXPECT_TRUE(st.dropped_partial_line);
  EXPECT_EQ(st.already_done, 4);
  EXPECT_EQ(st.generated, 6);
  ASSERT_FALSE(logged.empty());
  EXPECT_NE(logged[0].find("partial"), std::string::npos) << logged[0];
  EXPECT_EQ(slurp(out), want);

  // Nothing left to do: a rerun changes nothing.
  st = datagen::regenerate(*model, *tok, prompts, out, quiet_options(3));
  EXPECT_EQ(st.generated, 0);
  EXPECT_EQ(slurp(out), want);

  // --limit counts prompts in total: 6 first, then all 10 give the same file.
  const std::string lim = d.path() + "/limited.jsonl";
  o = quiet_options(2);
  o.limit = 6;
  st = datagen::regenerate(*model, *tok, prompts, lim, o);
  EXPECT_EQ(st.generated, 6);
  o.limit = 10;
  st = datagen::regenerate(*model, *tok, prompts, lim, o);
  EXPECT_EQ(st.already_done, 6);
  EXPECT_EQ(st.generated, 4);
  EXPECT_EQ(slurp(lim), want);
}

// --response-format: every response is a prefix of one JSON object, token by token under a
// matcher of its own; the ones that stopped parse as an object; the same prompts and seed without
// the grammar answer otherwise (so the constraint did something).
TEST(DatagenRegen, ResponseFormatConstrainsEveryAnswer) {
  TempDir d;
  auto tok = chat_tokenizer(d);
  auto model = tiny_model();
  const auto prompts = some_prompts(12);
  RegenOptions o = quiet_options(4, 24);
  o.logits.grammar = JsonGrammar::any_object();
  o.logits.grammar_vocab = TokenVocab::build(*tok, datagen::regen_stop_tokens(*tok, model->config()));
  datagen::regenerate(*model, *tok, prompts, d.path() + "/json.jsonl", o);
  datagen::regenerate(*model, *tok, prompts, d.path() + "/plain.jsonl", quiet_options(4, 24));
  const auto recs = records_of(d.path() + "/json.jsonl"), plain = records_of(d.path() + "/plain.jsonl");
  ASSERT_EQ(recs.size(), 12u);
  int stopped = 0, differ = 0;
  for (size_t i = 0; i < recs.size(); ++i) {
    const RegenRecord& r = recs[i];
    differ += r.input_ids != plain[i].input_ids;
    JsonMatcher m(o.logits.grammar, o.logits.grammar_vocab);
    std::string text;
    for (size_t t = size_t(r.prompt_tokens); t < r.input_ids.size(); ++t) {
      EXPECT_TRUE(m.push(r.input_ids[t])) << "record " << i << ": token " << t << " leaves the grammar";
      if (r.input_ids[t] != kImEnd && r.input_ids[t] != kEndOfText) text += tok->token_bytes(r.input_ids[t]);
    }
    if (r.finish_reason != "stop") continue;
    ++stopped;
    const auto j = nlohmann::json::parse(text, nullptr, false);
    EXPECT_TRUE(j.is_object()) << "record " << i << " stopped on a text that is not one JSON object: " << text;
  }
  EXPECT_GT(stopped, 0) << "no response completed its object; the test checks nothing whole";
  EXPECT_GT(differ, 0) << "the grammar changed no answer";
}

TEST(DatagenRegen, ResumeWithOtherSettingsIsRefused) {
  TempDir d;
  auto tok = chat_tokenizer(d);
  auto model = tiny_model();
  const auto prompts = some_prompts(3);
  const std::string out = d.path() + "/r.jsonl";
  RegenOptions o = quiet_options(2);
  o.settings = {{"seed", 3}, {"temperature", 0.7}};
  datagen::regenerate(*model, *tok, prompts, out, o);
  EXPECT_TRUE(fs::exists(out + ".meta.json"));
  o.settings["seed"] = 4;
  o.sampling.seed = 4;
  try {
    datagen::regenerate(*model, *tok, prompts, out, o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("seed"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(out), std::string::npos) << e.what();
  }
  // A setting the first run had and this one lacks (a response_format) is refused as well.
  o.settings = {{"seed", 3}, {"temperature", 0.7}, {"response_format", {{"type", "json_object"}}}};
  o.sampling.seed = 3;
  const std::string out2 = d.path() + "/r2.jsonl";
  datagen::regenerate(*model, *tok, prompts, out2, o);
  o.settings.erase("response_format");
  try {
    datagen::regenerate(*model, *tok, prompts, out2, o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("response_format"), std::string::npos) << e.what();
  }
}

TEST(DatagenRegen, MultiTurnPromptsContinueAfterTheEndOfTurn) {
  TempDir d;
  auto tok = chat_tokenizer(d);
  auto model = tiny_model();
  // The continuation tokens are what the full template adds after an answer's <|im_end|>.
  RegenPrompt p;
  p.id = 0;
  p.turns = {"First question?", "And the second one?"};
  int32_t eot = -1;
  auto turns = datagen::regen_turn_tokens(*tok, ChatFormat::ChatML, p, &eot);
  ASSERT_EQ(turns.size(), 2u);
  EXPECT_EQ(eot, kImEnd);
  auto full = tok->encode(apply_chat_template(
      ChatFormat::ChatML, {{"user", p.turns[0]}, {"assistant", "hello"}, {"user", p.turns[1]}}, true));
  std::vector<int32_t> joined = turns[0];
  for (int32_t t : tok->encode("hello")) joined.push_back(t);
  joined.push_back(kImEnd);
  joined.insert(joined.end(), turns[1].begin(), turns[1].end());
  EXPECT_EQ(joined, full);

  std::vector<RegenPrompt> prompts;
  for (int i = 0; i < 12; ++i) {
    RegenPrompt q;
    q.id = i;
    q.turns = {"Question " + std::to_string(i) + "?", "Why?", "Are you sure?"};
    prompts.push_back(q);
  }
  const std::string out = d.path() + "/mt.jsonl";
  datagen::regenerate(*model, *tok, prompts, out, quiet_options(4, 8));
  int continued = 0;
  for (const RegenRecord& r : records_of(out)) {
    auto tt = datagen::regen_turn_tokens(*tok, ChatFormat::ChatML, prompts[size_t(r.id)], nullptr);
    // Walk the record: prompt (mask 0), response (mask 1) ending in <|im_end|>, next turn (mask 0), ...
    size_t at = 0;
    for (size_t k = 0; k < tt.size(); ++k) {
      ASSERT_LE(at + tt[k].size(), r.input_ids.size());
      EXPECT_TRUE(std::equal(tt[k].begin(), tt[k].end(), r.input_ids.begin() + long(at))) << "turn " << k;
      for (size_t i = 0; i < tt[k].size(); ++i) EXPECT_EQ(r.loss_mask[at + i], 0);
      at += tt[k].size();
      size_t e = at;
      while (e < r.input_ids.size() && r.loss_mask[e] == 1) ++e;
      ASSERT_GT(e, at) << "a response follows each prompt part";
      const int32_t last = r.input_ids[e - 1];
      at = e;
      if (at == r.input_ids.size()) break;
      EXPECT_EQ(last, kImEnd) << "only <|im_end|> lets the conversation go on";
      ++continued;
    }
    EXPECT_EQ(at, r.input_ids.size());
  }
  EXPECT_GT(continued, 0);
  // Batched multi-turn output equals one at a time.
  datagen::regenerate(*model, *tok, prompts, d.path() + "/mt1.jsonl", quiet_options(1, 8));
  EXPECT_EQ(slurp(out), slurp(d.path() + "/mt1.jsonl"));
}

// The engine's length rule (runtime/context_limit.h) with max_position_embeddings as the limit:
// no record passes it, a response reaching it ends with "length", and a prompt that leaves no
// room is refused before any work, naming it. It used to be a warning, and generation ran on.
TEST(DatagenRegen, MaxModelLengthBoundsEveryRecord) {
  TempDir d;
  auto tok = chat_tokenizer(d);
  const auto prompts = some_prompts(8);
  size_t longest = 0;
  int64_t longest_id = -1;
  for (const auto& p : prompts) {
    const size_t n = datagen::regen_turn_tokens(*tok, ChatFormat::ChatML, p, nullptr)[0].size();
    if (n > longest) longest = n, longest_id = p.id;
  }
  ModelConfig c = tiny_config();
  c.max_position_embeddings = int(longest) + 4;
  auto model = Model::build(c, BiasedSource(7, kImEnd, 0.f), LoadOptions{DType::F32});  // rare stops
  const std::string out = d.path() + "/r.jsonl";
  datagen::regenerate(*model, *tok, prompts, out, quiet_options(3, 32));
  int at_limit = 0;
  for (const RegenRecord& r : records_of(out)) {
    EXPECT_LE(int(r.input_ids.size()), c.max_position_embeddings) << "record " << r.id;
    if (int(r.input_ids.size()) == c.max_position_embeddings) {
      ++at_limit;
      EXPECT_EQ(r.finish_reason, "length");
    }
  }
  EXPECT_GT(at_limit, 0);

  c.max_position_embeddings = int(longest);  // the longest prompt leaves no room
  auto small = Model::build(c, BiasedSource(7, kImEnd, 0.f), LoadOptions{DType::F32});
  const std::string out2 = d.path() + "/r2.jsonl";
  std::string err = "(no error)";
  try {
    datagen::regenerate(*small, *tok, prompts, out2, quiet_options(3, 32));
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("prompt " + std::to_string(longest_id)), std::string::npos) << err;
  EXPECT_NE(err.find(std::to_string(longest) + " tokens"), std::string::npos) << err;
  EXPECT_NE(err.find("maximum model length of " + std::to_string(longest)), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(out2)) << "refused before any work";
}

// A next user turn that does not fit under the limit ends the conversation after the answer's
// end-of-turn token, with "length".
TEST(DatagenRegen, NextTurnPastTheMaxModelLengthEndsTheConversation) {
  TempDir d;
  auto tok = chat_tokenizer(d);
  std::vector<RegenPrompt> prompts;
  size_t first = 0;
  for (int i = 0; i < 12; ++i) {
    RegenPrompt q;
    q.id = i;
    q.turns = {"Q" + std::to_string(i % 10) + "?", "Why?"};
    first = datagen::regen_turn_tokens(*tok, ChatFormat::ChatML, q, nullptr)[0].size();
    prompts.push_back(q);
  }
  const int max_tokens = 8;
  ModelConfig c = tiny_config();
  c.max_position_embeddings = int(first) + max_tokens + 2;  // room for an answer, not for "Why?"
  auto model = Model::build(c, BiasedSource(7, kImEnd, 0.25f), LoadOptions{DType::F32});
  const std::string out = d.path() + "/mt.jsonl";
  datagen::regenerate(*model, *tok, prompts, out, quiet_options(4, max_tokens));
  int cut = 0;
  for (const RegenRecord& r : records_of(out)) {
    EXPECT_LE(int(r.input_ids.size()), c.max_position_embeddings) << "record " << r.id;
    EXPECT_EQ(r.prompt_tokens, int(first));
    for (size_t t = first; t < r.loss_mask.size(); ++t) EXPECT_EQ(r.loss_mask[t], 1) << "no second turn";
    if (r.input_ids.back() == kImEnd) {
      ++cut;
      EXPECT_EQ(r.finish_reason, "length") << "record " << r.id;
    }
  }
  EXPECT_GT(cut, 0) << "some answers ended in <|im_end|> and the next turn was cut";
}

TEST(DatagenRegen, MalformedOutputLineIsAnError) {
  TempDir d;
  auto tok = chat_tokenizer(d);
  auto model = tiny_model();
  const std::string out = d.write("bad.jsonl", "{\"id\": 0, \"input_ids\": [1, 2], \"loss_mask\": [0, 1], "
                                               "\"prompt_tokens\": 1, \"finish_reason\": \"stop\"}\nnot json\n");
  try {
    datagen::regenerate(*model, *tok, some_prompts(2), out, quiet_options(2));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(out + ":2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dspark::testing
