// Byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json.
//
// The pipeline follows transformers.js (the reference the conformance test checks against),
// which itself follows the Rust `tokenizers` crate:
//   added-token split -> normalizer -> pre-tokenizer (regex splits, byte-level) -> BPE
//   -> post-processor (only with add_special_tokens).
// BPE runs on raw bytes: vocab and merges are converted from the GPT-2 byte-to-unicode
// alphabet once at load time, so encoding never maps characters.
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <queue>
#include <shared_mutex>
#include <unordered_map>

#include "core/error.h"
#include "core/gguf.h"
#include "core/mmap_file.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/js_regex.h"
#include "tokenizer/unicode_util.h"

namespace dspark {

namespace td = tokenizer_detail;
using nlohmann::json;

namespace {

using td::bytelevel_to_bytes;
using td::bytes_to_bytelevel;

// ---------------------------------------------------------------------------------------------
// Error helpers: every message names the file and the JSON field.
struct Ctx {
  std::string file;
  [[noreturn]] void bad(const std::string& field, const std::string& what) const {
    fail(file, ": field '", field, "': ", what);
  }
  const json& get(const json& obj, const std::string& key, const std::string& field) const {
    if (!obj.is_object()) bad(field.substr(0, field.rfind('.')), "expected an object");
    auto it = obj.find(key);
    if (it == obj.end()) bad(field, "missing");
    return *it;
  }
  std::string str(const json& v, const std::string& field) const {
    if (!v.is_string()) bad(field, "expected a string");
    return v.get<std::string>();
  }
  bool flag(const json& obj, const std::string& key, const std::string& field, bool def) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return def;
    if (!it->is_boolean()) bad(field + "." + key, "expected true or false");
    return it->get<bool>();
  }
  std::string type(const json& obj, const std::string& field) const {
    return str(get(obj, "type", field + ".type"), field + ".type");
  }
  // A pipeline component (normalizer, pre-tokenizer, ...) at `field`: null is none, and a
  // Sequence hands each element of its array obj[seq_key] to `load` with its field name; both
  // return "". Any other component returns its type, for the caller.
  template <class Load>
  std::string component(const json& obj, const std::string& field, const std::string& seq_key,
                        Load&& load) const {
    if (obj.is_null()) return "";
    std::string t = type(obj, field);
    if (t != "Sequence") return t;
    const std::string f = field + "." + seq_key;
    const json& list = get(obj, seq_key, f);
    if (!list.is_array()) bad(f, "expected an array");
    for (size_t i = 0; i < list.size(); ++i) load(list[i], f + "[" + std::to_string(i) + "]");
    return "";
  }
};

// ---------------------------------------------------------------------------------------------
// Added tokens: a byte trie finds the longest token starting at each position.
struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = false;
};

class TokenTrie {
 public:
  void add(std::string_view s, int index) {
    int node = 0;
    for (unsigned char c : s) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | c;
      auto it = edges_.find(key);
      if (it == edges_.end()) {
        terminal_.push_back(-1);
        it = edges_.emplace(key, static_cast<int>(terminal_.size()) - 1).first;
      }
      node = it->second;
    }
    if (!s.empty()) {
      terminal_[node] = index;
      first_[static_cast<unsigned char>(s[0])] = true;
    }
  }
  bool empty() const { return terminal_.size() == 1; }
  // Longest token starting at text[pos]: (index, length) or (-1, 0).
  std::pair<int, size_t> longest(std::string_view text, size_t pos) const {
    if (!first_[static_cast<unsigned char>(text[pos])]) return {-1, 0};
    int node = 0, best = -1;
    size_t best_len = 0;
    for (size_t j = pos; j < text.size(); ++j) {
      auto it = edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[j]));
      if (it == edges_.end()) break;
      node = it->second;
      if (terminal_[node] >= 0) {
        best = terminal_[node];
        best_len = j + 1 - pos;
      }
    }
    return {best, best_len};
  }

 private:
  std::unordered_map<uint64_t, int> edges_;
  std::vector<int> terminal_{-1};
  bool first_[256] = {};
};

struct Segment {
  std::string_view text;
  int added = -1;  // index into added tokens, or -1 for plain text
};

// ---------------------------------------------------------------------------------------------
enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct PreStep {
  bool byte_level = false;
  // Split
  std::unique_ptr<td::JsRegex> regex;
  Behavior behavior = Behavior::Isolated;
  bool invert = false;
  // ByteLevel
  bool add_prefix_space = false;
};

struct PostStep {
  // Template for a single sequence: ids to emit, with -1 standing for the sequence itself.
  std::vector<int32_t> single;
};

const char* const kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// Splits `text` by the match list into pieces per the HF SplitDelimiterBehavior.
void split_pieces(std::string_view text, const std::vector<std::pair<size_t, size_t>>& matches,
                  Behavior behavior, bool invert, std::vector<std::string_view>& out) {
  // Build (begin, end, is_delimiter) spans covering the text.
  struct Span {
    size_t b, e;
    bool delim;
  };
  std::vector<Span> spans;
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (e == b) continue;
    if (b > prev) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < text.size()) spans.push_back({prev, text.size(), invert});

  auto emit = [&](size_t b, size_t e) {
    if (e > b) out.push_back(text.substr(b, e - b));
  };
  switch (behavior) {
    case Behavior::Isolated:
      for (const auto& s : spans) emit(s.b, s.e);
      break;
    case Behavior::Removed:
      for (const auto& s : spans)
        if (!s.delim) emit(s.b, s.e);
      break;
    case Behavior::Contiguous: {
      size_t i = 0;
      while (i < spans.size()) {
        size_t j = i + 1;
        if (spans[i].delim)
          while (j < spans.size() && spans[j].delim && spans[j].b == spans[j - 1].e) ++j;
        emit(spans[i].b, spans[j - 1].e);
        i = j;
      }
      break;
    }
    case Behavior::MergedWithPrevious: {
      size_t start = 0;
      bool open = false;
      for (const auto& s : spans) {
        if (!open) start = s.b;
        open = true;
        if (s.delim) {
          emit(start, s.e);
          open = false;
        }
      }
      if (open) emit(start, text.size());
      break;
    }
    case Behavior::MergedWithNext: {
      size_t start = 0;
      bool open = false;
      for (const auto& s : spans) {
        if (s.delim) {
          if (open) emit(start, s.b);
          start = s.b;
          open = true;
        } else if (!open) {
          emit(s.b, s.e);
        }
      }
      if (open) emit(start, text.size());
      break;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Token ids index dense per-id tables (what each id decodes to, whether it is known or special),
// so an id may not run far past the number of tokens the file defines: an id of 1e9 would size
// them at gigabytes before anything else failed. Gaps in the id range are real (tiktoken
// conversions skip ids, reserved ranges, this repo's test files put specials at 300 or 70000), so
// ids may go as far again as there are tokens, plus 2^20 (tens of MB of tables at most).
struct IdBound {
  int64_t tokens = 0;  // vocab entries + added tokens in the file
  int64_t limit = 0;   // ids must be below this
};

IdBound id_bound(const json& root) {
  IdBound b;
  if (auto m = root.find("model"); m != root.end() && m->is_object())
    if (auto v = m->find("vocab"); v != m->end() && v->is_object()) b.tokens += static_cast<int64_t>(v->size());
  if (auto a = root.find("added_tokens"); a != root.end() && a->is_array()) b.tokens += static_cast<int64_t>(a->size());
  b.limit = std::min<int64_t>(2 * b.tokens + (int64_t(1) << 20), int64_t(INT32_MAX) + 1);
  return b;
}

// The id `v` of `token`, checked against the bound before any table is sized by it.
int32_t checked_id(const Ctx& ctx, const json& v, const IdBound& bound, const std::string& field,
                   const std::string& token) {
  if (!v.is_number_integer()) ctx.bad(field, "token '" + token + "': expected an integer id");
  if (!v.is_number_unsigned() && v.get<int64_t>() < 0)
    ctx.bad(field, "token '" + token + "' has the negative id " + std::to_string(v.get<int64_t>()));
  const uint64_t id = v.is_number_unsigned() ? v.get<uint64_t>() : static_cast<uint64_t>(v.get<int64_t>());
  if (id >= static_cast<uint64_t>(bound.limit))
    ctx.bad(field, "token '" + token + "' has id " + std::to_string(id) + ", far past the " +
                       std::to_string(bound.tokens) + " tokens the file defines (ids must be below " +
                       std::to_string(bound.limit) + ")");
  return static_cast<int32_t>(id);
}

// ---------------------------------------------------------------------------------------------
class BpeTokenizer final : public Tokenizer {
 public:
  BpeTokenizer(const std::string& path, const json& root);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override;
  std::string token_bytes(int32_t id) const override;
  int vocab_size() const override { return static_cast<int>(id_bytes_.size()); }
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  bool is_special(int32_t id) const override {
    return id >= 0 && static_cast<size_t>(id) < special_.size() && special_[id];
  }

 private:
  void load_model(const Ctx& ctx, const json& model, const IdBound& ids);
  void load_added(const Ctx& ctx, const json& added, const IdBound& ids);
  void load_normalizer(const Ctx& ctx, const json& n, const std::string& field);
  void load_pre_tokenizer(const Ctx& ctx, const json& p, const std::string& field);
  void load_post_processor(const Ctx& ctx, const json& p, const std::string& field);
  void check_decoder(const Ctx& ctx, const json& d, const std::string& field) const;
  int32_t resolve_token(const Ctx& ctx, const std::string& token, const std::string& field) const;

  void split_added(std::string_view text, const TokenTrie& trie, std::vector<Segment>& out) const;
  std::string normalize(std::string_view s) const;
  void encode_text(std::string_view normalized, std::vector<int32_t>& ids) const;
  void bpe(std::string_view word, std::vector<int32_t>& ids) const;
  void bpe_uncached(std::string_view word, std::vector<int32_t>& ids) const;

  // Vocabulary.
  std::unordered_map<std::string, int32_t> bytes_to_id_;  // raw bytes -> id (byte-level tokens)
  std::unordered_map<std::string, int32_t> token_to_id_;  // vocab string / added content -> id
  std::vector<std::string> id_bytes_;                     // what each id decodes to
  std::vector<bool> known_;                               // id has a token
  std::vector<bool> special_;
  int32_t byte_id_[256];
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (left,right) -> (rank, merged)
  std::optional<int32_t> unk_id_;
  bool ignore_merges_ = false;

  // Added tokens.
  std::vector<AddedToken> added_;
  TokenTrie raw_trie_;   // matched on the raw text
  TokenTrie norm_trie_;  // normalized=true tokens, matched after normalization (HF behaviour)

  std::vector<td::NormForm> normalizers_;
  std::vector<PreStep> pre_steps_;
  std::vector<PostStep> post_steps_;

  // Cache of BPE results per pre-token (raw bytes).
  mutable std::shared_mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
  static constexpr size_t kMaxCachedWord = 64;
  static constexpr size_t kMaxCacheEntries = 1 << 18;
};

BpeTokenizer::BpeTokenizer(const std::string& path, const json& root) {
  Ctx ctx{path};
  if (!root.is_object()) fail(path, ": expected a JSON object at the top level");
  std::fill(std::begin(byte_id_), std::end(byte_id_), -1);
  const IdBound ids = id_bound(root);
  load_model(ctx, ctx.get(root, "model", "model"), ids);
  if (auto it = root.find("added_tokens"); it != root.end() && !it->is_null()) load_added(ctx, *it, ids);
  if (auto it = root.find("normalizer"); it != root.end()) load_normalizer(ctx, *it, "normalizer");
  if (auto it = root.find("pre_tokenizer"); it != root.end()) load_pre_tokenizer(ctx, *it, "pre_tokenizer");
  if (std::none_of(pre_steps_.begin(), pre_steps_.end(), [](const PreStep& s) { return s.byte_level; }))
    ctx.bad("pre_tokenizer", "no ByteLevel pre-tokenizer: only byte-level BPE tokenizers are supported");
  if (auto it = root.find("post_processor"); it != root.end())
    load_post_processor(ctx, *it, "post_processor");
  if (auto it = root.find("decoder"); it != root.end()) check_decoder(ctx, *it, "decoder");
  // Without a normalizer every added token is matched on the raw text in one pass (as
  // transformers.js does); with one, normalized=true tokens are matched after normalization.
  for (size_t i = 0; i < added_.size(); ++i) {
    if (normalizers_.empty() || !added_[i].normalized) raw_trie_.add(added_[i].content, static_cast<int>(i));
    else norm_trie_.add(normalize(added_[i].content), static_cast<int>(i));
  }
}

void BpeTokenizer::load_model(const Ctx& ctx, const json& model, const IdBound& ids) {
  if (!model.is_object()) ctx.bad("model", "expected an object");
  if (auto it = model.find("type"); it != model.end() && !it->is_null() && ctx.str(*it, "model.type") != "BPE")
    ctx.bad("model.type", "unsupported model type '" + it->get<std::string>() + "' (only BPE)");
  const json& vocab = ctx.get(model, "vocab", "model.vocab");
  if (!vocab.is_object()) ctx.bad("model.vocab", "expected an object of token -> id");
  int32_t max_id = -1;
  bytes_to_id_.reserve(vocab.size() * 2);
  token_to_id_.reserve(vocab.size() * 2);
  std::vector<std::pair<int32_t, std::string>> id_content;
  id_content.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int32_t id = checked_id(ctx, it.value(), ids, "model.vocab[\"" + it.key() + "\"]", it.key());
    max_id = std::max(max_id, id);
    token_to_id_[it.key()] = id;
    std::optional<std::string> bytes = bytelevel_to_bytes(it.key());
    if (bytes) {
      bytes_to_id_.emplace(*bytes, id);
      id_content.emplace_back(id, std::move(*bytes));
    } else {
      id_content.emplace_back(id, it.key());  // decodes to its own UTF-8, as the Rust decoder does
    }
  }
  id_bytes_.assign(static_cast<size_t>(max_id + 1), std::string());
  known_.assign(id_bytes_.size(), false);
  for (auto& [id, content] : id_content) {
    id_bytes_[id] = std::move(content);
    known_[id] = true;
  }
  for (int b = 0; b < 256; ++b) {
    auto it = bytes_to_id_.find(std::string(1, static_cast<char>(b)));
    if (it != bytes_to_id_.end()) byte_id_[b] = it->second;
  }

  if (auto it = model.find("unk_token"); it != model.end() && !it->is_null()) {
    const std::string unk = ctx.str(*it, "model.unk_token");
    auto u = token_to_id_.find(unk);
    if (u == token_to_id_.end()) ctx.bad("model.unk_token", "token '" + unk + "' is not in model.vocab");
    unk_id_ = u->second;
  }
  ignore_merges_ = ctx.flag(model, "ignore_merges", "model", false);
  if (ctx.flag(model, "byte_fallback", "model", false)) ctx.bad("model.byte_fallback", "byte_fallback is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = model.find(key);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty()))
      ctx.bad(std::string("model.") + key, "not supported (must be null or empty)");
  }

  const json& merges = ctx.get(model, "merges", "model.merges");
  if (!merges.is_array()) ctx.bad("model.merges", "expected an array");
  merges_.reserve(merges.size() * 2);
  int32_t rank = 0;
  for (const json& m : merges) {
    const std::string field = "model.merges[" + std::to_string(rank) + "]";
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        ctx.bad(field, "expected \"left right\", got \"" + s + "\"");
      left = s.substr(0, sp);
      right = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      ctx.bad(field, "expected \"left right\" or [\"left\", \"right\"]");
    }
    auto find_id = [&](const std::string& tok, const char* what) {
      auto it = token_to_id_.find(tok);
      if (it == token_to_id_.end()) ctx.bad(field, std::string(what) + " token '" + tok + "' is not in model.vocab");
      return it->second;
    };
    const int32_t l = find_id(left, "left"), r = find_id(right, "right"), merged = find_id(left + right, "merged");
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
    merges_.emplace(key, std::make_pair(rank, merged));  // first (lowest-rank) occurrence wins
    ++rank;
  }
}

void BpeTokenizer::load_added(const Ctx& ctx, const json& added, const IdBound& ids) {
  if (!added.is_array()) ctx.bad("added_tokens", "expected an array");
  for (size_t i = 0; i < added.size(); ++i) {
    const std::string field = "added_tokens[" + std::to_string(i) + "]";
    const json& a = added[i];
    if (!a.is_object()) ctx.bad(field, "expected an object");
    AddedToken t;
    t.content = ctx.str(ctx.get(a, "content", field + ".content"), field + ".content");
    t.id = checked_id(ctx, ctx.get(a, "id", field + ".id"), ids, field + ".id", t.content);
    if (t.content.empty()) ctx.bad(field + ".content", "empty");
    if (!td::is_valid_utf8(t.content)) ctx.bad(field + ".content", "not valid UTF-8");
    t.special = ctx.flag(a, "special", field, false);
    t.lstrip = ctx.flag(a, "lstrip", field, false);
    t.rstrip = ctx.flag(a, "rstrip", field, false);
    t.single_word = ctx.flag(a, "single_word", field, false);
    t.normalized = ctx.flag(a, "normalized", field, !t.special);
    if (static_cast<size_t>(t.id) >= id_bytes_.size()) {
      id_bytes_.resize(static_cast<size_t>(t.id) + 1);
      known_.resize(id_bytes_.size(), false);
    }
    id_bytes_[t.id] = t.content;
    known_[t.id] = true;
    token_to_id_[t.content] = t.id;
    added_.push_back(std::move(t));
  }
  special_.assign(id_bytes_.size(), false);
  for (const auto& t : added_) special_[t.id] = special_[t.id] || t.special;
}

void BpeTokenizer::load_normalizer(const Ctx& ctx, const json& n, const std::string& field) {
  const std::string type = ctx.component(
      n, field, "normalizers", [&](const json& e, const std::string& f) { load_normalizer(ctx, e, f); });
  if (type.empty()) return;
  static const std::map<std::string, td::NormForm> kForms = {
      {"NFC", td::NormForm::NFC}, {"NFD", td::NormForm::NFD}, {"NFKC", td::NormForm::NFKC}, {"NFKD", td::NormForm::NFKD}};
  auto form = kForms.find(type);
  if (form == kForms.end()) ctx.bad(field + ".type", "unsupported normalizer '" + type + "'");
  normalizers_.push_back(form->second);
}

void BpeTokenizer::load_pre_tokenizer(const Ctx& ctx, const json& p, const std::string& field) {
  const std::string type = ctx.component(
      p, field, "pretokenizers", [&](const json& e, const std::string& f) { load_pre_tokenizer(ctx, e, f); });
  if (type.empty()) return;
  if (type == "ByteLevel") {
    PreStep s;
    s.byte_level = true;
    s.add_prefix_space = ctx.flag(p, "add_prefix_space", field, true);
    if (ctx.flag(p, "use_regex", field, true)) s.regex = std::make_unique<td::JsRegex>(kGpt2Pattern);
    pre_steps_.push_back(std::move(s));
  } else if (type == "Split") {
    PreStep s;
    const json& pat = ctx.get(p, "pattern", field + ".pattern");
    if (pat.is_object() && pat.contains("Regex")) {
      const std::string re = ctx.str(pat["Regex"], field + ".pattern.Regex");
      try {
        s.regex = std::make_unique<td::JsRegex>(re);
      } catch (const Error& e) {
        ctx.bad(field + ".pattern.Regex", e.what());
      }
    } else if (pat.is_object() && pat.contains("String")) {
      std::string lit = ctx.str(pat["String"], field + ".pattern.String"), esc;
      for (char c : lit) {
        if (std::string_view("\\^$.|?*+()[]{}/-").find(c) != std::string_view::npos) esc += '\\';
        esc += c;
      }
      s.regex = std::make_unique<td::JsRegex>(esc);
    } else {
      ctx.bad(field + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
    }
    const std::string behavior = ctx.str(ctx.get(p, "behavior", field + ".behavior"), field + ".behavior");
    if (behavior == "Isolated") s.behavior = Behavior::Isolated;
    else if (behavior == "Removed") s.behavior = Behavior::Removed;
    else if (behavior == "MergedWithPrevious") s.behavior = Behavior::MergedWithPrevious;
    else if (behavior == "MergedWithNext") s.behavior = Behavior::MergedWithNext;
    else if (behavior == "Contiguous") s.behavior = Behavior::Contiguous;
    else ctx.bad(field + ".behavior", "unknown behavior '" + behavior + "'");
    s.invert = ctx.flag(p, "invert", field, false);
    pre_steps_.push_back(std::move(s));
  } else {
    ctx.bad(field + ".type", "unsupported pre-tokenizer '" + type + "'");
  }
}

int32_t BpeTokenizer::resolve_token(const Ctx& ctx, const std::string& token, const std::string& field) const {
  auto it = token_to_id_.find(token);
  if (it == token_to_id_.end()) ctx.bad(field, "token '" + token + "' is not in the vocabulary");
  return it->second;
}

void BpeTokenizer::load_post_processor(const Ctx& ctx, const json& p, const std::string& field) {
  const std::string type = ctx.component(
      p, field, "processors", [&](const json& e, const std::string& f) { load_post_processor(ctx, e, f); });
  if (type.empty()) return;
  if (type == "ByteLevel") {
    // Only adjusts offsets; ids are unchanged.
  } else if (type == "TemplateProcessing") {
    PostStep step;
    const json& single = ctx.get(p, "single", field + ".single");
    if (!single.is_array()) ctx.bad(field + ".single", "expected an array");
    const json* specials = p.contains("special_tokens") ? &p["special_tokens"] : nullptr;
    for (size_t i = 0; i < single.size(); ++i) {
      const std::string f = field + ".single[" + std::to_string(i) + "]";
      const json& item = single[i];
      if (item.is_object() && item.contains("Sequence")) {
        step.single.push_back(-1);
      } else if (item.is_object() && item.contains("SpecialToken")) {
        const std::string name = ctx.str(ctx.get(item["SpecialToken"], "id", f + ".SpecialToken.id"), f + ".SpecialToken.id");
        const json* entry = nullptr;
        if (specials && specials->is_object() && specials->contains(name)) entry = &(*specials)[name];
        if (entry && entry->contains("ids") && (*entry)["ids"].is_array()) {
          for (const json& id : (*entry)["ids"]) {
            const std::string f2 = field + ".special_tokens[\"" + name + "\"].ids";
            if (!id.is_number_integer()) ctx.bad(f2, "expected integers");
            const int64_t v = id.get<int64_t>();
            if (v < 0 || static_cast<size_t>(v) >= known_.size() || !known_[static_cast<size_t>(v)])
              ctx.bad(f2, "id " + std::to_string(v) + " is not in the vocabulary");
            step.single.push_back(static_cast<int32_t>(v));
          }
        } else {
          step.single.push_back(resolve_token(ctx, name, f + ".SpecialToken.id"));
        }
      } else {
        ctx.bad(f, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    post_steps_.push_back(std::move(step));
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    auto pair_id = [&](const char* key) {
      const json& v = ctx.get(p, key, field + "." + key);
      if (!v.is_array() || v.size() != 2 || !v[1].is_number_integer())
        ctx.bad(field + "." + key, "expected [token, id]");
      const int64_t id = v[1].get<int64_t>();
      if (id < 0 || static_cast<size_t>(id) >= known_.size() || !known_[static_cast<size_t>(id)])
        ctx.bad(field + "." + key, "id " + std::to_string(id) + " is not in the vocabulary");
      return static_cast<int32_t>(id);
    };
    post_steps_.push_back(PostStep{{pair_id("cls"), -1, pair_id("sep")}});
  } else {
    ctx.bad(field + ".type", "unsupported post-processor '" + type + "'");
  }
}

void BpeTokenizer::check_decoder(const Ctx& ctx, const json& d, const std::string& field) const {
  const std::string type =
      ctx.component(d, field, "decoders", [&](const json& e, const std::string& f) { check_decoder(ctx, e, f); });
  if (type.empty() || type == "ByteLevel") return;
  ctx.bad(field + ".type", "unsupported decoder '" + type + "' (only ByteLevel)");
}

// ---------------------------------------------------------------------------------------------
// Encoding

void BpeTokenizer::split_added(std::string_view text, const TokenTrie& trie, std::vector<Segment>& out) const {
  const size_t first = out.size();
  size_t start = 0, i = 0;
  while (i < text.size()) {
    auto [idx, len] = trie.longest(text, i);
    if (idx >= 0 && added_[idx].single_word) {
      // Only when not inside a word on either side.
      bool ok = true;
      if (i > 0) {
        size_t k = i - 1;
        while (k > 0 && (static_cast<unsigned char>(text[k]) & 0xC0) == 0x80) --k;
        size_t j = k;
        ok = !td::is_word_char(td::next_codepoint(text, j));
      }
      if (ok && i + len < text.size()) {
        size_t j = i + len;
        ok = !td::is_word_char(td::next_codepoint(text, j));
      }
      if (!ok) {
        i += len;  // the rejected match stays text; scanning resumes after it
        continue;
      }
    }
    if (idx < 0) {
      ++i;
      continue;
    }
    if (i > start) out.push_back({text.substr(start, i - start), -1});
    out.push_back({text.substr(i, len), idx});
    i += len;
    start = i;
  }
  if (start < text.size()) out.push_back({text.substr(start), -1});
  // lstrip / rstrip remove JavaScript whitespace from the neighbouring text.
  for (size_t k = first; k < out.size(); ++k) {
    if (out[k].added < 0) continue;
    const AddedToken& t = added_[out[k].added];
    if (t.lstrip && k > first && out[k - 1].added < 0) out[k - 1].text = td::js_trim_end(out[k - 1].text);
    if (t.rstrip && k + 1 < out.size() && out[k + 1].added < 0) out[k + 1].text = td::js_trim_start(out[k + 1].text);
  }
}

std::string BpeTokenizer::normalize(std::string_view s) const {
  std::string out(s);
  for (td::NormForm f : normalizers_) out = td::normalize(out, f);
  return out;
}

void BpeTokenizer::encode_text(std::string_view text, std::vector<int32_t>& ids) const {
  if (text.empty()) return;
  std::deque<std::string> owned;  // storage for pieces that are not views of `text`
  std::vector<std::string_view> pieces{text}, next;
  bool after_byte_level = false;
  for (const PreStep& step : pre_steps_) {
    next.clear();
    if (step.byte_level) {
      for (std::string_view piece : pieces) {
        if (step.add_prefix_space && !piece.empty() && piece[0] != ' ') {
          owned.push_back(" " + std::string(piece));
          piece = owned.back();
        }
        if (step.regex) {
          // transformers.js keeps only the matches (the GPT-2 pattern covers every character).
          for (auto [b, e] : step.regex->find_all(piece))
            if (e > b) next.push_back(piece.substr(b, e - b));
        } else {
          next.push_back(piece);
        }
      }
      after_byte_level = true;  // pieces stay raw bytes; the alphabet is implicit from here on
    } else if (!after_byte_level) {
      for (std::string_view piece : pieces)
        split_pieces(piece, step.regex->find_all(piece), step.behavior, step.invert, next);
    } else {
      // A Split after ByteLevel sees byte-level characters, as in the reference implementation.
      std::vector<std::string_view> mapped_parts;
      for (std::string_view piece : pieces) {
        const std::string mapped = bytes_to_bytelevel(piece);
        mapped_parts.clear();
        split_pieces(mapped, step.regex->find_all(mapped), step.behavior, step.invert, mapped_parts);
        for (std::string_view part : mapped_parts) {
          owned.push_back(*bytelevel_to_bytes(part));
          next.push_back(owned.back());
        }
      }
    }
    pieces.swap(next);
  }
  for (std::string_view piece : pieces) bpe(piece, ids);
}

void BpeTokenizer::bpe(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (word.size() == 1) {
    const int32_t id = byte_id_[static_cast<unsigned char>(word[0])];
    if (id >= 0) ids.push_back(id);
    else if (unk_id_) ids.push_back(*unk_id_);
    return;
  }
  if (ignore_merges_) {
    auto it = bytes_to_id_.find(std::string(word));
    if (it != bytes_to_id_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  if (word.size() > kMaxCachedWord) {
    bpe_uncached(word, ids);
    return;
  }
  std::string key(word);
  {
    std::shared_lock lock(cache_mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t before = ids.size();
  bpe_uncached(word, ids);
  std::vector<int32_t> result(ids.begin() + static_cast<std::ptrdiff_t>(before), ids.end());
  std::unique_lock lock(cache_mu_);
  if (cache_.size() >= kMaxCacheEntries) cache_.clear();
  cache_.emplace(std::move(key), std::move(result));
}

// Merges the lowest-rank adjacent pair first, the leftmost among equal ranks (the order of
// transformers.js's priority queue and of the Rust crate). O(n log n) in the word length.
void BpeTokenizer::bpe_uncached(std::string_view word, std::vector<int32_t>& ids) const {
  const int n = static_cast<int>(word.size());
  struct Sym {
    int32_t id;
    int prev, next;
  };
  std::vector<Sym> sym(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) sym[i] = {byte_id_[static_cast<unsigned char>(word[i])], i - 1, i + 1 < n ? i + 1 : -1};

  struct Cand {
    int32_t rank;
    int pos, right;
    int32_t left_id, right_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> queue;
  auto lookup = [&](int32_t l, int32_t r) -> const std::pair<int32_t, int32_t>* {
    if (l < 0 || r < 0) return nullptr;
    auto it = merges_.find((static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r));
    return it == merges_.end() ? nullptr : &it->second;
  };
  auto consider = [&](int left) {
    const int right = sym[left].next;
    if (right < 0) return;
    if (const auto* m = lookup(sym[left].id, sym[right].id))
      queue.push({m->first, left, right, sym[left].id, sym[right].id});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  while (!queue.empty()) {
    const Cand c = queue.top();
    queue.pop();
    Sym& l = sym[c.pos];
    if (l.id < -1 || l.next != c.right || l.id != c.left_id || sym[c.right].id != c.right_id) continue;
    const auto* m = lookup(l.id, sym[c.right].id);
    l.id = m->second;
    Sym& r = sym[c.right];
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = c.pos;
    r.id = -2;  // dead
    if (l.prev >= 0) consider(l.prev);
    consider(c.pos);
  }
  for (int i = 0; i >= 0 && i < n; i = sym[i].next) {
    if (sym[i].id >= 0) ids.push_back(sym[i].id);
    else if (unk_id_) ids.push_back(*unk_id_);
  }
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::string clean;
  if (!td::is_valid_utf8(text)) {  // as JavaScript would see it: U+FFFD for ill-formed input
    clean = td::utf8_sanitize(text);
    text = clean;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 8);
  std::vector<Segment> segs;
  const bool two_phase = !normalizers_.empty() && !norm_trie_.empty();
  split_added(text, raw_trie_, segs);
  std::vector<Segment> inner;
  for (const Segment& s : segs) {
    if (s.added >= 0) {
      ids.push_back(added_[s.added].id);
      continue;
    }
    if (s.text.empty()) continue;
    const std::string norm = normalizers_.empty() ? std::string(s.text) : normalize(s.text);
    if (!two_phase) {
      encode_text(norm, ids);
      continue;
    }
    inner.clear();
    split_added(norm, norm_trie_, inner);
    for (const Segment& t : inner) {
      if (t.added >= 0) ids.push_back(added_[t.added].id);
      else encode_text(t.text, ids);
    }
  }
  if (add_special_tokens) {
    for (const PostStep& step : post_steps_) {
      std::vector<int32_t> out;
      out.reserve(ids.size() + step.single.size());
      for (int32_t x : step.single) {
        if (x < 0) out.insert(out.end(), ids.begin(), ids.end());
        else out.push_back(x);
      }
      ids.swap(out);
    }
  }
  return ids;
}

// ---------------------------------------------------------------------------------------------
// Decoding

std::string BpeTokenizer::token_bytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_bytes_.size() || !known_[id])
    fail("token id ", id, " is not in the vocabulary (size ", id_bytes_.size(), ")");
  return id_bytes_[id];
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (skip_special_tokens && is_special(id)) continue;
    if (id < 0 || static_cast<size_t>(id) >= id_bytes_.size() || !known_[id])
      fail("token id ", id, " is not in the vocabulary (size ", id_bytes_.size(), ")");
    bytes += id_bytes_[id];
  }
  // Added tokens are valid UTF-8, so decoding the concatenation equals decoding the byte runs
  // between them separately (what the reference decoder does).
  return td::utf8_sanitize(bytes);
}

std::optional<int32_t> BpeTokenizer::token_to_id(std::string_view token) const {
  auto it = token_to_id_.find(std::string(token));
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_file(const std::string& tokenizer_json) {
  const std::string text = read_text_file(tokenizer_json);
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    fail(tokenizer_json, ": invalid JSON: ", e.what());
  }
  return std::make_unique<BpeTokenizer>(tokenizer_json, root);
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const std::string& gguf_path) {
  const GgufFile f(gguf_path);
  return std::make_unique<BpeTokenizer>(gguf_path, td::tokenizer_json_from_gguf(f));
}

std::unique_ptr<Tokenizer> Tokenizer::from_dir(const std::string& model_dir) {
  if (const auto gguf = find_gguf(model_dir)) return from_gguf(*gguf);
  std::string path = model_dir;
  if (!path.empty() && path.back() != '/') path += '/';
  return from_file(path + "tokenizer.json");
}

}  // namespace dspark
