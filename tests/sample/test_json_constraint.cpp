// The JSON constraint engine on the demo tokenizer (vocab 8192): acceptance of documents byte by
// byte and token by token, mask exactness (random walks that must end in valid documents, every
// token's mask bit against an independent check), push/pop, schema errors, timing.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "sample/json_constraint.h"
#include "tokenizer/tokenizer.h"

namespace dspark {
namespace {

using nlohmann::json;

struct Demo {
  std::unique_ptr<Tokenizer> tok;
  std::shared_ptr<const TokenVocab> vocab;
  std::vector<int32_t> eos;
  // DSPARK_JSON_TOKENIZER=path/tokenizer.json runs the suite on another vocabulary (a large one,
  // for timings); the default is the demo's.
  Demo() {
    const char* other = std::getenv("DSPARK_JSON_TOKENIZER");
    tok = Tokenizer::from_file(other && *other
                                   ? std::string(other)
                                   : std::string(DSPARK_MODELS_DIR) + "/demo/tokenizer.json");
    for (const char* name : {"<|endoftext|>", "<|im_end|>", "<|end_of_text|>", "<|eot_id|>"})
      if (auto id = tok->token_to_id(name)) eos.push_back(*id);
    vocab = TokenVocab::build(*tok, eos);
  }
};

const Demo& demo() {
  static Demo d;
  return d;
}

// ---- a validator for the supported subset, written from the schema text alone
bool validate(const json& s, const json& v, const json& root);

bool type_ok(const std::string& t, const json& v) {
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "number") return v.is_number();
  if (t == "integer") return v.is_number_integer() || v.is_number_unsigned();
  if (t == "boolean") return v.is_boolean();
  return v.is_null();
}

bool validate(const json& s, const json& v, const json& root) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) {
    std::string r = s["$ref"];
    std::string sec = r.rfind("#/$defs/", 0) == 0 ? "$defs" : "definitions";
    return validate(root[sec][r.substr(sec.size() + 3)], v, root);
  }
  if (s.contains("anyOf")) {
    for (const json& a : s["anyOf"])
      if (validate(a, v, root)) return true;
    return false;
  }
  if (s.contains("oneOf")) {
    int n = 0;
    for (const json& a : s["oneOf"]) n += validate(a, v, root);
    return n == 1;
  }
  if (s.contains("type")) {
    bool any = false;
    if (s["type"].is_string())
      any = type_ok(s["type"], v);
    else
      for (const json& t : s["type"]) any = any || type_ok(t, v);
    if (!any) return false;
  }
  if (s.contains("const") && s["const"] != v) return false;
  if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end())
    return false;
  if (v.is_object()) {
    json props = s.value("properties", json::object());
    for (const auto& [k, x] : v.items()) {
      if (props.contains(k)) {
        if (!validate(props[k], x, root)) return false;
      } else if (s.contains("additionalProperties")) {
        if (!validate(s["additionalProperties"], x, root)) return false;
      } else if (s.contains("properties")) {
        return false;
      }
    }
    for (const json& r : s.value("required", json::array()))
      if (!v.contains(r.get<std::string>())) return false;
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    if (s.contains("items"))
      for (const json& x : v)
        if (!validate(s["items"], x, root)) return false;
  }
  return true;
}

const json kPerson = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    "ok": {"type": "boolean"}
  },
  "required": ["name", "age"]})");
const json kMixed = json::parse(R"({
  "type": "object",
  "title": "Mixed",
  "properties": {
    "kind": {"enum": ["a", "b", 1, 2.5, 12, null, true]},
    "x": {"type": ["number", "null"]},
    "inner": {"type": "object", "properties": {"v": {"const": "fixed"}, "w": {"type": "boolean"}},
              "required": ["v"]},
    "extra": {"type": "object", "properties": {"p": {"type": "string"}},
              "additionalProperties": true}
  },
  "required": ["kind", "inner"]})");
const json kList = json::parse(R"({
  "type": "array",
  "items": {"anyOf": [{"type": "string"}, {"type": "integer"},
                      {"type": "object", "properties": {"k": {"type": "null"}}}]},
  "minItems": 1, "maxItems": 4})");
const json kTree = json::parse(R"({
  "$defs": {"node": {"type": "object",
    "properties": {"val": {"type": "integer"},
                   "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
    "required": ["val", "next"]}},
  "$ref": "#/$defs/node"})");
const json kMap = json::parse(R"({"type": "object", "additionalProperties": {"type": "number"}})");
const json kNumber = json::parse(R"({"type": "number"})");

std::vector<std::pair<std::string, json>> schemas() {
  return {{"person", kPerson}, {"mixed", kMixed}, {"list", kList},
          {"tree", kTree},     {"map", kMap},     {"number", kNumber}};
}

// Byte by byte (each byte one push), then complete().
bool accepts_bytes(const std::shared_ptr<const JsonGrammar>& g, const std::string& text) {
  JsonMatcher m(g, demo().vocab);
  for (char c : text)
    if (!m.push_bytes(std::string_view(&c, 1))) return false;
  return m.complete();
}

// Token by token as the tokenizer splits the text; every token also checked against allows().
bool accepts_tokens(const std::shared_ptr<const JsonGrammar>& g, const std::string& text) {
  JsonMatcher m(g, demo().vocab);
  for (int32_t t : demo().tok->encode(text)) {
    bool a = m.allows(t);
    bool ok = m.push(t);
    EXPECT_EQ(a, ok) << "allows() and push() disagree on token " << t << " in " << text;
    if (!ok) return false;
  }
  if (!m.complete()) return false;
  EXPECT_TRUE(m.allows(demo().eos[0]));
  EXPECT_TRUE(m.push(demo().eos[0]));
  EXPECT_TRUE(m.ended());
  EXPECT_FALSE(m.allows(demo().eos[0]));
  return true;
}

void expect_docs(const std::shared_ptr<const JsonGrammar>& g, const std::vector<std::string>& good,
                 const std::vector<std::string>& bad) {
  // The tokenizer turns invalid UTF-8 into U+FFFD: token checks only for texts it keeps.
  auto round_trips = [](const std::string& t) {
    auto ids = demo().tok->encode(t);
    return demo().tok->decode(ids) == t;
  };
  for (const std::string& t : good) {
    EXPECT_TRUE(accepts_bytes(g, t)) << "should accept: " << t;
    EXPECT_TRUE(round_trips(t)) << t;
    EXPECT_TRUE(accepts_tokens(g, t)) << "should accept (tokens): " << t;
  }
  for (const std::string& t : bad) {
    EXPECT_FALSE(accepts_bytes(g, t)) << "should refuse: " << t;
    if (round_trips(t)) {
      EXPECT_FALSE(accepts_tokens(g, t)) << "should refuse (tokens): " << t;
    }
  }
}

TEST(JsonConstraint, JsonObjectDocuments) {
  auto g = JsonGrammar::any_object();
  expect_docs(g,
              {"{}", " {} ", "{\"a\":1}", "{\"a\" : [ true , false , null ] }",
               "{\"a\":-0.5e+10,\"b\":0,\"c\":-0,\"d\":1E2,\"e\":12.25}",
               "{\"s\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\"}",
               "{\"utf8\":\"h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80\"}",
               "{\"n\":{\"m\":[[],{},[{}],\"x\"]}}", "{\n  \"a\": {\n    \"b\": [1, 2]\n  }\n}\n",
               "{\"a\":1,\"a\":2}", "{\"\":\"\"}", std::string(16, ' ') + "{}"},
              {"",
               "[]",
               "1",
               "\"s\"",
               "{",
               "{\"a\"}",
               "{\"a\":}",
               "{\"a\":1,}",
               "{,}",
               "{}x",
               "{}{}",
               "{\"a\":01}",
               "{\"a\":1.}",
               "{\"a\":.5}",
               "{\"a\":1e}",
               "{\"a\":+1}",
               "{\"a\":tru}",
               "{\"a\":True}",
               "{'a':1}",
               "{\"a\":\"\\x\"}",
               "{\"a\":\"\\udc00\"}",
               "{\"a\":\"\\ud800\"}",
               "{\"a\":\"\\ud800\\u0041\"}",
               "{\"a\":\"\xff\"}",
               "{\"a\":\"\xc0\x80\"}",
               "{\"a\":\"\xed\xa0\x80\"}",
               "{\"a\":\"\xf4\x90\x80\x80\"}",
               "{\"a\":\"\xc3\"}",
               "{\"a\":\"tab\there\"}",
               "{\"a\":[1 2]}",
               std::string(17, ' ') + "{}",
               "{" + std::string(17, ' ') + "}",
               "{\"a\":12345678901234567890}",
               "{\"a\":1e100}"});
}

TEST(JsonConstraint, SchemaDocuments) {
  expect_docs(JsonGrammar::from_schema(kPerson),
              {"{\"name\":\"Ann\",\"age\":31}", "{\"age\":-2,\"name\":\"\",\"ok\":true}",
               "{\"name\":\"B\",\"age\":0,\"tags\":[\"x\",\"y\",\"z\"]}",
               "{ \"tags\" : [], \"name\" : \"C\" , \"age\" : 7 }"},
              {"{}", "{\"name\":\"Ann\"}", "{\"name\":\"Ann\",\"age\":3.5}",
               "{\"name\":\"Ann\",\"age\":1e3}", "{\"name\":1,\"age\":1}",
               "{\"name\":\"A\",\"age\":1,\"name\":\"B\"}", "{\"name\":\"A\",\"age\":1,\"x\":1}",
               "{\"name\":\"A\",\"age\":1,\"tags\":[\"a\",\"b\",\"c\",\"d\"]}",
               "{\"nam\":\"A\",\"age\":1}", "{\"n\\u0061me\":\"A\",\"age\":1}", "[]"});
  expect_docs(
      JsonGrammar::from_schema(kMixed),
      {"{\"kind\":\"a\",\"inner\":{\"v\":\"fixed\"}}",
       "{\"kind\":12,\"x\":null,\"inner\":{\"v\":\"fixed\",\"w\":true},\"extra\":{\"q\":[1]}}",
       "{\"inner\":{\"v\":\"fixed\"},\"kind\":2.5,\"x\":-3.5}",
       "{\"kind\":1,\"inner\":{\"v\":\"fixed\"}}", "{\"kind\":null,\"inner\":{\"v\":\"fixed\"}}",
       "{\"kind\":true,\"inner\":{\"v\":\"fixed\"}}"},
      {"{\"kind\":\"c\",\"inner\":{\"v\":\"fixed\"}}", "{\"kind\":2,\"inner\":{\"v\":\"fixed\"}}",
       "{\"kind\":false,\"inner\":{\"v\":\"fixed\"}}", "{\"kind\":\"a\",\"inner\":{}}",
       "{\"kind\":\"a\",\"inner\":{\"v\":\"other\"}}",
       "{\"kind\":\"a\",\"inner\":{\"v\":\"fixed\",\"v\":\"fixed\"}}",
       "{\"kind\":\"a\",\"inner\":{\"v\":\"fixed\",\"other\":1}}",
       "{\"kind\":\"a\",\"inner\":{\"v\":\"fixed\"},\"extra\":{\"p\":1}}",
       "{\"kind\":1.0,\"inner\":{\"v\":\"fixed\"}}",
       "{\"kind\":\"a\",\"x\":\"1\",\"inner\":{\"v\":\"fixed\"}}"});
  expect_docs(JsonGrammar::from_schema(kList), {"[\"a\"]", "[1,\"b\",{},{\"k\":null}]", "[ -5 ]"},
              {"[]", "[1,2,3,4,5]", "[1.5]", "[{\"k\":1}]", "[{\"j\":null}]", "[null]"});
  expect_docs(JsonGrammar::from_schema(kTree),
              {"{\"val\":1,\"next\":null}", "{\"next\":{\"val\":2,\"next\":null},\"val\":1}"},
              {"{\"val\":1}", "{\"val\":1,\"next\":{}}", "{\"val\":1,\"next\":3}"});
  expect_docs(JsonGrammar::from_schema(kMap), {"{}", "{\"a\":1,\"b\":2.5}"},
              {"{\"a\":\"x\"}", "{\"a\":null}"});
  expect_docs(JsonGrammar::from_schema(kNumber), {"12", "-0.5", "1e5", "3 "},
              {"", "1.", "\"1\"", "12a", "1 2"});
}

// ---- an independent viability check for json_object: a recursive-descent reader of the text
// that reports whether it is a whole document, a prefix of one (it ran out of input), or neither,
// under the same documented rules (whitespace runs, number lengths).
class PrefixChecker {
 public:
  enum R { kOk, kEnd, kBad };
  explicit PrefixChecker(const std::string& t) : t_(t) {}

  // 1: a complete document, 0: a prefix of one, -1: no document starts so.
  int doc() {
    R r = ws();
    if (r != kOk) return r == kEnd ? 0 : -1;
    if (t_[i_] != '{') return -1;
    r = object();
    if (r != kOk) return r == kEnd ? 0 : -1;
    r = ws();
    if (r == kBad) return -1;
    return r == kEnd ? 1 : -1;
  }

 private:
  bool end() const { return i_ >= t_.size(); }
  uint8_t at() const { return uint8_t(t_[i_]); }
  R ws() {
    int n = 0;
    while (!end() && (at() == ' ' || at() == '\t' || at() == '\n' || at() == '\r')) {
      if (++n > JsonGrammar::kDefaultMaxWhitespace) return kBad;
      ++i_;
    }
    return end() ? kEnd : kOk;
  }
  R expect(char c) {
    if (end()) return kEnd;
    if (at() != uint8_t(c)) return kBad;
    ++i_;
    return kOk;
  }
  R value() {
    if (end()) return kEnd;
    switch (at()) {
      case '{':
        return object();
      case '[':
        return array();
      case '"':
        return string();
      case 't':
        return word("true");
      case 'f':
        return word("false");
      case 'n':
        return word("null");
      default:
        return at() == '-' || (at() >= '0' && at() <= '9') ? number() : kBad;
    }
  }
  R word(const char* w) {
    for (; *w; ++w)
      if (R r = expect(*w); r != kOk) return r;
    return kOk;
  }
  R digits(size_t max, bool need_one) {
    size_t n = 0;
    while (!end() && at() >= '0' && at() <= '9' && n < max) ++i_, ++n;
    if (n == 0 && need_one) return end() ? kEnd : kBad;
    return end() ? kEnd : kOk;
  }
  R number() {
    if (at() == '-') ++i_;
    if (end()) return kEnd;
    if (at() == '0') {
      ++i_;
      if (end()) return kEnd;
    } else if (R r = digits(19, true); r != kOk) {
      return r;
    }
    if (at() == '.') {
      ++i_;
      if (R r = digits(19, true); r != kOk) return r;
    }
    if (at() == 'e' || at() == 'E') {
      ++i_;
      if (end()) return kEnd;
      if (at() == '+' || at() == '-') ++i_;
      if (R r = digits(2, true); r != kOk) return r;
    }
    return kOk;
  }
  R hex(std::string& got, int n, bool first = true) {
    for (int k = 0; k < n; ++k) {
      if (end()) return kEnd;
      if (!std::isxdigit(at())) return kBad;
      got += char(std::tolower(at()));
      ++i_;
      if (first && got.size() == 2 && got[0] == 'd' && got[1] >= 'c') return kBad;  // lone low
    }
    return kOk;
  }
  R escape_u() {
    std::string h;
    if (R r = hex(h, 4); r != kOk) return r;
    if (!(h[0] == 'd' && h[1] >= '8')) return kOk;  // not a high surrogate
    if (R r = word("\\u"); r != kOk) return r;
    if (end()) return kEnd;
    if (std::tolower(at()) != 'd') return kBad;
    ++i_;
    if (end()) return kEnd;
    char c = char(std::tolower(at()));
    if (c < 'c' || c > 'f') return kBad;
    ++i_;
    std::string rest;
    return hex(rest, 2, false);
  }
  R utf8() {
    uint8_t c = at();
    int more;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
      more = 1;
    else if (c >= 0xE0 && c <= 0xEF)
      more = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
      more = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else
      return kBad;
    ++i_;
    for (int k = 0; k < more; ++k, lo = 0x80, hi = 0xBF) {
      if (end()) return kEnd;
      if (at() < lo || at() > hi) return kBad;
      ++i_;
    }
    return kOk;
  }
  R string() {
    ++i_;
    for (;;) {
      if (end()) return kEnd;
      uint8_t c = at();
      if (c == '"') {
        ++i_;
        return kOk;
      }
      R r = kOk;
      if (c < 0x20) return kBad;
      if (c == '\\') {
        ++i_;
        if (end()) return kEnd;
        char e = char(at());
        ++i_;
        if (e == 'u')
          r = escape_u();
        else if (!std::strchr("\"\\/bfnrt", e) || e == 0)
          r = kBad;
      } else if (c >= 0x80) {
        r = utf8();
      } else {
        ++i_;
      }
      if (r != kOk) return r;
    }
  }
  R object() {
    ++i_;
    if (R r = ws(); r != kOk) return r;
    if (at() == '}') return ++i_, kOk;
    for (;;) {
      if (R r = ws(); r != kOk) return r;
      if (at() != '"') return kBad;
      R r;
      if ((r = string()) != kOk || (r = ws()) != kOk || (r = expect(':')) != kOk ||
          (r = ws()) != kOk || (r = value()) != kOk || (r = ws()) != kOk)
        return r;
      if (at() == '}') return ++i_, kOk;
      if (R r = expect(','); r != kOk) return r;
    }
  }
  R array() {
    ++i_;
    if (R r = ws(); r != kOk) return r;
    if (at() == ']') return ++i_, kOk;
    for (;;) {
      R r;
      if ((r = ws()) != kOk || (r = value()) != kOk || (r = ws()) != kOk) return r;
      if (at() == ']') return ++i_, kOk;
      if (R r = expect(','); r != kOk) return r;
    }
  }

  const std::string& t_;
  size_t i_ = 0;
};

int oracle(const std::string& t) {
  return PrefixChecker(t).doc();
}

std::string text_of(const std::vector<int32_t>& toks) {
  std::string s;
  for (int32_t t : toks) s += demo().vocab->bytes(t);
  return s;
}

// Tokens that a finishing walk prefers, in order: close a string, an object, an array.
std::vector<int32_t> closers() {
  std::vector<int32_t> out;
  for (const char* b : {"\"", "}", "]"})
    for (int32_t id = 0; id < demo().vocab->size(); ++id)
      if (demo().vocab->bytes(id) == b && !demo().tok->is_special(id)) {
        out.push_back(id);
        break;
      }
  return out;
}

// A random walk: uniform among allowed tokens for `free_steps`, then closing where possible.
// Returns the tokens (EOS excluded); complete() must hold at the end.
// by_first_byte: pick a first byte among the allowed tokens', then a token (reaches structure more
// often than uniform picks, which mostly extend strings).
std::vector<int32_t> walk(JsonMatcher& m, std::mt19937& rng, int free_steps, bool finish,
                          bool by_first_byte = false, bool must_finish = true) {
  const int V = demo().vocab->size();
  std::vector<uint8_t> mask(size_t(V), 0);
  std::vector<int32_t> toks, allowed;
  static const std::vector<int32_t> close = closers();
  for (int step = 0; step < 3000; ++step) {
    m.allowed(mask.data());
    allowed.clear();
    for (int32_t t = 0; t < V; ++t)
      if (mask[size_t(t)]) allowed.push_back(t);
    EXPECT_FALSE(allowed.empty()) << "dead end after: " << text_of(toks);
    if (allowed.empty()) return toks;
    bool eos = m.complete();
    if (step >= free_steps) {
      if (!finish) return toks;
      if (eos) return toks;
      int32_t pick = -1;
      for (int32_t c : close)
        if (pick < 0 && mask[size_t(c)]) pick = c;
      if (pick < 0 || rng() % 4 == 0) pick = allowed[rng() % allowed.size()];
      if (!demo().vocab->is_eos(pick)) {
        EXPECT_TRUE(m.push(pick));
        toks.push_back(pick);
      }
      continue;
    }
    int32_t pick = allowed[rng() % allowed.size()];
    if (by_first_byte && !demo().vocab->is_eos(pick)) {
      std::vector<uint8_t> firsts;
      for (int32_t t : allowed)
        if (!demo().vocab->is_eos(t)) firsts.push_back(uint8_t(demo().vocab->bytes(t)[0]));
      std::sort(firsts.begin(), firsts.end());
      firsts.erase(std::unique(firsts.begin(), firsts.end()), firsts.end());
      uint8_t first = firsts[rng() % firsts.size()];
      std::vector<int32_t> same;
      for (int32_t t : allowed) {
        const std::string& b = demo().vocab->bytes(t);
        if (!b.empty() && uint8_t(b[0]) == first) same.push_back(t);
      }
      pick = same[rng() % same.size()];
    }
    if (demo().vocab->is_eos(pick)) return toks;
    EXPECT_TRUE(m.push(pick));
    toks.push_back(pick);
  }
  if (must_finish) ADD_FAILURE() << "walk did not finish: " << text_of(toks);
  return toks;
}

TEST(JsonConstraint, RandomWalksEndInValidDocuments) {
  std::mt19937 rng(1234);
  auto run = [&](const std::shared_ptr<const JsonGrammar>& g, const json* schema, int walks) {
    for (int w = 0; w < walks; ++w) {
      JsonMatcher m(g, demo().vocab);
      auto toks = walk(m, rng, int(rng() % 40), true, w % 2 == 1);
      ASSERT_TRUE(m.complete()) << text_of(toks);
      std::string text = text_of(toks);
      json v;
      ASSERT_NO_THROW(v = json::parse(text)) << text;
      if (schema) {
        EXPECT_TRUE(validate(*schema, v, *schema)) << text;
      } else {
        EXPECT_TRUE(v.is_object()) << text;
      }
    }
  };
  run(JsonGrammar::any_object(), nullptr, 60);
  for (const auto& [name, s] : schemas()) {
    SCOPED_TRACE(name);
    run(JsonGrammar::from_schema(s), &s, 40);
  }
}

// Every token's mask bit against pushing its bytes one at a time, and for json_object against the
// independent checker; allows() agrees with the mask.
void check_every_token(JsonMatcher& m, const std::string& prefix, bool use_oracle) {
  const int V = demo().vocab->size();
  std::vector<uint8_t> mask(static_cast<size_t>(V));
  m.allowed(mask.data());
  int mismatches = 0;
  if (use_oracle) {
    EXPECT_EQ(m.complete(), oracle(prefix) == 1) << json(prefix).dump();
  }
  for (int32_t t = 0; t < V; ++t) {
    bool want;
    const std::string& b = demo().vocab->bytes(t);
    if (demo().vocab->is_eos(t)) {
      want = m.complete();
    } else if (b.empty()) {
      want = false;
    } else {
      size_t n = 0;
      for (; n < b.size() && m.push_bytes(std::string_view(b).substr(n, 1)); ++n) {
      }
      want = n == b.size();
      for (size_t i = 0; i < n; ++i) m.pop();
      if (use_oracle && want != (oracle(prefix + b) >= 0) && ++mismatches <= 5)
        ADD_FAILURE() << "checker disagrees on token " << t << " (" << json(b).dump() << ") after "
                      << json(prefix).dump();
    }
    if (mask[size_t(t)] != want && ++mismatches <= 5)
      ADD_FAILURE() << "mask[" << t << "]=" << int(mask[size_t(t)]) << " after "
                    << json(prefix).dump() << " token " << json(b).dump();
    if (m.allows(t) != want && ++mismatches <= 5) ADD_FAILURE() << "allows(" << t << ")";
  }
}

TEST(JsonConstraint, MaskIsExactAtRandomPrefixes) {
  std::mt19937 rng(99);
  const int V = demo().vocab->size();
  std::vector<uint8_t> mask(static_cast<size_t>(V)), again(static_cast<size_t>(V));
  auto check = [&](const std::shared_ptr<const JsonGrammar>& g, bool use_oracle, int prefixes) {
    for (int p = 0; p < prefixes; ++p) {
      JsonMatcher m(g, demo().vocab);
      auto toks = walk(m, rng, int(rng() % 40), false, p % 2 == 1);
      std::string prefix = text_of(toks);
      check_every_token(m, prefix, use_oracle);
      ASSERT_EQ(m.depth(), toks.size());
      // push + pop leaves the mask as it was
      m.allowed(mask.data());
      for (int k = 0; k < 5; ++k) {
        std::vector<int32_t> ok;
        for (int32_t t = 0; t < V; ++t)
          if (mask[size_t(t)]) ok.push_back(t);
        if (ok.empty()) break;
        int32_t t = ok[rng() % ok.size()];
        ASSERT_TRUE(m.push(t));
        ASSERT_FALSE(m.push(-1));
        m.pop();
        m.allowed(again.data());
        ASSERT_EQ(mask, again) << "pop did not restore the state after " << prefix;
      }
    }
  };
  check(JsonGrammar::any_object(), true, 80);
  for (const auto& [name, s] : schemas()) {
    SCOPED_TRACE(name);
    check(JsonGrammar::from_schema(s), false, 16);
  }
}

// Every byte prefix of some documents with all of JSON's corners, against the checker.
TEST(JsonConstraint, MaskIsExactAtEveryPrefixOfDocuments) {
  auto g = JsonGrammar::any_object();
  for (std::string doc :
       {"{\"a\" : [ true , false , null, [], {} ],\"b\":{\"c\":-0.5e+10,\"d\":0,\"e\":12.5E-3}}",
        "{\"s\":\"x\\u00e9\\ud83d\\uDE00\\n\\\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}",
        "\n {\n\t\"k\"\r:\n[1\n,\n2]\n}\n"}) {
    JsonMatcher m(g, demo().vocab);
    for (size_t i = 0; i <= doc.size(); ++i) {
      check_every_token(m, doc.substr(0, i), true);
      if (i < doc.size()) {
        ASSERT_TRUE(m.push_bytes(doc.substr(i, 1))) << doc.substr(0, i + 1);
      }
    }
    EXPECT_TRUE(m.complete());
  }
  auto mixed = JsonGrammar::from_schema(kMixed);
  std::string doc =
      "{\"kind\":1,\"inner\":{\"v\":\"fixed\"},\"extra\":{\"p\":\"a\",\"pq\\u00e9\":[1],\"\":{}}}";
  JsonMatcher m(mixed, demo().vocab);
  for (size_t i = 0; i <= doc.size(); ++i) {
    check_every_token(m, doc.substr(0, i), false);
    if (i < doc.size()) {
      ASSERT_TRUE(m.push_bytes(doc.substr(i, 1))) << doc.substr(0, i + 1);
    }
  }
  EXPECT_TRUE(m.complete());
}

TEST(JsonConstraint, PopUndoesPushes) {
  auto g = JsonGrammar::from_schema(kPerson);
  JsonMatcher m(g, demo().vocab);
  const int V = demo().vocab->size();
  std::vector<std::vector<uint8_t>> masks;
  auto toks = demo().tok->encode("{\"name\":\"Ann \xc3\xa9\",\"age\":42}");
  for (int32_t t : toks) {
    masks.emplace_back(static_cast<size_t>(V));
    m.allowed(masks.back().data());
    ASSERT_TRUE(m.push(t));
  }
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.push(toks[0]));  // refused: state unchanged
  EXPECT_EQ(m.depth(), toks.size());
  std::vector<uint8_t> now(static_cast<size_t>(V));
  while (m.depth() > 0) {
    m.pop();
    m.allowed(now.data());
    EXPECT_EQ(now, masks[m.depth()]) << "after pop to depth " << m.depth();
  }
  EXPECT_THROW(m.pop(), Error);
  // EOS pushed and popped
  for (int32_t t : toks) ASSERT_TRUE(m.push(t));
  ASSERT_TRUE(m.push(demo().eos[0]));
  m.allowed(now.data());
  EXPECT_TRUE(std::all_of(now.begin(), now.end(), [](uint8_t x) { return x == 0; }));
  m.pop();
  EXPECT_TRUE(m.allows(demo().eos[0]));
}

void expect_error(const json& schema, const std::string& part) {
  try {
    JsonGrammar::from_schema(schema);
    ADD_FAILURE() << "no error for " << schema.dump();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
        << "error \"" << e.what() << "\" lacks \"" << part << "\"";
  }
}

TEST(JsonConstraint, SchemaErrorsNameKeywordAndPath) {
  expect_error(
      json::parse(R"({"type":"object","properties":{"age":{"type":"string","pattern":"x"}}})"),
      "response_format.json_schema.schema/properties/age: unsupported keyword \"pattern\"");
  expect_error(json::parse(R"({"type":"array","items":{"type":"number","minimum":0}})"),
               "schema/items: unsupported keyword \"minimum\"");
  expect_error(json::parse(R"({"type":"string","format":"date"})"),
               "schema: unsupported keyword \"format\"");
  expect_error(json::parse(R"({"properties":{"a/b":{"allOf":[]}}})"),
               "schema/properties/a~1b: unsupported keyword \"allOf\"");
  expect_error(json::parse(R"({"type":3})"), "\"type\" must be a string");
  expect_error(json::parse(R"({"type":"text"})"), "unknown type \"text\"");
  expect_error(json::parse(R"({"type":"object","required":"a"})"),
               "\"required\" must be an array of strings");
  expect_error(json::parse(R"({"type":"object","required":[1]})"),
               "\"required\" must be an array of strings");
  expect_error(json::parse(R"({"type":"object","properties":[]})"),
               "\"properties\" must be an object");
  expect_error(json::parse(R"({"type":"object","properties":{"a":{}},"required":["b"]})"),
               "required property \"b\" is not in \"properties\"");
  expect_error(json::parse(R"({"type":"object","additionalProperties":1})"),
               "\"additionalProperties\" must be");
  expect_error(json::parse(R"({"type":"array","minItems":-1})"),
               "\"minItems\" must be a non-negative integer");
  expect_error(json::parse(R"({"type":"array","minItems":3,"maxItems":2})"),
               "\"minItems\" is above \"maxItems\"");
  expect_error(json::parse(R"({"type":"array","items":[{}]})"), "tuple form");
  expect_error(json::parse(R"({"enum":[]})"), "\"enum\" must be a non-empty array");
  expect_error(json::parse(R"({"type":"string","enum":[1]})"),
               "no value of \"enum\"/\"const\" has the \"type\"");
  expect_error(json::parse(R"({"anyOf":{}})"), "\"anyOf\" must be a non-empty array");
  expect_error(
      json::parse(R"({"anyOf":[{"type":"object"},{"type":"object","properties":{"a":{}}}]})"),
      "schema: alternatives overlap (two can start with '{')");
  expect_error(json::parse(R"({"oneOf":[{"type":"string"},{"properties":{"a":{}}}]})"),
               "schema/oneOf/1: a \"oneOf\" alternative needs a \"type\"");
  expect_error(json::parse(R"({"oneOf":[{"type":"integer"},{"type":"number"}]})"),
               "alternatives overlap");
  expect_error(json::parse(R"({"$ref":"#/$defs/x"})"),
               "\"$ref\" \"#/$defs/x\" names no definition");
  expect_error(json::parse(R"({"$ref":"http://x"})"), "only \"#/$defs/NAME\"");
  expect_error(json::parse(R"({"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})"), "cycle");
  expect_error(json::parse(R"({"type":"string","$ref":"#/$defs/a"})"), "together with \"$ref\"");
  expect_error(json::parse(R"(false)"), "the schema false");
  expect_error(json::parse(R"(3)"), "a schema must be an object");
  try {
    JsonGrammar::from_schema(json::parse(R"({"type":"null","maxLength":1})"), "rf");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "rf: unsupported keyword \"maxLength\"");
  }
}

// States with no completion are never entered: each case is a prefix and bytes refused after it.
TEST(JsonConstraint, NoDeadEnds) {
  struct Case {
    const char* schema;
    const char* prefix;
    std::vector<std::string> refused, allowed;
  };
  const std::vector<Case> cases = {
      {R"({"type":"object","properties":{"a":{"type":"integer"}}})",
       "{\"a\":1",
       {",", " ,"},
       {"}"}},
      {R"({"type":"object","properties":{"a":{},"ab":{}}})", "{\"a\":1,\"a", {"\""}, {"b"}},
      {R"({"type":"object","properties":{"a":{}},"required":["a"]})", "{", {"}"}, {"\"a"}},
      {R"({"type":"object","additionalProperties":false})", "{", {"\""}, {"}"}},
      {R"({"type":"array","maxItems":1})", "[1", {",", " 2"}, {"]"}},
      {R"({"type":"array","minItems":2})", "[1", {"]"}, {","}},
      {R"({"type":"array","maxItems":0})", "[", {"1", "\""}, {"]"}},
      {R"({"enum":["ab","ac"]})", "\"a", {"\"", "d"}, {"b", "c\""}},
      {R"({"enum":[12,1.5]})", "1", {"3", "e"}, {"2", ".5"}},
      {R"({"type":"integer"})", "1", {".", "e"}, {"0"}},
      {R"({"type":"string"})", "\"\\u", {"g", "dc"}, {"d8", "0041"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.schema) + " after " + c.prefix);
    JsonMatcher m(JsonGrammar::from_schema(json::parse(c.schema)), demo().vocab);
    ASSERT_TRUE(m.push_bytes(c.prefix));
    for (const std::string& b : c.refused) EXPECT_FALSE(m.push_bytes(b)) << b;
    for (const std::string& b : c.allowed) {
      EXPECT_TRUE(m.push_bytes(b)) << b;
      m.pop();
    }
  }
}

// Random schemas, odd ones included (wrong field types, unsupported keywords, overlaps): each
// compiles or throws Error; a compiled one has no dead ends and its documents validate.
json random_schema(std::mt19937& rng, int depth) {
  auto coin = [&](int in) { return int(rng() % unsigned(in)) == 0; };
  const std::vector<json> types = {"string",
                                   "number",
                                   "integer",
                                   "boolean",
                                   "null",
                                   "object",
                                   "array",
                                   json::array({"string", "null"}),
                                   json::array({"integer", "number"}),
                                   3,
                                   "text"};
  const std::vector<json> scalars = {"a", "b", "", 1, 2.5, -3, true, false, nullptr, "\u00e9x"};
  json s = json::object();
  if (depth > 3) return coin(2) ? json(true) : json::object({{"type", "string"}});
  if (coin(2)) s["type"] = types[rng() % types.size()];
  std::vector<std::string> names;
  if (coin(3)) {
    s["properties"] = json::object();
    for (int i = int(rng() % 4); i > 0; --i) {
      names.push_back(std::string(1, char('a' + rng() % 5)));
      s["properties"][names.back()] = random_schema(rng, depth + 1);
    }
  }
  if (coin(4)) {
    s["required"] = json::array();
    for (const std::string& n : names)
      if (coin(2)) s["required"].push_back(n);
    if (coin(5)) s["required"].push_back(coin(2) ? json("zz") : json(1));
  }
  if (coin(4)) s["additionalProperties"] = coin(3) ? json(coin(2)) : random_schema(rng, depth + 1);
  if (coin(4)) s["items"] = coin(5) ? json(coin(2)) : random_schema(rng, depth + 1);
  if (coin(5)) s["minItems"] = int(rng() % 4) - 1;
  if (coin(5)) s["maxItems"] = int(rng() % 4);
  if (coin(5)) {
    s["enum"] = json::array();
    for (int i = int(rng() % 4); i > 0; --i) s["enum"].push_back(scalars[rng() % scalars.size()]);
  }
  if (coin(8)) s["const"] = scalars[rng() % scalars.size()];
  for (const char* comb : {"anyOf", "oneOf"})
    if (coin(7)) {
      s[comb] = json::array();
      for (int i = int(rng() % 3) + 1; i > 0; --i) s[comb].push_back(random_schema(rng, depth + 1));
    }
  if (coin(12)) s[coin(2) ? "pattern" : "format"] = "x";
  if (coin(6)) s["title"] = "t";
  return s;
}

TEST(JsonConstraint, RandomSchemasCompileOrThrowAndHaveNoDeadEnds) {
  std::mt19937 rng(7);
  int compiled = 0, refused = 0, finished = 0;
  for (int i = 0; i < 400; ++i) {
    json schema = random_schema(rng, 0);
    std::shared_ptr<const JsonGrammar> g;
    try {
      g = JsonGrammar::from_schema(schema);
    } catch (const Error&) {
      ++refused;
      continue;
    }
    ++compiled;
    JsonMatcher m(g, demo().vocab);
    auto toks = walk(m, rng, int(rng() % 20), true, i % 2 == 1, false);
    if (!m.complete()) continue;
    ++finished;
    std::string text = text_of(toks);
    json v;
    ASSERT_NO_THROW(v = json::parse(text)) << schema.dump() << "\n" << text;
    EXPECT_TRUE(validate(schema, v, schema)) << schema.dump() << "\n" << text;
  }
  std::cout << "[ schemas ] " << compiled << " compiled (" << finished << " walks finished), "
            << refused << " refused\n";
  EXPECT_GT(compiled, 100);
  EXPECT_GT(refused, 20);
  // nesting deeper than the bound is refused, not a stack overflow
  json deep = json::object({{"type", "string"}});
  for (int i = 0; i < 10000; ++i) deep = json::object({{"items", std::move(deep)}});
  EXPECT_THROW(JsonGrammar::from_schema(deep), Error);
}

TEST(JsonConstraint, UnionsMergeWhatTheyCan) {
  // anyOf: number absorbs integer and numeric literals, a string absorbs string literals.
  auto g = JsonGrammar::from_schema(
      json::parse(R"({"anyOf":[{"type":"integer"},{"type":"number"},{"const":3},)"
                  R"({"type":"string"},{"enum":["x",null]}]})"));
  expect_docs(g, {"1.5", "3", "\"x\"", "\"y\"", "null"}, {"true", "{}"});
  // oneOf: literals two alternatives share match none.
  auto o = JsonGrammar::from_schema(json::parse(R"({"oneOf":[{"enum":[1,2]},{"enum":[2,3]}]})"));
  expect_docs(o, {"1", "3"}, {"2", "4"});
  // bounded whitespace can be set per grammar; 0 forbids it
  auto tight = JsonGrammar::from_schema(json::parse(R"({"type":"array"})"), "schema", 0);
  expect_docs(tight, {"[1,[]]"}, {"[ 1]", "[1] "});
}

TEST(JsonConstraint, AllowedTiming) {
  const int V = demo().vocab->size();
  std::vector<uint8_t> mask(static_cast<size_t>(V));
  auto time_at = [&](const std::shared_ptr<const JsonGrammar>& g, const std::string& prefix,
                     const char* what) {
    JsonMatcher m(g, demo().vocab);
    ASSERT_TRUE(m.push_bytes(prefix)) << prefix;
    m.allowed(mask.data());  // warm
    // the median of 9 batches of 100 calls (the machine is shared: single batches jitter)
    std::vector<double> batches;
    for (int b = 0; b < 9; ++b) {
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 100; ++i) m.allowed(mask.data());
      auto t1 = std::chrono::steady_clock::now();
      batches.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 100);
    }
    std::sort(batches.begin(), batches.end());
    double us = batches[batches.size() / 2];
    int allowed = 0;
    for (uint8_t x : mask) allowed += x;
    std::cout << "[ timing ] allowed() " << what << ": " << us << " us/call, " << allowed << " of "
              << V << " tokens allowed\n";
  };
  auto obj = JsonGrammar::any_object();
  auto person = JsonGrammar::from_schema(kPerson);
  time_at(obj, "{\"text\":\"Once upon", "json_object, inside a string");
  time_at(person, "{\"name\":\"Once upon", "schema, inside a string");
  time_at(obj, "{\"a\":1,", "json_object, at an object key");
  time_at(obj, "{\"a\":1,\"", "json_object, inside an object key (start)");
  time_at(obj, "{\"a\":1,\"ke", "json_object, inside an object key");
  time_at(person, "{", "schema, at an object key");
  time_at(person, "{\"na", "schema, inside an object key");
  time_at(JsonGrammar::from_schema(kMixed), "{\"kind\":1,\"inner\":{\"v\":\"fixed\"},\"extra\":{\"",
          "schema, a key that may be a property or any other");
  time_at(obj, "{\"a\":", "json_object, at a value");
  time_at(obj, "{\"a\":12", "json_object, in a number");
  time_at(person, "{\"age\":12", "schema, in a number");
}

}  // namespace
}  // namespace dspark
