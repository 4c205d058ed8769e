// Unit tests of the tokenizer on small hand-made tokenizer.json files.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "tokenizer/js_regex.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_util.h"

// The largest single allocation while g_track_alloc is set: loading a tokenizer.json must not
// size a table by a hostile id (1e8 used to allocate 3.2 GB before failing).
namespace {
std::atomic<bool> g_track_alloc{false};
std::atomic<size_t> g_largest_alloc{0};
}  // namespace

void* operator new(std::size_t n) {
  if (g_track_alloc.load(std::memory_order_relaxed)) {
    size_t cur = g_largest_alloc.load(std::memory_order_relaxed);
    while (n > cur && !g_largest_alloc.compare_exchange_weak(cur, n)) {
    }
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
// Not inlined: GCC would then see free() of what operator new returned and warn of a mismatch.
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace dspark {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;
namespace fs = std::filesystem;

// GPT-2's byte -> character table, written out independently of the implementation.
std::string byte_char(unsigned b) {
  unsigned cp;
  if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
    cp = b;
  } else {
    unsigned n = 0;
    for (unsigned x = 0; x < b; ++x)
      if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) ++n;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}
// Byte-level spelling of a UTF-8 string.
std::string bl(const std::string& s) {
  std::string out;
  for (unsigned char c : s) out += byte_char(c);
  return out;
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("dspark_tok_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string write(const std::string& name, const std::string& content) const {
    const fs::path p = path_ / name;
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
  }
  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
  static inline int counter_ = 0;
};

// A tokenizer.json with the 256 byte tokens (id = byte value), extra tokens and merges.
struct Spec {
  std::vector<std::string> extra;                           // UTF-8 strings, ids 256, 257, ...
  std::vector<std::pair<std::string, std::string>> merges;  // UTF-8 strings
  bool pair_merges = false;
  bool ignore_merges = false;
  json added = json::array();
  json normalizer = nullptr;
  json pre_tokenizer = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  json post_processor = nullptr;

  json build() const {
    json vocab = json::object();
    for (unsigned b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
    for (size_t i = 0; i < extra.size(); ++i) vocab[bl(extra[i])] = 256 + static_cast<int>(i);
    json m = json::array();
    for (const auto& [l, r] : merges) {
      if (pair_merges) m.push_back({bl(l), bl(r)});
      else m.push_back(bl(l) + " " + bl(r));
    }
    return {{"version", "1.0"},
            {"added_tokens", added},
            {"normalizer", normalizer},
            {"pre_tokenizer", pre_tokenizer},
            {"post_processor", post_processor},
            {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
            {"model",
             {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}, {"ignore_merges", ignore_merges}, {"unk_token", nullptr}}}};
  }
};

std::unique_ptr<Tokenizer> load(const json& j) {
  TempDir dir;
  return Tokenizer::from_file(dir.write("tokenizer.json", j.dump()));
}

json added_token(int id, const std::string& content, bool special = true) {
  return {{"id", id},          {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false},   {"normalized", false}, {"special", special}};
}

Ids bytes_of(const std::string& s) {
  Ids ids;
  for (unsigned char c : s) ids.push_back(c);
  return ids;
}

// Hello-world vocabulary: merges build "Hello" and " world".
Spec hello_spec() {
  Spec s;
  s.extra = {"He", "ll", "llo", "Hello", " w", "or", " wor", "ld", " world"};  // 256..264
  s.merges = {{"H", "e"}, {"l", "l"}, {"ll", "o"}, {"He", "llo"}, {" ", "w"}, {"o", "r"}, {" w", "or"}, {"l", "d"}, {" wor", "ld"}};
  return s;
}

// ---------------------------------------------------------------------------------------------
TEST(Tokenizer, MergesInStringAndPairFormatAgree) {
  Spec s = hello_spec();
  auto a = load(s.build());
  s.pair_merges = true;
  auto b = load(s.build());
  EXPECT_EQ(a->encode("Hello world"), (Ids{259, 264}));
  EXPECT_EQ(b->encode("Hello world"), (Ids{259, 264}));
  EXPECT_EQ(a->encode("Hello worlds!"), b->encode("Hello worlds!"));
  EXPECT_EQ(a->decode(a->encode("Hello world")), "Hello world");
}

TEST(Tokenizer, MergeRankDecidesOrder) {
  // "abc": with (b,c) ranked before (a,b) the result is a + bc; the other way round ab + c.
  Spec s;
  s.extra = {"ab", "bc"};  // 256, 257
  s.merges = {{"b", "c"}, {"a", "b"}};
  EXPECT_EQ(load(s.build())->encode("abc"), (Ids{'a', 257}));
  s.merges = {{"a", "b"}, {"b", "c"}};
  EXPECT_EQ(load(s.build())->encode("abc"), (Ids{256, 'c'}));
}

TEST(Tokenizer, EqualRanksMergeLeftmostFirst) {
  Spec s;
  s.extra = {"aa"};  // 256
  s.merges = {{"a", "a"}};
  auto t = load(s.build());
  EXPECT_EQ(t->encode("aaa"), (Ids{256, 'a'}));
  EXPECT_EQ(t->encode("aaaa"), (Ids{256, 256}));
  EXPECT_EQ(t->encode("aaaaa"), (Ids{256, 256, 'a'}));
}

TEST(Tokenizer, IgnoreMergesEmitsWholeWordInVocab) {
  Spec s;
  s.extra = {"abcd", "ab"};  // 256 (not reachable by merges), 257
  s.merges = {{"a", "b"}};
  EXPECT_EQ(load(s.build())->encode("abcd"), (Ids{257, 'c', 'd'}));
  s.ignore_merges = true;
  EXPECT_EQ(load(s.build())->encode("abcd"), (Ids{256}));
}

TEST(Tokenizer, LongRunsAreNotQuadratic) {
  Spec s;
  s.extra = {"aa", "aaaa", "aaaaaaaa"};
  s.merges = {{"a", "a"}, {"aa", "aa"}, {"aaaa", "aaaa"}};
  auto t = load(s.build());
  const std::string text(200000, 'a');
  const auto t0 = std::chrono::steady_clock::now();
  const Ids ids = t->encode(text);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(ids.size(), 200000u / 8);
  EXPECT_EQ(t->decode(ids), text);
  EXPECT_LT(secs, 2.0);
}

TEST(Tokenizer, Gpt2RegexSplitsWords) {
  // With ByteLevel(use_regex) " world" is one pre-token; without, the whole text is one word.
  auto t = load(hello_spec().build());
  EXPECT_EQ(t->encode("Hello  world"), (Ids{259, ' ', 264}));
  Spec s = hello_spec();
  s.pre_tokenizer = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  EXPECT_EQ(load(s.build())->encode("world"), (Ids{264}));
}

TEST(Tokenizer, SplitSequenceLikeQwen) {
  Spec s = hello_spec();
  s.pre_tokenizer = json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
       "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]})");
  auto t = load(s.build());
  EXPECT_EQ(t->encode("Hello world"), (Ids{259, 264}));
  // \p{N} alone: digits are single pre-tokens; "IT'S" keeps the upper-case contraction apart.
  EXPECT_EQ(t->encode("12"), (Ids{'1', '2'}));
  EXPECT_EQ(t->encode("IT'S"), (Ids{'I', 'T', '\'', 'S'}));
}

TEST(Tokenizer, SplitBehaviors) {
  // Pieces are visible through merges that only apply inside one piece.
  Spec s;
  s.extra = {"e-", "-f", "--"};  // 256, 257, 258
  s.merges = {{"e", "-"}, {"-", "f"}, {"-", "-"}};
  auto with = [&](const char* behavior) {
    Spec t = s;
    t.pre_tokenizer = {{"type", "Sequence"},
                       {"pretokenizers",
                        json::array({{{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", false}},
                                     {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
    return load(t.build())->encode("the-final--countdown");
  };
  const Ids th = bytes_of("th"), fin = bytes_of("inal"), cd = bytes_of("countdown");
  auto cat = [](std::initializer_list<Ids> parts) {
    Ids out;
    for (const Ids& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  EXPECT_EQ(with("Removed"), cat({bytes_of("the"), bytes_of("final"), cd}));
  EXPECT_EQ(with("Isolated"), cat({bytes_of("the-final--countdown")}));
  EXPECT_EQ(with("MergedWithPrevious"), cat({th, {256}, bytes_of("final-"), {'-'}, cd}));       // the- | final- | - | countdown
  EXPECT_EQ(with("MergedWithNext"), cat({bytes_of("the"), {257}, fin, {'-'}, bytes_of("-countdown")}));  // the | -final | - | -countdown
  EXPECT_EQ(with("Contiguous"), cat({bytes_of("the-final"), {258}, cd}));                         // the | - | final | -- | countdown
}

TEST(Tokenizer, AddedTokensSplitLongestMatchFirst) {
  Spec s = hello_spec();
  s.added = json::array({added_token(300, "<|a|>"), added_token(301, "<|a|>b"), added_token(302, "<think>", false)});
  auto t = load(s.build());
  // "world" without a leading space: w + or + ld.
  EXPECT_EQ(t->encode("Hello<|a|>b<|a|>world"), (Ids{259, 301, 300, 'w', 261, 263}));
  EXPECT_EQ(t->encode("<|a|"), bytes_of("<|a|"));  // a truncated token is text
  EXPECT_EQ(t->encode("x<think>"), (Ids{'x', 302}));
  EXPECT_TRUE(t->is_special(300));
  EXPECT_FALSE(t->is_special(302));
  EXPECT_FALSE(t->is_special('a'));
  EXPECT_EQ(t->vocab_size(), 303);
  EXPECT_EQ(t->token_to_id("<|a|>"), 300);
  EXPECT_EQ(t->token_to_id(bl(" world")), 264);
  EXPECT_EQ(t->token_to_id("nope"), std::nullopt);
  EXPECT_EQ(t->token_bytes(264), " world");
  EXPECT_EQ(t->token_bytes(300), "<|a|>");
  EXPECT_THROW(t->token_bytes(9999), Error);
  // decode: added tokens are their content; skip_special drops special ones only.
  const Ids ids = t->encode("Hello<|a|> world<think>");
  EXPECT_EQ(t->decode(ids), "Hello<|a|> world<think>");
  EXPECT_EQ(t->decode(ids, true), "Hello world<think>");
}

TEST(Tokenizer, AddedTokensLstripRstrip) {
  Spec s = hello_spec();
  json l = added_token(300, "<L>"), r = added_token(301, "<R>");
  l["lstrip"] = true;
  r["rstrip"] = true;
  s.added = json::array({l, r});
  auto t = load(s.build());
  // lstrip eats the whitespace (JavaScript's, so U+FEFF too) before <L>; rstrip after <R>.
  EXPECT_EQ(t->encode("Hello \t\xEF\xBB\xBF<L> world"), (Ids{259, 300, 264}));
  EXPECT_EQ(t->encode("Hello <R> \n world"), (Ids{259, ' ', 301, 'w', 261, 263}));
  EXPECT_EQ(t->encode("   <L><R>   "), (Ids{300, 301}));
}

TEST(Tokenizer, AddedTokenSingleWord) {
  Spec s = hello_spec();
  json w = added_token(300, "cat");
  w["single_word"] = true;
  s.added = json::array({w});
  auto t = load(s.build());
  EXPECT_EQ(t->encode("a cat!"), (Ids{'a', ' ', 300, '!'}));
  EXPECT_EQ(t->encode("concat"), bytes_of("concat"));
}

TEST(Tokenizer, NfcNormalizer) {
  Spec s = hello_spec();
  s.normalizer = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFC"}}})}};
  auto t = load(s.build());
  // "e" + COMBINING ACUTE composes to U+00E9 before tokenization; ANGSTROM SIGN becomes U+00C5.
  EXPECT_EQ(t->encode("e\xCC\x81"), bytes_of("\xC3\xA9"));
  EXPECT_EQ(t->encode("\xE2\x84\xAB"), bytes_of("\xC3\x85"));
  EXPECT_EQ(t->decode(t->encode("Cafe\xCC\x81 x")), "Caf\xC3\xA9 x");
  // Without the normalizer the decomposed form is kept.
  EXPECT_EQ(load(hello_spec().build())->encode("e\xCC\x81"), bytes_of("e\xCC\x81"));
}

TEST(Tokenizer, NormalizedAddedTokenMatchesAfterNormalization) {
  Spec s = hello_spec();
  s.normalizer = {{"type", "NFC"}};
  json tok = added_token(300, "\xC3\xA9t\xC3\xA9", false);  // "été"
  tok["normalized"] = true;
  s.added = json::array({tok});
  auto t = load(s.build());
  EXPECT_EQ(t->encode("e\xCC\x81te\xCC\x81!"), (Ids{300, '!'}));
}

TEST(Tokenizer, TemplatePostProcessorOnlyWithAddSpecialTokens) {
  Spec s = hello_spec();
  s.added = json::array({added_token(300, "<s>"), added_token(301, "</s>")});
  s.post_processor = json::parse(R"({"type": "Sequence", "processors": [
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
      {"type": "TemplateProcessing",
       "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                  {"SpecialToken": {"id": "</s>", "type_id": 0}}],
       "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [300], "tokens": ["<s>"]},
                                       "</s>": {"id": "</s>", "ids": [301], "tokens": ["</s>"]}}}]})");
  auto t = load(s.build());
  EXPECT_EQ(t->encode("Hello", false), (Ids{259}));
  EXPECT_EQ(t->encode("Hello", true), (Ids{300, 259, 301}));
  EXPECT_EQ(t->encode("", true), (Ids{300, 301}));
}

TEST(Tokenizer, DecodeReplacesInvalidUtf8LikeTextDecoder) {
  auto t = load(hello_spec().build());
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(t->decode(Ids{0xE4}), fffd);
  EXPECT_EQ(t->decode(Ids{0xE4, 0xB8}), fffd);  // one maximal subpart
  EXPECT_EQ(t->decode(Ids{0xE4, 0xB8, 0xAD}), "\xE4\xB8\xAD");
  EXPECT_EQ(t->decode(Ids{0xC0, 0x80}), fffd + fffd);                // overlong: not a prefix
  EXPECT_EQ(t->decode(Ids{0xED, 0xA0, 0x80}), fffd + fffd + fffd);   // surrogate
  EXPECT_EQ(t->decode(Ids{0xF0, 0x9F, 0x98, 'x'}), fffd + "x");
  EXPECT_EQ(t->decode(Ids{0xE4, 'a', 0xB8}), fffd + "a" + fffd);
  EXPECT_EQ(t->decode(Ids{0xF4, 0x90, 0x80, 0x80}), fffd + fffd + fffd + fffd);  // > U+10FFFF
  EXPECT_EQ(t->decode(Ids{0xFF}), fffd);
  EXPECT_THROW(t->decode(Ids{-1}), Error);
  EXPECT_THROW(t->decode(Ids{100000}), Error);
}

TEST(Tokenizer, InvalidUtf8InputDoesNotCrash) {
  auto t = load(hello_spec().build());
  const std::string bad = std::string("a\xFF\xE4\xB8 b\xC0", 7);
  const Ids ids = t->encode(bad);
  EXPECT_EQ(t->decode(ids), "a\xEF\xBF\xBD\xEF\xBF\xBD b\xEF\xBF\xBD");
}

TEST(Tokenizer, EmbeddedNulAndControlCharacters) {
  auto t = load(hello_spec().build());
  const std::string text("a\0b\x01\x7F", 5);
  EXPECT_EQ(t->encode(text), bytes_of(text));
  EXPECT_EQ(t->decode(t->encode(text)), text);
}

TEST(StreamDecoder, HoldsBackSplitCharacter) {
  auto t = load(hello_spec().build());
  StreamDecoder d(*t);
  EXPECT_EQ(d.push('a'), "a");
  EXPECT_EQ(d.push(0xE4), "");  // 中 = E4 B8 AD, one byte token at a time
  EXPECT_EQ(d.push(0xB8), "");
  EXPECT_EQ(d.push(0xAD), "\xE4\xB8\xAD");
  EXPECT_EQ(d.push(0xF0), "");  // 😀 = F0 9F 98 80, cut off by an ASCII byte
  EXPECT_EQ(d.push(0x9F), "");
  EXPECT_EQ(d.push('!'), "\xEF\xBF\xBD!");
  EXPECT_EQ(d.push(0xC3), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(d.flush(), "");
}

TEST(StreamDecoder, IdsPastTheVocabularyGiveNoText) {
  auto t = load(hello_spec().build());
  StreamDecoder d(*t);
  EXPECT_EQ(d.push('a'), "a");
  EXPECT_EQ(d.push(t->vocab_size()), "");  // a model's padding row
  EXPECT_EQ(d.push(-1), "");
  EXPECT_EQ(d.push('b'), "b");
  EXPECT_THROW(t->decode(Ids{t->vocab_size()}), Error);  // decode itself stays strict
}

TEST(StreamDecoder, ConcatenationEqualsDecode) {
  Spec s = hello_spec();
  s.added = json::array({added_token(300, "<|im_end|>")});
  auto t = load(s.build());
  const Ids ids{259, 0xE4, 0xB8, 300, 0xAD, 0xF0, 0x9F, 0x98, 0x80, 264, 0xE4};
  for (bool skip : {false, true}) {
    StreamDecoder d(*t, skip);
    std::string out;
    for (int32_t id : ids) out += d.push(id);
    out += d.flush();
    EXPECT_EQ(out, t->decode(ids, skip));
  }
}

TEST(Tokenizer, ConcurrentEncodeIsConsistent) {
  auto t = load(hello_spec().build());
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "Hello world " + std::to_string(i) + " ";
  const Ids expected = t->encode(text);
  std::vector<Ids> got(4);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) threads.emplace_back([&, k] { got[k] = t->encode(text); });
  for (auto& th : threads) th.join();
  for (const Ids& g : got) EXPECT_EQ(g, expected);
}

// ---------------------------------------------------------------------------------------------
// Errors name the file and the field.
void expect_error(const std::string& path, const std::string& needle) {
  try {
    Tokenizer::from_file(path);
    ADD_FAILURE() << "no error for " << path;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

TEST(TokenizerErrors, MalformedJson) {
  TempDir dir;
  expect_error(dir.write("tokenizer.json", "{\"model\": {\"vocab\": {"), "invalid JSON");
}

TEST(TokenizerErrors, MissingFile) {
  TempDir dir;
  EXPECT_THROW(Tokenizer::from_file(dir.path() + "/nope.json"), Error);
  try {
    Tokenizer::from_dir(dir.path());
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
}

TEST(TokenizerErrors, MissingVocab) {
  TempDir dir;
  json j = hello_spec().build();
  j["model"].erase("vocab");
  expect_error(dir.write("t.json", j.dump()), "model.vocab");
}

TEST(TokenizerErrors, MergeWithUnknownToken) {
  TempDir dir;
  Spec s = hello_spec();
  s.merges.insert(s.merges.begin() + 2, {"zz", "q"});  // "zz" is not a token
  expect_error(dir.write("t.json", s.build().dump()), "model.merges[2]");
  s = hello_spec();
  s.merges.push_back({"x", "y"});  // both known, "xy" is not
  expect_error(dir.write("t.json", s.build().dump()), "model.merges[9]");
  json j = hello_spec().build();
  j["model"]["merges"][0] = "Hello";  // no space
  expect_error(dir.write("t.json", j.dump()), "model.merges[0]");
}

TEST(TokenizerErrors, UnsupportedComponents) {
  TempDir dir;
  json j = hello_spec().build();
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  expect_error(dir.write("t.json", j.dump()), "pre_tokenizer.type");
  j = hello_spec().build();
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFC"}}, {{"type", "Lowercase"}}})}};
  expect_error(dir.write("t.json", j.dump()), "normalizer.normalizers[1].type");
  j = hello_spec().build();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  expect_error(dir.write("t.json", j.dump()), "pre_tokenizer.pattern.Regex");
  j = hello_spec().build();
  j["added_tokens"] = json::array({{{"content", "<x>"}}});
  expect_error(dir.write("t.json", j.dump()), "added_tokens[0].id");
  j = hello_spec().build();
  j["post_processor"] = json::parse(R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [999], "tokens": ["<s>"]}}})");
  expect_error(dir.write("t.json", j.dump()), "post_processor.special_tokens[\"<s>\"].ids");
  j["post_processor"].erase("special_tokens");  // then the token itself must exist
  expect_error(dir.write("t.json", j.dump()), "post_processor.single[0].SpecialToken.id");
  j = hello_spec().build();
  j["model"]["vocab"]["Hello"] = "x";
  expect_error(dir.write("t.json", j.dump()), "model.vocab[\"Hello\"]");
}

// Ids far past the file's tokens are refused before any table is sized by them, naming the file,
// the token and the id; negative ids too.
std::string load_error(const std::string& path, size_t* largest_alloc) {
  g_largest_alloc = 0;
  g_track_alloc = true;
  std::string msg = "(no error)";
  try {
    Tokenizer::from_file(path);
  } catch (const Error& e) {
    msg = e.what();
  } catch (const std::exception& e) {
    msg = std::string("not an Error: ") + e.what();
  }
  g_track_alloc = false;
  *largest_alloc = g_largest_alloc;
  return msg;
}

TEST(TokenizerErrors, HugeOrNegativeIdsAreRefusedWithoutAllocating) {
  TempDir dir;
  constexpr size_t kSmall = 16 << 20;  // the file's own tables need well under 1 MB
  struct Case {
    const char* what;
    json id;
    std::string needle;
  };
  const Case cases[] = {{"1e9", 1000000000, "1000000000"},
                        {"1e8", 100000000, "100000000"},
                        {"2^40", int64_t(1) << 40, "1099511627776"},
                        {"past int64", json::parse("18446744073709551615"), "18446744073709551615"},
                        {"negative", -5, "-5"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    json j = hello_spec().build();
    j["model"]["vocab"][bl("Hello")] = c.id;
    const std::string path = dir.write("vocab.json", j.dump());
    size_t largest = 0;
    std::string err = load_error(path, &largest);
    EXPECT_NE(err.find(path), std::string::npos) << err;
    EXPECT_NE(err.find("model.vocab"), std::string::npos) << err;
    EXPECT_NE(err.find("token '" + bl("Hello") + "'"), std::string::npos) << err;
    EXPECT_NE(err.find(" " + c.needle), std::string::npos) << err;
    EXPECT_LT(largest, kSmall);

    Spec s = hello_spec();
    s.added = json::array({added_token(300, "<|a|>"), added_token(0, "<|big|>")});
    j = s.build();
    j["added_tokens"][1]["id"] = c.id;
    const std::string added = dir.write("added.json", j.dump());
    err = load_error(added, &largest);
    EXPECT_NE(err.find(added), std::string::npos) << err;
    EXPECT_NE(err.find("added_tokens[1].id"), std::string::npos) << err;
    EXPECT_NE(err.find("token '<|big|>'"), std::string::npos) << err;
    EXPECT_NE(err.find(" " + c.needle), std::string::npos) << err;
    EXPECT_LT(largest, kSmall);
  }
}

// Gaps in the id range stay allowed (specials at 300 after 265 tokens; tiktoken conversions skip
// ids; TokenShards tests put a special at 70000): up to twice the file's token count plus 2^20.
TEST(TokenizerErrors, IdGapsUpToTheBoundLoad) {
  Spec s = hello_spec();  // 265 vocab tokens
  const int tokens = 265 + 1, limit = 2 * tokens + (1 << 20);
  s.added = json::array({added_token(limit - 1, "<|far|>")});
  auto t = load(s.build());
  EXPECT_EQ(t->vocab_size(), limit);
  EXPECT_EQ(t->encode("a<|far|>"), (Ids{'a', limit - 1}));
  EXPECT_EQ(t->decode(Ids{264, limit - 1}), " world<|far|>");
  s.added[0]["id"] = limit;
  TempDir dir;
  expect_error(dir.write("t.json", s.build().dump()), "below " + std::to_string(limit));
}

// ---------------------------------------------------------------------------------------------
// The JavaScript regex semantics the pre-tokenizer relies on.
std::vector<std::string> matches(const std::string& pattern, const std::string& text) {
  tokenizer_detail::JsRegex re(pattern);
  std::vector<std::string> out;
  for (auto [b, e] : re.find_all(text)) out.push_back(text.substr(b, e - b));
  return out;
}

TEST(JsRegex, WhitespaceIsJavaScripts) {
  // U+FEFF is \s in JavaScript; U+0085 and U+180E are not (PCRE2's Unicode \s has them).
  EXPECT_EQ(matches("\\s+", "a\xEF\xBB\xBF\xC2\xA0\xE3\x80\x80" "b"), (std::vector<std::string>{"\xEF\xBB\xBF\xC2\xA0\xE3\x80\x80"}));
  EXPECT_TRUE(matches("\\s", "\xC2\x85\xE1\xA0\x8E").empty());
  EXPECT_EQ(matches("\\S+", "\xC2\x85x"), (std::vector<std::string>{"\xC2\x85x"}));
  EXPECT_EQ(matches("[^\\s]+", "a\xEF\xBB\xBF" "b"), (std::vector<std::string>{"a", "b"}));
}

TEST(JsRegex, LettersFollowNodesUnicodeVersion) {
  // U+31350 (CJK Extension H, Unicode 15) is a letter for Node but unassigned in older tables.
  EXPECT_EQ(matches("\\p{L}+", "x\xF0\xB1\x8D\x90y"), (std::vector<std::string>{"x\xF0\xB1\x8D\x90y"}));
  EXPECT_EQ(matches("[^\\p{L}]+", "a1\xF0\xB1\x8D\x90"), (std::vector<std::string>{"1"}));
}

TEST(JsRegex, AsciiShorthandsAndCaseInsensitiveContractions) {
  EXPECT_EQ(matches("\\d+", "12\xD9\xA3"), (std::vector<std::string>{"12"}));  // Arabic-Indic 3 is not \d
  EXPECT_EQ(matches("\\w+", "ab\xC3\xA9"), (std::vector<std::string>{"ab"}));
  // (?i:'s...) is expanded to explicit ASCII cases, so 's' LONG S does not match.
  EXPECT_EQ(matches("(?i:'s|'t|'re|'ve|'m|'ll|'d)", "'S'\xC5\xBF'Ll"), (std::vector<std::string>{"'S", "'Ll"}));
  EXPECT_EQ(matches("\\u0041+", "AAb"), (std::vector<std::string>{"AA"}));
}

TEST(JsRegex, EmptyMatchesAdvanceOneCodePoint) {
  EXPECT_EQ(matches("x*", "\xE4\xB8\xAD" "xx"), (std::vector<std::string>{"", "xx", ""}));
}

// ---------------------------------------------------------------------------------------------
// NFC: utf8proc, with JavaScript's (newer) Unicode data for the code points where they differ.
TEST(Normalization, TablePathAgreesWithUtf8procOnOldCharacters) {
  using tokenizer_detail::normalize_with_js_tables;
  const std::vector<std::string> samples = {
      "e\xCC\x81", "\xE2\x84\xAB", "a\xCC\xA3\xCC\x82", "a\xCC\x82\xCC\xA3", "\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8",
      "\xE0\xA5\x98", "\xEF\xA4\x80", "\xE1\xB8\x8B\xCC\xA3", "q\xCC\x87\xCC\xA3", "\xE0\xBD\xB3",
      "\xCD\x84", "<\xCC\xB8", "\xE0\xAD\x87\xE0\xAC\xBE", "A\xCC\x80\xCC\x95\xCC\x80", "\xE3\x81\x8B\xE3\x82\x99",
      "Stra\xC3\x9F" "e caf\xC3\xA9 \xE4\xB8\xAD\xED\x95\x9C"};
  for (const std::string& s : samples) {
    EXPECT_EQ(normalize_with_js_tables(s, true), tokenizer_detail::normalize(s, tokenizer_detail::NormForm::NFC)) << s;
    EXPECT_EQ(normalize_with_js_tables(s, false), tokenizer_detail::normalize(s, tokenizer_detail::NormForm::NFD)) << s;
  }
}

TEST(Normalization, NewerCharactersFollowJavaScript) {
  using tokenizer_detail::NormForm;
  // U+1AE0 (Unicode 17) has combining class 230, so U+0323 (220) is reordered before it and
  // composes with the "a": a + U+1AE0 + U+0323 -> U+1EA1 + U+1AE0.
  EXPECT_EQ(tokenizer_detail::normalize("a\xE1\xAB\xA0\xCC\xA3", NormForm::NFC), "\xE1\xBA\xA1\xE1\xAB\xA0");
  // U+105C9 TODHRI LETTER EI (Unicode 16) = U+105D2 + U+0307.
  EXPECT_EQ(tokenizer_detail::normalize("\xF0\x90\x97\x92\xCC\x87", NormForm::NFC), "\xF0\x90\x97\x89");
  EXPECT_EQ(tokenizer_detail::normalize("\xF0\x90\x97\x89", NormForm::NFD), "\xF0\x90\x97\x92\xCC\x87");
  // A three-code-point decomposition (Gurung Khema, Unicode 16): U+1611E U+1611E U+1611F
  // composes to U+16126 (via U+16121 = U+1611E + U+1611E).
  EXPECT_EQ(tokenizer_detail::normalize("\xF0\x96\x84\x9E\xF0\x96\x84\x9E\xF0\x96\x84\x9F", NormForm::NFC),
            "\xF0\x96\x84\xA6");
  // Marking U+0307 for the new composition must not stop ordinary compositions with it.
  EXPECT_EQ(tokenizer_detail::normalize("I\xCC\x87\xE1\xAB\xA0", NormForm::NFC), "\xC4\xB0\xE1\xAB\xA0");

  Spec s = hello_spec();
  s.normalizer = {{"type", "NFC"}};
  auto t = load(s.build());
  EXPECT_EQ(t->encode("a\xE1\xAB\xA0\xCC\xA3"), bytes_of("\xE1\xBA\xA1\xE1\xAB\xA0"));
}

// ---------------------------------------------------------------------------------------------
TEST(ChatTemplate, ChatMLAndLlama3) {
  const std::vector<ChatMessage> msgs{{"system", "Be brief."}, {"user", "  Hi!\n"}};
  EXPECT_EQ(apply_chat_template(ChatFormat::ChatML, msgs),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n  Hi!\n<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(apply_chat_template(ChatFormat::ChatML, msgs, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n  Hi!\n<|im_end|>\n");
  EXPECT_EQ(apply_chat_template(ChatFormat::Llama3, msgs),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(apply_chat_template(ChatFormat::Llama3, {}, false), "<|begin_of_text|>");
}

TEST(ChatTemplate, DetectAndStopTokens) {
  Spec chatml = hello_spec();
  chatml.added = json::array({added_token(300, "<|endoftext|>"), added_token(301, "<|im_start|>"), added_token(302, "<|im_end|>")});
  auto a = load(chatml.build());
  EXPECT_EQ(detect_chat_format(*a), ChatFormat::ChatML);
  EXPECT_EQ(chat_stop_tokens(*a, ChatFormat::ChatML), (Ids{302, 300}));
  // The template's specials become single ids.
  const Ids ids = a->encode(apply_chat_template(ChatFormat::ChatML, {{"user", "Hello"}}));
  EXPECT_EQ(ids.front(), 301);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 302), 1);

  Spec llama = hello_spec();
  llama.added = json::array({added_token(300, "<|begin_of_text|>"), added_token(301, "<|end_of_text|>"),
                             added_token(302, "<|start_header_id|>"), added_token(303, "<|end_header_id|>"),
                             added_token(304, "<|eot_id|>")});
  auto b = load(llama.build());
  EXPECT_EQ(detect_chat_format(*b), ChatFormat::Llama3);
  EXPECT_EQ(chat_stop_tokens(*b, ChatFormat::Llama3), (Ids{304, 301}));
  EXPECT_THROW(detect_chat_format(*load(hello_spec().build())), Error);
}

}  // namespace
}  // namespace dspark
