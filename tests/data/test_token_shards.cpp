// `corpus tokenize` and TokenShards: a round trip against direct encoding with a tiny
// tokenizer written here, uint16 and uint32 shards, and every error naming its file.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/crc32.h"
#include "core/error.h"
#include "data/corpus.h"
#include "data/token_shards.h"
#include "data/tokenize_corpus.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace dspark::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::slurp;
using testing::TempDir;

// A small corpus (synthetic Python files and generated math) and its token shards.
struct Tokenized {
  TempDir t;
  std::string corpus, shards, tokenizer;
  TokenizeResult result;
  explicit Tokenized(int special_base = 300) {
    for (int i = 0; i < 40; ++i)
      t.write("py/m" + std::to_string(i) + ".py",
              "def f" + std::to_string(i) + "(x):\n    \"\"\"Return x times " + std::to_string(i) +
                  ", or the other thing.\"\"\"\n    return x * " + std::to_string(i) + "  # ünïcode ✓\n");
    CorpusOptions o;
    o.use_packages = false;
    o.python_dir = t.path() + "/py";
    o.dictd_dir = o.info_dir = t.path() + "/none";
    o.bible_path = t.path() + "/none/bible.data";
    o.domains = {"code", "math", "instructions"};
    o.max_mb = 0.05;
    o.out_dir = corpus = t.path() + "/corpus";
    build_corpus(o);
    tokenizer = t.write("tokenizer.json", testing::tiny_tokenizer_json(special_base));
    TokenizeOptions k;
    k.corpus_dir = corpus;
    k.tokenizer_file = tokenizer;
    k.out_dir = shards = t.path() + "/shards";
    k.threads = 2;
    result = tokenize_corpus(k);
  }
  // What the shards of a split should hold: every document of every domain (manifest order)
  // encoded directly, each followed by <|endoftext|>.
  std::vector<int32_t> expected(const std::string& split, std::vector<std::pair<std::string, int64_t>>* sizes) const {
    auto tok = Tokenizer::from_file(tokenizer);
    const int32_t eot = *tok->token_to_id("<|endoftext|>");
    std::vector<int32_t> out;
    for (const std::string d : {"code", "math", "instructions"}) {
      const size_t before = out.size();
      for (const auto& text : testing::jsonl_texts(corpus + "/" + d + "/" + split + ".jsonl")) {
        const auto ids = tok->encode(text);
        out.insert(out.end(), ids.begin(), ids.end());
        out.push_back(eot);
      }
      sizes->emplace_back(d, int64_t(out.size() - before));
    }
    return out;
  }
  // A copy of the shard directory to damage.
  std::string copy_shards(const TempDir& into) const {
    const std::string dst = into.path() + "/shards";
    fs::copy(shards, dst, fs::copy_options::recursive);
    return dst;
  }
};

// Built once per process; its directory goes away at exit.
const Tokenized& shared() {
  static const Tokenized t;
  return t;
}

void expect_round_trip(const Tokenized& tk, const std::string& split) {
  std::vector<std::pair<std::string, int64_t>> sizes;
  const auto want = tk.expected(split, &sizes);
  const TokenShards s = TokenShards::open(tk.shards, split);
  ASSERT_EQ(s.size(), int64_t(want.size())) << split;
  EXPECT_EQ(s.domain_sizes(), sizes);
  std::vector<int32_t> got(want.size());
  s.copy(0, s.size(), got.data());
  EXPECT_EQ(got, want) << split;
  for (int64_t i = 0; i < s.size(); i += 97) ASSERT_EQ(s.at(i), want[size_t(i)]) << i;
  if (s.size() > 0) {
    EXPECT_EQ(s.at(s.size() - 1), s.eot_id());
  }
}

TEST(TokenShards, RoundTripMatchesDirectEncoding) {
  const Tokenized& tk = shared();
  for (const auto& split : corpus_splits()) expect_round_trip(tk, split);
  const TokenShards s = TokenShards::open(tk.shards, "train");
  EXPECT_EQ(s.tokenizer_crc(), crc32_file(tk.tokenizer));
  EXPECT_EQ(s.vocab_size(), 303);
  EXPECT_EQ(s.eot_id(), 300);
  EXPECT_EQ(json::parse(slurp(tk.shards + "/manifest.json"))["dtype"], "uint16");
  EXPECT_EQ(fs::file_size(tk.shards + "/math/train.bin"), size_t(s.domain_sizes()[1].second) * 2);
}

TEST(TokenShards, CopyAcrossShardsAndDomainFilter) {
  const Tokenized& tk = shared();
  const TokenShards all = TokenShards::open(tk.shards, "train");
  const int64_t code = all.domain_sizes()[0].second;
  ASSERT_GT(code, 10);
  std::vector<int32_t> a(20), b(20);
  all.copy(code - 10, 20, a.data());  // spans the code | math boundary
  for (int i = 0; i < 20; ++i) b[size_t(i)] = all.at(code - 10 + i);
  EXPECT_EQ(a, b);
  const TokenShards math = TokenShards::open(tk.shards, "train", {"math"});
  ASSERT_EQ(math.size(), all.domain_sizes()[1].second);
  EXPECT_EQ(math.at(0), all.at(code));
  EXPECT_THROW(all.at(all.size()), Error);
  EXPECT_THROW(all.copy(all.size() - 1, 2, a.data()), Error);
  try {
    TokenShards::open(tk.shards, "train", {"poetry"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(tk.shards + "/manifest.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("poetry"), std::string::npos) << e.what();
  }
}

TEST(TokenShards, Uint32WhenTheVocabularyIsLarge) {
  const Tokenized tk(70000);
  EXPECT_EQ(json::parse(slurp(tk.shards + "/manifest.json"))["dtype"], "uint32");
  expect_round_trip(tk, "train");
  const TokenShards s = TokenShards::open(tk.shards, "train");
  EXPECT_EQ(s.vocab_size(), 70003);
  EXPECT_EQ(s.eot_id(), 70000);
}

TEST(Tokenize, CountsRecordedInBothManifests) {
  const Tokenized& tk = shared();
  const json tm = json::parse(slurp(tk.shards + "/manifest.json"));
  const json cm = json::parse(slurp(tk.corpus + "/manifest.json"));
  const std::string key = crc32_hex(crc32_file(tk.tokenizer));
  ASSERT_TRUE(cm["tokens"].contains(key)) << cm["tokens"].dump();
  int64_t total = 0;
  for (const auto& d : tm["domains"])
    for (const auto& s : corpus_splits()) {
      const int64_t n = d["splits"][s]["tokens"];
      EXPECT_EQ(cm["tokens"][key]["counts"][d["name"].get<std::string>()][s].get<int64_t>(), n);
      EXPECT_EQ(d["splits"][s]["crc32"].get<std::string>(),
                crc32_hex(crc32_file(tk.shards + "/" + d["splits"][s]["file"].get<std::string>())));
      total += n;
    }
  EXPECT_EQ(total, tk.result.total_tokens);
  EXPECT_EQ(tm["tokenizer"]["vocab_size"], 303);
}

TEST(Tokenize, TokenizerWithoutEndOfTextIsAnError) {
  const Tokenized& tk = shared();
  TempDir t;
  json j = json::parse(testing::tiny_tokenizer_json());
  j["added_tokens"].erase(0);  // drop <|endoftext|>
  TokenizeOptions k;
  k.corpus_dir = tk.corpus;
  k.tokenizer_file = t.write("tok.json", j.dump());
  k.out_dir = t.path() + "/out";
  k.update_corpus_manifest = false;
  try {
    tokenize_corpus(k);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(k.tokenizer_file), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("<|endoftext|>"), std::string::npos) << e.what();
  }
}

// Opens `dir` and expects an Error mentioning both `file` and `what`.
void expect_open_error(const std::string& dir, const std::string& file, const std::string& what) {
  try {
    TokenShards::open(dir, "train");
    FAIL() << "no error for " << what;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
}

TEST(TokenShards, MissingShard) {
  TempDir t;
  const std::string dir = shared().copy_shards(t);
  fs::remove(dir + "/math/train.bin");
  expect_open_error(dir, dir + "/math/train.bin", "missing shard");
}

TEST(TokenShards, TruncatedShard) {
  TempDir t;
  const std::string dir = shared().copy_shards(t);
  const std::string f = dir + "/math/train.bin";
  fs::resize_file(f, fs::file_size(f) - 2);
  expect_open_error(dir, f, "truncated shard");
}

TEST(TokenShards, CorruptedByteFailsTheCrc) {
  TempDir t;
  const std::string dir = shared().copy_shards(t);
  const std::string f = dir + "/code/train.bin";
  std::string bytes = slurp(f);
  ASSERT_GT(bytes.size(), 100u);
  bytes[bytes.size() / 2] ^= 0x01;
  std::ofstream(f, std::ios::binary | std::ios::trunc) << bytes;
  expect_open_error(dir, f, "corrupt shard");
}

TEST(TokenShards, MissingOrMalformedManifest) {
  TempDir t;
  const std::string dir = shared().copy_shards(t);
  const std::string m = dir + "/manifest.json";
  const std::string good = slurp(m);
  std::ofstream(m, std::ios::trunc) << "{\"format\": \"dspark-tokens-1\", \"dtype\": ";
  expect_open_error(dir, m, "malformed");
  json j = json::parse(good);
  j.erase("dtype");
  std::ofstream(m, std::ios::trunc) << j.dump();
  expect_open_error(dir, m, "dtype");
  fs::remove(m);
  expect_open_error(dir, m, "missing");
}

}  // namespace
}  // namespace dspark::data
