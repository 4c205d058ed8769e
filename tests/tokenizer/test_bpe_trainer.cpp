// Tests of the byte-level BPE trainer (src/tokenizer/bpe_trainer.h): hand-computed merges and
// tie-breaking, agreement with a from-scratch reference BPE, round trips through the trained
// tokenizer.json with dspark's loader, compression, determinism, merge consistency and inputs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <unistd.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/js_regex.h"
#include "tokenizer/tokenizer.h"

namespace dspark {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Ids = std::vector<int32_t>;
using Merge = std::pair<std::string, std::string>;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("dspark_bpe_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string write(const std::string& name, const std::string& content) const {
    const fs::path p = path_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
  }
  std::string path(const std::string& name = "") const { return (path_ / name).string(); }

 private:
  fs::path path_;
  static inline int counter_ = 0;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The merges of a model as byte strings.
std::vector<Merge> merge_bytes(const BpeModel& m) {
  std::vector<Merge> out;
  for (const auto& [l, r] : m.merges)
    out.emplace_back(m.tokens[static_cast<size_t>(l)], m.tokens[static_cast<size_t>(r)]);
  return out;
}

BpeModel train_texts(const std::vector<std::string>& texts, int vocab_size,
                     int64_t min_frequency = 2, int threads = 2) {
  std::vector<BpeTrainInput> in;
  for (const std::string& t : texts) in.push_back(BpeTrainInput::text(t));
  BpeTrainOptions o;
  o.vocab_size = vocab_size;
  o.min_frequency = min_frequency;
  o.threads = threads;
  return train_bpe(in, o);
}

// ---------------------------------------------------------------------------------------------
// Deterministic text of many kinds (a xorshift generator, so it is the same on every platform).
class TextGen {
 public:
  explicit TextGen(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    s_ ^= s_ << 13;
    s_ ^= s_ >> 7;
    s_ ^= s_ << 17;
    return s_;
  }
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[below(v.size())];
  }

  std::string prose_sentence() {
    static const std::vector<std::string> words = {
        "the",     "of",       "and",     "to",          "in",           "is",        "that",
        "for",     "it",       "with",    "as",          "was",          "on",        "be",
        "by",      "this",     "are",     "from",        "at",           "or",        "an",
        "which",   "model",    "token",   "speculative", "decoding",     "draft",     "verify",
        "accept",  "reject",   "sample",  "probability", "distribution", "library",   "river",
        "morning", "students", "history", "science",     "memory",       "bandwidth", "kernel",
        "matrix",  "vector",   "thread",  "don't",       "it's",         "we're",     "they've",
        "I'm",     "you'll",   "she'd",   "Python",      "Linux",        "Debian",    "BPE"};
    std::string s;
    const size_t n = 4 + below(12);
    for (size_t i = 0; i < n; ++i) {
      std::string w = below(3) == 0 ? pseudo_word() : pick(words);
      if (i == 0 && w[0] >= 'a' && w[0] <= 'z') w[0] = static_cast<char>(w[0] - 32);
      if (i) s += below(20) == 0 ? ", " : " ";
      s += w;
      if (below(15) == 0) s += " " + std::to_string(below(100000));
      if (below(30) == 0)
        s += " (" + std::to_string(below(100)) + "." + std::to_string(below(100)) + "%)";
    }
    s += pick(std::vector<std::string>{".", ".", ".", "!", "?", "...", ":"});
    return s;
  }
  // A made-up word from syllables: many distinct words, so the corpus does not run out of pairs.
  std::string pseudo_word() {
    static const std::vector<std::string> syl = {"ka",  "re",  "sto", "mi", "lun", "dra", "ve",
                                                 "pho", "tiq", "zen", "ar", "bel", "cor", "nu",
                                                 "ish", "gla", "wem", "ox", "yu",  "tha"};
    std::string w;
    const size_t n = 1 + below(4);
    for (size_t i = 0; i < n; ++i) w += pick(syl);
    return w;
  }
  std::string foreign() {
    static const std::vector<std::string> words = {"café",
                                                   "élève",
                                                   "naïve",
                                                   "façade",
                                                   "Straße",
                                                   "Größe",
                                                   "über",
                                                   "Москва",
                                                   "ёжик",
                                                   "булок",
                                                   "Ελλάδα",
                                                   "ἀρχή",
                                                   "שָׁלוֹם",
                                                   "مرحبا",
                                                   "بالعالم",
                                                   "नमस्ते",
                                                   "क्षत्रिय",
                                                   "ภาษาไทย",
                                                   "我们",
                                                   "今天",
                                                   "北京",
                                                   "中文",
                                                   "日本語",
                                                   "ひらがな",
                                                   "カタカナ",
                                                   "ｶﾀｶﾅ",
                                                   "안녕하세요",
                                                   "한국어",
                                                   "Zażółć",
                                                   "gęślą",
                                                   "İstanbul",
                                                   "ılık",
                                                   "e\xcc\x81",
                                                   "n\xcc\x83o",
                                                   "\xef\xbb\xbf"
                                                   "BOM"};
    std::string s;
    const size_t n = 2 + below(8);
    for (size_t i = 0; i < n; ++i) s += (i ? " " : "") + pick(words);
    return s;
  }
  std::string emoji() {
    static const std::vector<std::string> e = {
        "🎉",    "😀",    "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "🇯🇵", "❤️", "🚀", "✨",
        "🤖", "🧪", "☕"};
    std::string s;
    const size_t n = 1 + below(4);
    for (size_t i = 0; i < n; ++i) s += pick(e);
    return s;
  }
  std::string code() {
    const std::string id =
        pick(std::vector<std::string>{"foo", "bar", "compute_sum", "parse", "x1", "buffer_len"});
    switch (below(3)) {
      case 0:
        return "def " + id +
               "(x, y=None):\n    \"\"\"Docstring.\"\"\"\n    if x is None:\n        return [i ** "
               "2 for i in range(" +
               std::to_string(below(1000)) + ")]\n    return {'k': x, \"v\": y}\n";
      case 1:
        return "#include <vector>\nint " + id +
               "(const std::vector<int>& v) {\n\tint s = 0;\n\tfor (auto x : v) s += x << "
               "2;\n\treturn s; // sum\n}\n";
      default:
        return "const " + id +
               " = async (a, b) => {\n  await fetch(`/api/${a}?q=${b}`);\n  return a !== b && a "
               ">= " +
               std::to_string(below(50)) + ";\n};\n";
    }
  }
  std::string whitespace() {
    return pick(std::vector<std::string>{"  ", "   ", "\t", "\t\t", "\n\n\n", "\r\n", " \n ",
                                         "    \n", "\u00a0", "\u3000", "\n \n"});
  }
  std::string chat() {
    return "<|im_start|>user\n" + prose_sentence() + "<|im_end|>\n<|im_start|>assistant\n" +
           prose_sentence() + "<|im_end|>\n";
  }
  // One document.
  std::string document() {
    std::string d;
    const size_t parts = 3 + below(10);
    for (size_t i = 0; i < parts; ++i) {
      switch (below(10)) {
        case 0:
          d += foreign();
          break;
        case 1:
          d += emoji();
          break;
        case 2:
          d += code();
          break;
        case 3:
          d += whitespace();
          break;
        case 4:
          d += chat();
          break;
        case 5:
          d += std::to_string(next() % 1000000000);
          break;
        default:
          d += prose_sentence();
          break;
      }
      d += below(4) == 0 ? "\n" : " ";
    }
    if (below(8) == 0) d += "<|endoftext|>";
    return d;
  }
  std::string corpus(size_t bytes) {
    std::string c;
    while (c.size() < bytes) c += document() + "\n";
    return c;
  }
  // Random code points from many blocks (no surrogates), with ASCII and spaces mixed in.
  std::string random_unicode(size_t n) {
    static const std::vector<std::pair<uint32_t, uint32_t>> ranges = {
        {0x20, 0x7E},       {0x09, 0x0D},        {0xA0, 0x24F},      {0x300, 0x36F},
        {0x370, 0x3FF},     {0x400, 0x4FF},      {0x590, 0x6FF},     {0x900, 0x97F},
        {0xE00, 0xE7F},     {0x1100, 0x11FF},    {0x2000, 0x206F},   {0x3040, 0x30FF},
        {0x4E00, 0x9FFF},   {0xAC00, 0xD7A3},    {0xE000, 0xE0FF},   {0xFE00, 0xFE0F},
        {0xFF00, 0xFFEF},   {0xFFF0, 0xFFFF},    {0x1F300, 0x1FAFF}, {0x10000, 0x1007F},
        {0xE0000, 0xE007F}, {0x10FF00, 0x10FFFF}};
    std::string s;
    for (size_t i = 0; i < n; ++i) {
      const auto [lo, hi] = pick(ranges);
      const uint32_t cp = lo + static_cast<uint32_t>(below(hi - lo + 1));
      if (cp < 0x80) {
        s += static_cast<char>(cp);
      } else if (cp < 0x800) {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        s += static_cast<char>(0xE0 | (cp >> 12));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        s += static_cast<char>(0xF0 | (cp >> 18));
        s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
      }
    }
    return s;
  }

 private:
  uint64_t s_;
};

// A reference BPE that recounts every pair after every merge (slow, obviously right).
std::vector<Merge> reference_bpe(const std::string& text, size_t n_merges, int64_t min_frequency) {
  tokenizer_detail::JsRegex re(kQwen2SplitPattern);
  std::map<std::string, int64_t> counts;
  for (auto [b, e] : re.find_all(text)) ++counts[text.substr(b, e - b)];
  std::vector<std::pair<std::vector<std::string>, int64_t>> words;
  for (const auto& [w, c] : counts) {
    std::vector<std::string> syms;
    for (char ch : w) syms.emplace_back(1, ch);
    words.emplace_back(syms, c);
  }
  std::vector<Merge> merges;
  while (merges.size() < n_merges) {
    std::map<Merge, int64_t> pairs;
    for (const auto& [syms, c] : words)
      for (size_t i = 0; i + 1 < syms.size(); ++i) pairs[{syms[i], syms[i + 1]}] += c;
    const Merge* best = nullptr;
    int64_t best_count = 0;
    for (const auto& [p, c] : pairs)  // in (left, right) byte order: the first of the highest wins
      if (c > best_count) best = &p, best_count = c;
    if (!best || best_count < min_frequency) break;
    const Merge m = *best;
    merges.push_back(m);
    for (auto& [syms, c] : words) {
      std::vector<std::string> out;
      for (size_t i = 0; i < syms.size(); ++i) {
        if (i + 1 < syms.size() && syms[i] == m.first && syms[i + 1] == m.second) {
          out.push_back(m.first + m.second);
          ++i;
        } else {
          out.push_back(syms[i]);
        }
      }
      syms = std::move(out);
    }
  }
  return merges;
}

// A trained tokenizer shared by several tests (trained once).
struct Trained {
  TempDir dir;
  std::string corpus;
  BpeModel model;
  std::string path;
  std::unique_ptr<Tokenizer> tok;
  static constexpr int kVocab = 2048;
};
Trained& trained() {
  static const std::unique_ptr<Trained> t = [] {
    auto t = std::make_unique<Trained>();
    t->corpus = TextGen(1).corpus(300000);
    const std::string file = t->dir.write("corpus.txt", t->corpus);
    BpeTrainOptions o;
    o.vocab_size = Trained::kVocab;
    o.threads = 2;
    t->path = t->dir.path("out/tokenizer.json");
    t->model = train_bpe_tokenizer({BpeTrainInput::text_file(file)}, o, t->path);
    t->tok = Tokenizer::from_file(t->path);
    return t;
  }();
  return *t;
}

// ---------------------------------------------------------------------------------------------

TEST(BpeTrainer, HandComputedMerges) {
  // "aaabdaaabac" is one pre-token. Pairs: aa 4, ab 2, bd da ba ac 1.
  // 1. (a,a): aa a b d aa a b a c   -> (aa,a) 2, (a,b) 2: tie, "a"+"b" sorts before "aa"+"a"
  // 2. (a,b): aa ab d aa ab a c     -> (aa,ab) 2
  // 3. (aa,ab): aaab d aaab a c     -> every pair once: below min_frequency 2, stop.
  const BpeModel m = train_texts({"aaabdaaabac"}, 300);
  EXPECT_EQ(merge_bytes(m), (std::vector<Merge>{{"a", "a"}, {"a", "b"}, {"aa", "ab"}}));
  ASSERT_EQ(m.tokens.size(), 259u);
  EXPECT_EQ(m.tokens[256], "aa");
  EXPECT_EQ(m.tokens[257], "ab");
  EXPECT_EQ(m.tokens[258], "aaab");
  // The vocabulary is filled up with reserved tokens.
  EXPECT_EQ(m.vocab_size(), 300);
  EXPECT_EQ(m.added_tokens[0], "<|endoftext|>");
  EXPECT_EQ(m.added_tokens[3], "<|mask|>");
  EXPECT_EQ(m.added_tokens.back(), "<|reserved_" + std::to_string(300 - 259 - 4 - 1) + "|>");

  // min_frequency 1 goes on: all pairs count 1; (a,c) has the smallest bytes.
  const BpeModel m1 = train_texts({"aaabdaaabac"}, 262 + 16, 1);
  const std::vector<Merge> mb = merge_bytes(m1);
  ASSERT_GE(mb.size(), 4u);
  EXPECT_EQ(mb[3], Merge("a", "c"));
}

TEST(BpeTrainer, TiesBrokenByBytesNotIds) {
  // Words: "ab" 1, " ab" 2, " cd" 2. (a,b) 3 first; then (" ",ab), (" ",c), (c,d) all count 2:
  // byte order takes " "+"ab", then " "+"c", then " c"+"d". (By ids, 'c','d' (66, 67) would
  // come before ' ' (220).)
  const BpeModel m = train_texts({"ab ab ab cd cd"}, 256 + 16 + 4);
  EXPECT_EQ(merge_bytes(m), (std::vector<Merge>{{"a", "b"}, {" ", "ab"}, {" ", "c"}, {" c", "d"}}));
  // Counts weigh words by frequency: "xyxy" 1, " zw" 3 -> (" ",z) 3 and (z,w) 3 beat (x,y) 2;
  // of those two, " " sorts first (by ids, (z,w) = (89, 86) would win over (220, 89)).
  const BpeModel w = train_texts({"xyxy zw zw zw"}, 256 + 16 + 1);
  EXPECT_EQ(merge_bytes(w), (std::vector<Merge>{{" ", "z"}}));
}

TEST(BpeTrainer, BaseVocabularyIsGpt2ByteOrder) {
  const BpeModel m = train_texts({"x"}, 272);
  ASSERT_EQ(m.tokens.size(), 256u);
  EXPECT_EQ(m.tokens[0], "!");
  EXPECT_EQ(m.tokens[93], "~");
  EXPECT_EQ(m.tokens[94], "\xA1");
  EXPECT_EQ(m.tokens[188], std::string(1, '\0'));
  EXPECT_EQ(m.tokens[188 + 32], " ");
  EXPECT_EQ(bpe_bytes_to_bytelevel(" \n\xff"), "\xC4\xA0\xC4\x8A\xC3\xBF");  // "Ġ", "Ċ", "ÿ"
}

TEST(BpeTrainer, MatchesFromScratchReference) {
  const std::string text = TextGen(7).corpus(40000);
  // The reference does not split special tokens out; remove them from its input and ours.
  std::string plain;
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 2, "<|") == 0) {
      const size_t e = text.find("|>", i);
      i = e + 2;
      continue;
    }
    plain += text[i++];
  }
  constexpr size_t kMerges = 300;
  const std::vector<Merge> ref = reference_bpe(plain, kMerges, 2);
  const BpeModel m = train_texts({plain}, static_cast<int>(256 + 16 + kMerges));
  ASSERT_EQ(ref.size(), kMerges);
  EXPECT_EQ(merge_bytes(m), ref);
}

TEST(BpeTrainer, SpecialTokensAreSplitOutAndNotLearned) {
  std::string text;
  for (int i = 0; i < 500; ++i) text += "<|im_start|>user\nhello there<|im_end|>\n<|endoftext|>";
  const BpeModel m = train_texts({text}, 512);
  EXPECT_EQ(m.stats.special_tokens_seen, 1500);
  for (const std::string& t : m.tokens) {
    EXPECT_EQ(t.find("<|"), std::string::npos) << t;
    EXPECT_EQ(t.find("|>"), std::string::npos) << t;
    EXPECT_EQ(t.find("im_"), std::string::npos) << t;
  }
  // The words around them are learned.
  EXPECT_NE(std::find(m.tokens.begin(), m.tokens.end(), " there"), m.tokens.end());
}

TEST(BpeTrainer, RoundTripsThroughTheLoader) {
  Trained& t = trained();
  const Tokenizer& tok = *t.tok;
  EXPECT_EQ(tok.vocab_size(), Trained::kVocab);
  EXPECT_EQ(t.model.vocab_size(), Trained::kVocab);
  EXPECT_EQ(static_cast<int>(t.model.tokens.size()),
            Trained::kVocab - 16);  // the corpus has enough pairs

  // Special tokens: single ids right after the learned vocabulary, special.
  const std::vector<std::string> specials = {"<|endoftext|>", "<|im_start|>",   "<|im_end|>",
                                             "<|mask|>",      "<|reserved_0|>", "<|reserved_11|>"};
  const std::vector<int32_t> expect_ids = {Trained::kVocab - 16, Trained::kVocab - 15,
                                           Trained::kVocab - 14, Trained::kVocab - 13,
                                           Trained::kVocab - 12, Trained::kVocab - 1};
  for (size_t i = 0; i < specials.size(); ++i) {
    SCOPED_TRACE(specials[i]);
    EXPECT_EQ(tok.encode(specials[i]), Ids{expect_ids[i]});
    EXPECT_EQ(tok.token_to_id(specials[i]), expect_ids[i]);
    EXPECT_TRUE(tok.is_special(expect_ids[i]));
  }
  const Ids chat = tok.encode("<|im_start|>user\nhi<|im_end|>");
  ASSERT_GE(chat.size(), 3u);
  EXPECT_EQ(chat.front(), Trained::kVocab - 15);
  EXPECT_EQ(chat.back(), Trained::kVocab - 14);

  // decode(encode(s)) == s on training text, held-out text of the same kind and random Unicode.
  std::vector<std::string> cases = {"",
                                    " ",
                                    "\n",
                                    "  \n  ",
                                    "\t\t\n\r\n",
                                    "a",
                                    "\xcc\x81",
                                    "<|im_end",
                                    "<|im_end|",
                                    "<<|im_end|>>",
                                    "<|mask|><|mask|>",
                                    "x<|endoftext|>y",
                                    "1234567890",
                                    "   leading and trailing   ",
                                    "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9"};
  TextGen held_out(99);
  for (int i = 0; i < 600; ++i) cases.push_back(held_out.document());
  for (int i = 0; i < 600; ++i) cases.push_back(held_out.random_unicode(1 + held_out.below(60)));
  for (size_t i = 0; i + 2000 < t.corpus.size() && cases.size() < 1400;
       i += 2000 + held_out.below(3000)) {
    size_t b = i;
    while (b < t.corpus.size() && (static_cast<unsigned char>(t.corpus[b]) & 0xC0) == 0x80) ++b;
    size_t e = b + 500;
    while (e < t.corpus.size() && (static_cast<unsigned char>(t.corpus[e]) & 0xC0) == 0x80) ++e;
    cases.push_back(t.corpus.substr(b, e - b));
  }
  size_t failures = 0;
  for (const std::string& s : cases) {
    const Ids ids = tok.encode(s);
    const std::string back = tok.decode(ids);
    if (back != s && ++failures <= 5)
      ADD_FAILURE() << "round trip of " << json(s).dump() << " gave " << json(back).dump();
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < Trained::kVocab);
  }
  EXPECT_EQ(failures, 0u);
}

TEST(BpeTrainer, CompressesHeldOutText) {
  // Held-out text of the same kind must take clearly fewer tokens than bytes. An untrained
  // byte-level tokenizer (no merges) has exactly one token per byte and fails the bound.
  Trained& t = trained();
  const std::string held_out = TextGen(4242).corpus(100000);
  const double ratio =
      static_cast<double>(held_out.size()) / static_cast<double>(t.tok->encode(held_out).size());
  std::printf("held-out bytes per token: %.3f (vocab %d)\n", ratio, Trained::kVocab);
  EXPECT_GT(ratio, 2.5);

  TempDir dir;
  BpeTrainOptions o;
  o.vocab_size = 272;  // 256 bytes + 16 added tokens: no room for merges
  train_bpe_tokenizer({BpeTrainInput::text(t.corpus)}, o, dir.path("tokenizer.json"));
  const auto untrained = Tokenizer::from_file(dir.path("tokenizer.json"));
  std::string no_specials = held_out;
  for (const std::string& sp : bpe_added_tokens(12))
    for (size_t p; (p = no_specials.find(sp)) != std::string::npos;)
      no_specials.erase(p, sp.size());
  const double untrained_ratio = static_cast<double>(no_specials.size()) /
                                 static_cast<double>(untrained->encode(no_specials).size());
  EXPECT_DOUBLE_EQ(untrained_ratio, 1.0);
  EXPECT_LE(untrained_ratio, 2.5);
}

TEST(BpeTrainer, DeterministicAcrossRunsAndThreads) {
  Trained& t = trained();
  TempDir dir;
  const std::string file = dir.write("corpus.txt", t.corpus);
  BpeTrainOptions o;
  o.vocab_size = Trained::kVocab;
  o.threads = 1;
  train_bpe_tokenizer({BpeTrainInput::text_file(file)}, o, dir.path("a/tokenizer.json"));
  o.threads = 3;
  train_bpe_tokenizer({BpeTrainInput::text_file(file)}, o, dir.path("b/tokenizer.json"));
  const std::string first = read_file(t.path);
  EXPECT_FALSE(first.empty());
  EXPECT_TRUE(first == read_file(dir.path("a/tokenizer.json")));
  EXPECT_TRUE(first == read_file(dir.path("b/tokenizer.json")));
  EXPECT_TRUE(read_file(dir.path("a/tokenizer_config.json")) ==
              read_file(dir.path("b/tokenizer_config.json")));
}

TEST(BpeTrainer, FileChunksCountLikeOneText) {
  // A text file is counted in chunks cut between '\n' and a printable character; the result
  // must equal counting the same bytes as one text.
  std::string text = TextGen(5).corpus(200000);
  text += "tail without newline";
  TempDir dir;
  const std::string file = dir.write("c.txt", text);
  BpeTrainOptions o;
  o.vocab_size = 1024;
  o.threads = 4;
  o.chunk_bytes = 1;  // cut at every place allowed
  const BpeModel a = train_bpe({BpeTrainInput::text_file(file)}, o);
  const BpeModel b = train_bpe({BpeTrainInput::text(text)}, o);
  EXPECT_EQ(a.stats.pretokens, b.stats.pretokens);
  EXPECT_EQ(a.stats.unique_words, b.stats.unique_words);
  EXPECT_EQ(a.stats.input_bytes, static_cast<int64_t>(text.size()));
  EXPECT_EQ(merge_bytes(a), merge_bytes(b));
}

TEST(BpeTrainer, MergesAreConsistent) {
  Trained& t = trained();
  const json j = json::parse(read_file(t.path));
  const json& model = j["model"];
  EXPECT_EQ(model["type"], "BPE");
  EXPECT_EQ(model["ignore_merges"], false);
  EXPECT_TRUE(j["normalizer"].is_null());
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"], kQwen2SplitPattern);
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][0]["behavior"], "Isolated");
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][1]["type"], "ByteLevel");
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][1]["use_regex"], false);
  EXPECT_EQ(j["decoder"]["type"], "ByteLevel");
  EXPECT_EQ(j["post_processor"]["type"], "ByteLevel");

  std::map<std::string, int64_t> vocab;
  std::set<int64_t> ids;
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    vocab[it.key()] = it.value().get<int64_t>();
    ids.insert(it.value().get<int64_t>());
  }
  ASSERT_EQ(ids.size(), vocab.size());
  EXPECT_EQ(*ids.begin(), 0);
  EXPECT_EQ(*ids.rbegin(), static_cast<int64_t>(vocab.size()) - 1);  // ids 0..n-1

  // Each merge joins tokens that exist before it (bytes, or results of earlier merges), and its
  // result is in the vocabulary; every learned token is the result of some merge.
  std::set<std::string> defined;
  for (const auto& [tok, id] : vocab)
    if (id < 256) defined.insert(tok);
  ASSERT_EQ(defined.size(), 256u);
  std::set<std::pair<std::string, std::string>> seen;
  for (size_t i = 0; i < model["merges"].size(); ++i) {
    const json& m = model["merges"][i];
    ASSERT_TRUE(m.is_array() && m.size() == 2) << i;
    const std::string l = m[0], r = m[1];
    EXPECT_TRUE(defined.count(l)) << "merge " << i << " uses " << l << " before it exists";
    EXPECT_TRUE(defined.count(r)) << "merge " << i << " uses " << r << " before it exists";
    EXPECT_TRUE(vocab.count(l + r)) << "merge " << i << " result " << l + r << " not in vocab";
    EXPECT_TRUE(seen.insert({l, r}).second) << "merge " << i << " repeats";
    defined.insert(l + r);
  }
  EXPECT_EQ(defined.size(), vocab.size());

  // Added tokens follow the vocabulary; the total is the requested size.
  const json& added = j["added_tokens"];
  ASSERT_EQ(added.size(), 16u);
  for (size_t i = 0; i < added.size(); ++i) {
    EXPECT_EQ(added[i]["id"], static_cast<int64_t>(vocab.size() + i));
    EXPECT_EQ(added[i]["special"], true);
  }
  EXPECT_EQ(added[3]["content"], "<|mask|>");
  EXPECT_EQ(vocab.size() + added.size(), static_cast<size_t>(Trained::kVocab));

  const json cfg = json::parse(read_file(fs::path(t.path).parent_path() / "tokenizer_config.json"));
  EXPECT_EQ(cfg["eos_token"], "<|im_end|>");
  EXPECT_EQ(cfg["pad_token"], "<|endoftext|>");
  EXPECT_EQ(cfg["mask_token"], "<|mask|>");
  EXPECT_TRUE(cfg["bos_token"].is_null());
  EXPECT_GT(cfg["model_max_length"].get<int64_t>(), 0);
  EXPECT_NE(cfg["chat_template"].get<std::string>().find("<|im_start|>"), std::string::npos);
  EXPECT_EQ(cfg["added_tokens_decoder"][std::to_string(vocab.size() + 2)]["content"], "<|im_end|>");
}

TEST(BpeTrainer, CorpusDirectoryReadsOnlyTheTrainSplit) {
  TempDir dir;
  auto jsonl = [](const std::vector<std::string>& texts) {
    std::string s;
    for (const std::string& t : texts) s += json{{"text", t}, {"source", "test"}}.dump() + "\n";
    return s;
  };
  std::vector<std::string> a, b;
  for (int i = 0; i < 200; ++i) a.push_back("alpha beta gamma " + std::to_string(i));
  for (int i = 0; i < 200; ++i) b.push_back("delta epsilon\n\n" + std::to_string(i) + " 😀");
  dir.write("corpus/b/train.jsonl", jsonl(b));
  dir.write("corpus/a/train.jsonl", jsonl(a));
  dir.write("corpus/a/validation.jsonl", jsonl(std::vector<std::string>(300, "zyzzyva zyzzyva")));
  dir.write("corpus/notes.txt", "not a domain");
  fs::create_directories(dir.path("corpus/empty"));

  const std::vector<std::string> files = corpus_split_files(dir.path("corpus"));
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(fs::path(files[0]).parent_path().filename(), "a");
  EXPECT_EQ(fs::path(files[1]).parent_path().filename(), "b");
  EXPECT_EQ(corpus_split_files(dir.path("corpus"), "validation").size(), 1u);
  EXPECT_THROW(corpus_split_files(dir.path("corpus"), "test"), Error);

  std::vector<BpeTrainInput> in;
  for (const std::string& f : files) in.push_back(BpeTrainInput::jsonl_file(f));
  BpeTrainOptions o;
  o.vocab_size = 400;
  const BpeModel m = train_bpe(in, o);
  EXPECT_EQ(m.stats.documents, 400);
  int64_t text_bytes = 0;
  for (const auto& t : a) text_bytes += static_cast<int64_t>(t.size());
  for (const auto& t : b) text_bytes += static_cast<int64_t>(t.size());
  EXPECT_EQ(m.stats.input_bytes, text_bytes);
  auto has = [&](const std::string& s) {
    return std::find(m.tokens.begin(), m.tokens.end(), s) != m.tokens.end();
  };
  EXPECT_TRUE(has(" gamma"));
  EXPECT_TRUE(has(" epsilon"));
  EXPECT_TRUE(has(" \xf0\x9f\x98\x80"));  // " 😀" from its five bytes
  for (const std::string& t : m.tokens)
    EXPECT_EQ(t.find("zyz"), std::string::npos) << "validation text was read";

  // --max-mb: shared between the inputs, cut at line ends.
  o.max_bytes = 4000;
  const BpeModel small = train_bpe(in, o);
  EXPECT_GT(small.stats.documents, 50);
  EXPECT_LT(small.stats.documents, 200);
  EXPECT_LE(small.stats.input_bytes, 4000);
}

TEST(BpeTrainer, Errors) {
  TempDir dir;
  BpeTrainOptions o;
  o.vocab_size = 271;  // less than 256 + 16
  EXPECT_THROW(train_bpe({BpeTrainInput::text("x")}, o), Error);
  o.vocab_size = 300;
  EXPECT_THROW(train_bpe({BpeTrainInput::text_file(dir.path("missing.txt"))}, o), Error);
  const std::string bad = dir.write("bad.jsonl", "{\"text\": \"ok\"}\n{\"text\": 5}\n");
  try {
    train_bpe({BpeTrainInput::jsonl_file(bad)}, o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("\"text\""), std::string::npos) << e.what();
  }
  EXPECT_THROW(train_bpe({BpeTrainInput::text_file(dir.write("empty.txt", ""))}, o), Error);
  EXPECT_THROW(train_bpe({}, o), Error);
  const std::string broken = dir.write("broken.jsonl", "{\"text\": \"ok\"\n");
  EXPECT_THROW(train_bpe({BpeTrainInput::jsonl_file(broken)}, o), Error);
  EXPECT_THROW(corpus_split_files(dir.path("nope")), Error);
}

TEST(BpeTrainer, InvalidUtf8IsReadAsReplacementCharacters) {
  // As encode does: ill-formed bytes become U+FFFD before splitting, so the learned tokens are
  // those of the sanitized text.
  std::string text;
  for (int i = 0; i < 50; ++i) text += "ab\xff\xfe cd ";
  const BpeModel m = train_texts({text}, 300);
  ASSERT_GT(m.tokens.size(), 256u);
  for (size_t i = 256; i < m.tokens.size(); ++i)
    for (unsigned char c : m.tokens[i])
      EXPECT_TRUE(c != 0xFF && c != 0xFE) << "raw invalid byte in a learned token";
  EXPECT_NE(std::find(m.tokens.begin(), m.tokens.end(), "\xef\xbf\xbd"), m.tokens.end());
}

}  // namespace
}  // namespace dspark
