// JSON constraint engine: schema compiler, token trie and the byte-level pushdown matcher.
//
// The grammar is a graph of nodes (object, array, string, number, integer, literal set, union,
// $ref alias). Every node has a first-byte table: for each byte, the concrete node (never a union or
// alias) whose value starts with that byte. The matcher keeps a stack of frames (document, object,
// array, string, number, literal); a byte goes to the top frame, which consumes it, finishes with it
// (a closing quote or bracket: the frame pops), or, for a number or a literal that may end here,
// pops and hands the byte to the frame below. Every state the matcher can reach has a completion
// (unsatisfiable schemas are refused when compiled), so a token is allowed iff its bytes step.
#include "sample/json_constraint.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <set>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace dspark {
namespace json_detail {

using nlohmann::json;

constexpr uint32_t kNone = UINT32_MAX;
constexpr uint32_t kOtherKey = UINT32_MAX;  // Frame::b after a key that is no property
constexpr int kMaxProps = 64;
constexpr uint32_t kMaxIntDigits = 19, kMaxFracDigits = 19, kMaxExpDigits = 2;

enum NodeKind : uint8_t { kObject, kArray, kString, kNumber, kInteger, kLiteral, kUnion, kAlias };

struct TrieNode {
  std::vector<std::pair<uint8_t, uint32_t>> edges;  // byte -> child
  int32_t term = -1;                                // the value or property ending here
  uint64_t below = 0;                               // key tries: properties ending at or below
};

struct Node {
  NodeKind kind = kString;
  std::string path;  // JSON pointer, for errors found after compiling
  // object
  std::vector<std::string> names;
  std::vector<int32_t> props;
  uint64_t required = 0;
  int32_t additional = -1;  // -1: no other keys
  uint32_t key_trie = 0;
  // array
  int32_t items = -1;
  uint64_t min_items = 0, max_items = UINT32_MAX;
  // literal set
  std::vector<json> values;
  uint32_t lit_trie = 0;
  // union / alias
  std::vector<int32_t> alts;
  bool one_of = false;
  int32_t target = -1;
  std::array<int32_t, 256> first;  // concrete node per first byte, -1: none
};

struct GrammarData {
  std::vector<Node> nodes;
  std::vector<TrieNode> trie;
  int32_t root = -1;
  int max_ws = 16;

  uint32_t child(uint32_t t, uint8_t c) const {
    for (const auto& [b, ch] : trie[t].edges)
      if (b == c) return ch;
    return kNone;
  }
  uint32_t new_trie() {
    trie.emplace_back();
    return uint32_t(trie.size() - 1);
  }
  // Inserts `s` under root `t`; returns the node where it ends.
  uint32_t insert(uint32_t t, const std::string& s, uint64_t bit) {
    trie[t].below |= bit;
    for (char ch : s) {
      uint8_t c = uint8_t(ch);
      uint32_t nx = child(t, c);
      if (nx == kNone) {
        nx = new_trie();
        trie[t].edges.emplace_back(c, nx);
      }
      t = nx;
      trie[t].below |= bit;
    }
    return t;
  }
};

struct VocabData {
  std::vector<std::string> bytes;
  std::vector<uint8_t> eos;  // per id
  std::vector<int32_t> eos_ids;
  struct VNode {
    uint32_t edge_begin, edge_end, tok_begin, tok_end;
  };
  std::vector<VNode> nodes;  // preorder; node 0 is the root
  std::vector<uint8_t> edge_byte;
  std::vector<uint32_t> edge_child;
  std::vector<int32_t> toks;
};

namespace {

// ---------------------------------------------------------------------------------------------
// Schema compiler

const std::set<std::string> kAnnotations = {"title",   "description", "default", "examples",
                                            "$schema", "$id",         "$comment", "$defs",
                                            "definitions"};
const std::set<std::string> kKeywords = {"type",     "properties", "required", "additionalProperties",
                                         "items",    "minItems",   "maxItems", "enum",
                                         "const",    "anyOf",      "oneOf",    "$ref"};

std::string pointer_token(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

bool is_integer_value(const json& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) return true;
  if (!v.is_number_float()) return false;
  double d = v.get<double>();
  return d == double(int64_t(d));
}

bool type_matches(const std::string& type, const json& v) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "number") return v.is_number();
  if (type == "integer") return v.is_number() && is_integer_value(v);
  if (type == "boolean") return v.is_boolean();
  return v.is_null();
}

class Compiler {
 public:
  Compiler(GrammarData& g, const json& root, std::string where)
      : g_(g), root_(root), where_(std::move(where)) {}

  template <class... Parts>
  [[noreturn]] void error(const std::string& path, Parts&&... parts) {
    fail(where_, path, ": ", std::forward<Parts>(parts)...);
  }

  int32_t add(Node n) {
    g_.nodes.push_back(std::move(n));
    return int32_t(g_.nodes.size() - 1);
  }
  Node make(NodeKind k, const std::string& path) {
    Node n;
    n.kind = k;
    n.path = path;
    n.first.fill(-1);
    return n;
  }

  int32_t literal(std::vector<json> values, const std::string& path) {
    Node n = make(kLiteral, path);
    std::set<std::string> seen;
    n.lit_trie = g_.new_trie();
    for (const json& v : values) {
      std::string text = v.dump();
      if (!seen.insert(text).second) continue;
      uint32_t end = g_.insert(n.lit_trie, text, 0);
      g_.trie[end].term = int32_t(n.values.size());
      n.values.push_back(v);
    }
    return add(std::move(n));
  }

  // Any JSON value (one shared node).
  int32_t any() {
    if (any_ >= 0) return any_;
    any_ = add(make(kUnion, ""));
    Node obj = make(kObject, "");
    obj.key_trie = g_.new_trie();
    obj.additional = any_;
    int32_t o = add(std::move(obj));
    Node arr = make(kArray, "");
    arr.items = any_;
    int32_t a = add(std::move(arr));
    int32_t s = add(make(kString, ""));
    int32_t num = add(make(kNumber, ""));
    int32_t lit = literal({json(true), json(false), json(nullptr)}, "");
    g_.nodes[size_t(any_)].alts = {o, a, s, num, lit};
    any_object_ = o;
    return any_;
  }
  int32_t any_object() {
    any();
    return any_object_;
  }

  int32_t compile(const json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return any();
      error(path, "the schema false (no value) is not supported");
    }
    if (!s.is_object()) error(path, "a schema must be an object or a boolean");
    std::vector<std::string> used;
    for (const auto& [k, v] : s.items()) {
      if (kAnnotations.count(k)) continue;
      if (!kKeywords.count(k)) error(path, "unsupported keyword \"", k, "\"");
      used.push_back(k);
    }
    auto only = [&](std::initializer_list<const char*> allowed, const char* what) {
      for (const std::string& k : used) {
        bool ok = false;
        for (const char* a : allowed) ok = ok || k == a;
        if (!ok) error(path, "keyword \"", k, "\" together with ", what, " is not supported");
      }
    };
    if (s.contains("$ref")) {
      only({"$ref"}, "\"$ref\"");
      return ref(s["$ref"], path);
    }
    for (const char* comb : {"anyOf", "oneOf"}) {
      if (!s.contains(comb)) continue;
      only({comb}, comb == std::string("anyOf") ? "\"anyOf\"" : "\"oneOf\"");
      const json& list = s[comb];
      if (!list.is_array() || list.empty())
        error(path, "\"", comb, "\" must be a non-empty array of schemas");
      Node u = make(kUnion, path);
      u.one_of = comb == std::string("oneOf");
      int32_t idx = add(std::move(u));
      std::vector<int32_t> alts;
      for (size_t i = 0; i < list.size(); ++i)
        alts.push_back(compile(list[i], path + "/" + comb + "/" + std::to_string(i)));
      g_.nodes[size_t(idx)].alts = std::move(alts);
      return idx;
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) types.push_back(t.get<std::string>());
      else if (t.is_array() && !t.empty() &&
               std::all_of(t.begin(), t.end(), [](const json& e) { return e.is_string(); }))
        for (const json& e : t) types.push_back(e.get<std::string>());
      else
        error(path, "\"type\" must be a string or a non-empty array of strings");
      for (const std::string& ty : types)
        if (ty != "object" && ty != "array" && ty != "string" && ty != "number" &&
            ty != "integer" && ty != "boolean" && ty != "null")
          error(path, "unknown type \"", ty, "\" in \"type\"");
    }
    if (s.contains("enum") || s.contains("const")) {
      only({"enum", "const", "type"}, "\"enum\"/\"const\"");
      std::vector<json> values;
      if (s.contains("enum")) {
        if (!s["enum"].is_array() || s["enum"].empty())
          error(path, "\"enum\" must be a non-empty array");
        for (const json& v : s["enum"]) values.push_back(v);
      }
      if (s.contains("const")) {
        const json& c = s["const"];
        if (s.contains("enum") && std::find(values.begin(), values.end(), c) == values.end())
          error(path, "\"const\" is not one of \"enum\": no value is allowed");
        values = {c};
      }
      if (!types.empty()) {
        std::erase_if(values, [&](const json& v) {
          return std::none_of(types.begin(), types.end(),
                              [&](const std::string& ty) { return type_matches(ty, v); });
        });
        if (values.empty()) error(path, "no value of \"enum\"/\"const\" has the \"type\"");
      }
      return literal(std::move(values), path);
    }
    if (types.empty()) {
      bool obj = false, arr = false;
      for (const std::string& k : used) {
        obj = obj || k == "properties" || k == "required" || k == "additionalProperties";
        arr = arr || k == "items" || k == "minItems" || k == "maxItems";
      }
      if (obj && arr) error(path, "object and array keywords without a \"type\"");
      if (obj) types.push_back("object");
      else if (arr) types.push_back("array");
      else return any();
    }
    if (types.size() == 1) return typed(types[0], s, path);
    Node u = make(kUnion, path);
    int32_t idx = add(std::move(u));
    std::vector<int32_t> alts;
    for (const std::string& ty : types) alts.push_back(typed(ty, s, path));
    g_.nodes[size_t(idx)].alts = std::move(alts);
    return idx;
  }

  int32_t typed(const std::string& type, const json& s, const std::string& path) {
    if (type == "string") return add(make(kString, path));
    if (type == "number") return add(make(kNumber, path));
    if (type == "integer") return add(make(kInteger, path));
    if (type == "boolean") return literal({json(true), json(false)}, path);
    if (type == "null") return literal({json(nullptr)}, path);
    if (type == "array") return array(s, path);
    return object(s, path);
  }

  int32_t array(const json& s, const std::string& path) {
    Node n = make(kArray, path);
    auto count = [&](const char* key, uint64_t& out) {
      if (!s.contains(key)) return;
      const json& v = s[key];
      if (!(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0)))
        error(path, "\"", key, "\" must be a non-negative integer");
      out = std::min<uint64_t>(v.get<uint64_t>(), UINT32_MAX - 1);
    };
    count("minItems", n.min_items);
    count("maxItems", n.max_items);
    if (n.min_items > n.max_items) error(path, "\"minItems\" is above \"maxItems\"");
    if (s.contains("items")) {
      const json& it = s["items"];
      if (it.is_array()) error(path, "\"items\" as an array (tuple form) is not supported");
      if (it.is_boolean() && !it.get<bool>()) {
        if (n.min_items > 0) error(path, "\"items\": false with \"minItems\" above 0");
        n.max_items = 0;
      }
      n.items = it.is_boolean() ? any() : compile(it, path + "/items");
    } else {
      n.items = any();
    }
    return add(std::move(n));
  }

  int32_t object(const json& s, const std::string& path) {
    Node n = make(kObject, path);
    bool has_props = s.contains("properties");
    if (has_props) {
      const json& props = s["properties"];
      if (!props.is_object()) error(path, "\"properties\" must be an object");
      for (const auto& [name, sub] : props.items()) {
        n.names.push_back(name);
        n.props.push_back(compile(sub, path + "/properties/" + pointer_token(name)));
      }
    }
    if (s.contains("additionalProperties")) {
      const json& ap = s["additionalProperties"];
      if (ap.is_boolean()) n.additional = ap.get<bool>() ? any() : -1;
      else if (ap.is_object()) n.additional = compile(ap, path + "/additionalProperties");
      else error(path, "\"additionalProperties\" must be a boolean or a schema");
    } else {
      n.additional = has_props ? -1 : any();
    }
    std::vector<std::string> required;
    if (s.contains("required")) {
      const json& r = s["required"];
      if (!r.is_array() ||
          !std::all_of(r.begin(), r.end(), [](const json& e) { return e.is_string(); }))
        error(path, "\"required\" must be an array of strings");
      for (const json& e : r) required.push_back(e.get<std::string>());
    }
    for (const std::string& name : required) {
      auto it = std::find(n.names.begin(), n.names.end(), name);
      if (it == n.names.end()) {
        if (n.additional < 0)
          error(path, "required property \"", name, "\" is not in \"properties\" and "
                "additional properties are not allowed");
        n.names.push_back(name);
        n.props.push_back(n.additional);
        it = n.names.end() - 1;
      }
      if (it - n.names.begin() < kMaxProps) n.required |= uint64_t(1) << (it - n.names.begin());
    }
    if (n.names.size() > size_t(kMaxProps))
      error(path, "more than ", kMaxProps, " properties are not supported");
    n.key_trie = g_.new_trie();
    for (size_t i = 0; i < n.names.size(); ++i) {
      std::string key = json(n.names[i]).dump();
      uint32_t end = g_.insert(n.key_trie, key.substr(1, key.size() - 2), uint64_t(1) << i);
      g_.trie[end].term = int32_t(i);
    }
    return add(std::move(n));
  }

  int32_t ref(const json& r, const std::string& path) {
    if (!r.is_string()) error(path, "\"$ref\" must be a string");
    std::string s = r.get<std::string>();
    auto it = refs_.find(s);
    if (it != refs_.end()) return it->second;
    std::string section;
    for (const char* p : {"#/$defs/", "#/definitions/"})
      if (s.rfind(p, 0) == 0) section = p;
    if (section.empty())
      error(path, "\"$ref\" \"", s, "\": only \"#/$defs/NAME\" and \"#/definitions/NAME\" are supported");
    std::string name;
    for (size_t i = section.size(); i < s.size(); ++i) {
      if (s[i] == '~' && i + 1 < s.size() && (s[i + 1] == '0' || s[i + 1] == '1')) {
        name += s[i + 1] == '0' ? '~' : '/';
        ++i;
      } else {
        name += s[i];
      }
    }
    std::string key = section.substr(2, section.size() - 3);
    if (!root_.is_object() || !root_.contains(key) || !root_[key].is_object() ||
        !root_[key].contains(name))
      error(path, "\"$ref\" \"", s, "\" names no definition");
    Node alias = make(kAlias, path);
    int32_t idx = add(std::move(alias));
    refs_[s] = idx;
    int32_t target = compile(root_[key][name], "/" + key + "/" + pointer_token(name));
    g_.nodes[size_t(idx)].target = target;
    return idx;
  }

  // The first-byte tables; merges the literal sets of unions; refuses overlaps and cycles.
  void finish() {
    state_.assign(g_.nodes.size(), 0);
    for (size_t i = 0; i < state_.size(); ++i) resolve(int32_t(i));
  }

 private:
  void set_first(int32_t node, uint8_t c, int32_t target, const std::string& path) {
    int32_t& slot = g_.nodes[size_t(node)].first[c];
    if (slot >= 0 && slot != target)
      error(path, "alternatives overlap (two can start with byte ", int(c),
            "); only alternatives told apart by their first byte are supported");
    slot = target;
  }
  void concrete_first(int32_t i) {
    Node& n = g_.nodes[size_t(i)];
    switch (n.kind) {
      case kObject: n.first['{'] = i; break;
      case kArray: n.first['['] = i; break;
      case kString: n.first['"'] = i; break;
      case kNumber:
      case kInteger:
        n.first['-'] = i;
        for (int c = '0'; c <= '9'; ++c) n.first[size_t(c)] = i;
        break;
      case kLiteral:
        for (const auto& e : g_.trie[n.lit_trie].edges) n.first[e.first] = i;
        break;
      default: break;
    }
  }
  std::vector<int32_t> concrete_nodes(int32_t i) {
    resolve(i);
    std::vector<int32_t> out;
    for (int32_t t : g_.nodes[size_t(i)].first)
      if (t >= 0 && std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
    return out;
  }
  void resolve(int32_t i) {
    if (state_.size() < g_.nodes.size()) state_.resize(g_.nodes.size(), 0);
    if (state_[size_t(i)] == 2) return;
    std::string path = g_.nodes[size_t(i)].path;
    if (state_[size_t(i)] == 1) error(path, "\"$ref\"/\"anyOf\" cycle with no value in between");
    state_[size_t(i)] = 1;
    NodeKind kind = g_.nodes[size_t(i)].kind;
    if (kind == kAlias) {
      int32_t t = g_.nodes[size_t(i)].target;
      resolve(t);
      g_.nodes[size_t(i)].first = g_.nodes[size_t(t)].first;
    } else if (kind == kUnion) {
      union_first(i, path);
    } else {
      concrete_first(i);
    }
    state_[size_t(i)] = 2;
  }
  void union_first(int32_t i, const std::string& path) {
    bool one_of = g_.nodes[size_t(i)].one_of;
    std::vector<int32_t> alts = g_.nodes[size_t(i)].alts;
    std::vector<int32_t> general;
    std::vector<std::vector<json>> lits;  // per alternative
    for (int32_t a : alts) {
      lits.emplace_back();
      for (int32_t c : concrete_nodes(a)) {
        const Node& cn = g_.nodes[size_t(c)];
        if (cn.kind == kLiteral) lits.back().insert(lits.back().end(), cn.values.begin(), cn.values.end());
        else if (std::find(general.begin(), general.end(), c) == general.end()) general.push_back(c);
      }
    }
    auto has = [&](NodeKind k) {
      return std::any_of(general.begin(), general.end(),
                         [&](int32_t c) { return g_.nodes[size_t(c)].kind == k; });
    };
    std::vector<json> values;
    if (!one_of) {
      // Plain strings, numbers and integers of several alternatives are one and the same.
      std::vector<int32_t> kept;
      for (int32_t c : general) {
        NodeKind k = g_.nodes[size_t(c)].kind;
        bool plain = k == kString || k == kNumber || k == kInteger;
        if (plain && std::any_of(kept.begin(), kept.end(),
                                 [&](int32_t o) { return g_.nodes[size_t(o)].kind == k; }))
          continue;
        kept.push_back(c);
      }
      general = std::move(kept);
      if (has(kNumber))
        std::erase_if(general, [&](int32_t c) { return g_.nodes[size_t(c)].kind == kInteger; });
      bool strings = has(kString), numbers = has(kNumber), integers = has(kInteger);
      for (const auto& l : lits)
        for (const json& v : l) {
          if ((strings && v.is_string()) || (numbers && v.is_number()) ||
              (integers && v.is_number() && is_integer_value(v)))
            continue;
          values.push_back(v);
        }
    } else {
      std::map<std::string, int> count;
      for (const auto& l : lits) {
        std::set<std::string> mine;
        for (const json& v : l) mine.insert(v.dump());
        for (const std::string& d : mine) ++count[d];
      }
      for (const auto& l : lits)
        for (const json& v : l)
          if (count[v.dump()] == 1) values.push_back(v);
      if (values.empty() && general.empty())
        error(path, "no value matches exactly one alternative of \"oneOf\"");
    }
    for (int32_t c : general)
      for (int b = 0; b < 256; ++b)
        if (g_.nodes[size_t(c)].first[size_t(b)] >= 0) set_first(i, uint8_t(b), c, path);
    if (!values.empty()) {
      int32_t lit = literal(std::move(values), path);
      resolve(lit);
      for (int b = 0; b < 256; ++b)
        if (g_.nodes[size_t(lit)].first[size_t(b)] >= 0) set_first(i, uint8_t(b), lit, path);
    }
  }

  GrammarData& g_;
  const json& root_;
  std::string where_;
  std::map<std::string, int32_t> refs_;
  std::vector<uint8_t> state_;
  int32_t any_ = -1, any_object_ = -1;
};

// ---------------------------------------------------------------------------------------------
// Matcher pieces

enum FrameKind : uint8_t { kFDoc, kFObj, kFArr, kFStr, kFNum, kFLit };
enum : uint8_t { kDocBefore, kDocAfter, kDocEnded };
enum : uint8_t { kObjStart, kObjOpen, kObjKey, kObjColon, kObjValue, kObjAfter, kObjNext };
enum : uint8_t { kArrStart, kArrOpen, kArrAfter, kArrNext };
enum : uint8_t { kStrStart, kStrIn };
// Number phases: start, after '-', after a leading 0, integer digits, after '.', fraction digits,
// after 'e', after the exponent's sign, exponent digits.
enum : uint8_t { kN0, kNMinus, kNZero, kNInt, kNDot, kNFrac, kNE, kNESign, kNExp };

// String states: escapes (with \u surrogate pairs) and UTF-8 sequences.
enum : uint32_t {
  kSNormal, kSEsc, kSHex0, kSHex1Any, kSHex1D, kSHex2, kSHex3, kSHi2, kSHi3, kSNeedBs, kSNeedU,
  kSLo0, kSLo1, kSLo2, kSLo3, kSU1, kSU2, kSU3, kSE0, kSED, kSF0, kSF4
};

inline bool is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
inline bool is_hex(uint8_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
inline bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

// One byte inside a string: 0 refused, 1 consumed, 2 the closing quote.
inline int string_byte(uint32_t& st, uint8_t c) {
  auto to = [&](uint32_t next) {
    st = next;
    return 1;
  };
  auto cont = [&](uint8_t lo, uint8_t hi, uint32_t next) { return c >= lo && c <= hi ? to(next) : 0; };
  switch (st) {
    case kSNormal:
      if (c == '"') return 2;
      if (c == '\\') return to(kSEsc);
      if (c < 0x20) return 0;
      if (c < 0x80) return 1;
      if (c >= 0xC2 && c <= 0xDF) return to(kSU1);
      if (c == 0xE0) return to(kSE0);
      if (c == 0xED) return to(kSED);
      if (c >= 0xE1 && c <= 0xEF) return to(kSU2);
      if (c == 0xF0) return to(kSF0);
      if (c >= 0xF1 && c <= 0xF3) return to(kSU3);
      if (c == 0xF4) return to(kSF4);
      return 0;
    case kSEsc:
      if (c == 'u') return to(kSHex0);
      return std::strchr("\"\\/bfnrt", c) && c ? to(kSNormal) : 0;
    case kSHex0:
      if (!is_hex(c)) return 0;
      return to(c == 'd' || c == 'D' ? kSHex1D : kSHex1Any);
    case kSHex1Any: return is_hex(c) ? to(kSHex2) : 0;
    case kSHex1D:
      if (c >= '0' && c <= '7') return to(kSHex2);
      if (c == '8' || c == '9' || c == 'a' || c == 'b' || c == 'A' || c == 'B') return to(kSHi2);
      return 0;  // a lone low surrogate, or not hex
    case kSHex2: return is_hex(c) ? to(kSHex3) : 0;
    case kSHex3: return is_hex(c) ? to(kSNormal) : 0;
    case kSHi2: return is_hex(c) ? to(kSHi3) : 0;
    case kSHi3: return is_hex(c) ? to(kSNeedBs) : 0;
    case kSNeedBs: return c == '\\' ? to(kSNeedU) : 0;
    case kSNeedU: return c == 'u' ? to(kSLo0) : 0;
    case kSLo0: return c == 'd' || c == 'D' ? to(kSLo1) : 0;
    case kSLo1: return (c >= 'c' && c <= 'f') || (c >= 'C' && c <= 'F') ? to(kSLo2) : 0;
    case kSLo2: return is_hex(c) ? to(kSLo3) : 0;
    case kSLo3: return is_hex(c) ? to(kSNormal) : 0;
    case kSU1: return cont(0x80, 0xBF, kSNormal);
    case kSU2: return cont(0x80, 0xBF, kSU1);
    case kSU3: return cont(0x80, 0xBF, kSU2);
    case kSE0: return cont(0xA0, 0xBF, kSU1);
    case kSED: return cont(0x80, 0x9F, kSU1);
    case kSF0: return cont(0x90, 0xBF, kSU2);
    case kSF4: return cont(0x80, 0x8F, kSU2);
    default: return 0;
  }
}

inline bool take_ws(Frame& f, int max_ws) {
  if (f.ws >= max_ws) return false;
  ++f.ws;
  return true;
}

inline uint64_t all_props(const Node& n) {
  return n.names.size() >= 64 ? ~uint64_t(0) : (uint64_t(1) << n.names.size()) - 1;
}
inline bool can_add_key(const Node& n, const Frame& f) {
  return n.additional >= 0 || (all_props(n) & ~f.seen) != 0;
}

}  // namespace
}  // namespace json_detail

using namespace json_detail;

// ---------------------------------------------------------------------------------------------
// JsonGrammar

JsonGrammar::JsonGrammar(std::unique_ptr<GrammarData> data) : data_(std::move(data)) {}
JsonGrammar::~JsonGrammar() = default;

static void check_ws(int max_ws) {
  if (max_ws < 0 || max_ws > 255) fail("max_whitespace ", max_ws, " is outside [0, 255]");
}

std::shared_ptr<const JsonGrammar> JsonGrammar::any_object(int max_whitespace) {
  check_ws(max_whitespace);
  auto g = std::make_unique<GrammarData>();
  g->max_ws = max_whitespace;
  nlohmann::json none;
  Compiler c(*g, none, "json_object");
  g->root = c.any_object();
  c.finish();
  return std::shared_ptr<const JsonGrammar>(new JsonGrammar(std::move(g)));
}

std::shared_ptr<const JsonGrammar> JsonGrammar::from_schema(const nlohmann::json& schema,
                                                            const std::string& where,
                                                            int max_whitespace) {
  check_ws(max_whitespace);
  auto g = std::make_unique<GrammarData>();
  g->max_ws = max_whitespace;
  Compiler c(*g, schema, where);
  g->root = c.compile(schema, "");
  c.finish();
  return std::shared_ptr<const JsonGrammar>(new JsonGrammar(std::move(g)));
}

// ---------------------------------------------------------------------------------------------
// TokenVocab

TokenVocab::TokenVocab(std::unique_ptr<VocabData> data) : data_(std::move(data)) {}
TokenVocab::~TokenVocab() = default;
int TokenVocab::size() const { return int(data_->bytes.size()); }
const std::string& TokenVocab::bytes(int32_t id) const { return data_->bytes.at(size_t(id)); }
bool TokenVocab::is_eos(int32_t id) const {
  return id >= 0 && size_t(id) < data_->eos.size() && data_->eos[size_t(id)];
}

std::shared_ptr<const TokenVocab> TokenVocab::build(const Tokenizer& tok,
                                                    std::vector<int32_t> eos_ids) {
  std::vector<std::string> bytes(size_t(std::max(tok.vocab_size(), 0)));
  for (size_t id = 0; id < bytes.size(); ++id) {
    if (tok.is_special(int32_t(id))) continue;
    try {
      bytes[id] = tok.token_bytes(int32_t(id));
    } catch (const Error&) {
      // an id no token has: never allowed
    }
  }
  return build(bytes, std::move(eos_ids));
}

namespace {
// Builds the trie node for ids[lo, hi) (sorted by bytes, all sharing their first `depth` bytes).
void build_trie(VocabData& v, const std::vector<int32_t>& ids, size_t lo, size_t hi, size_t depth,
                uint32_t node) {
  size_t i = lo;
  v.nodes[node].tok_begin = uint32_t(v.toks.size());
  for (; i < hi && v.bytes[size_t(ids[i])].size() == depth; ++i) v.toks.push_back(ids[i]);
  v.nodes[node].tok_end = uint32_t(v.toks.size());
  std::vector<std::pair<size_t, size_t>> groups;
  for (size_t j = i; j < hi;) {
    uint8_t c = uint8_t(v.bytes[size_t(ids[j])][depth]);
    size_t k = j;
    while (k < hi && uint8_t(v.bytes[size_t(ids[k])][depth]) == c) ++k;
    groups.emplace_back(j, k);
    j = k;
  }
  uint32_t e0 = uint32_t(v.edge_byte.size());
  v.nodes[node].edge_begin = e0;
  v.nodes[node].edge_end = e0 + uint32_t(groups.size());
  v.edge_byte.resize(v.edge_byte.size() + groups.size());
  v.edge_child.resize(v.edge_child.size() + groups.size());
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    auto [j, k] = groups[gi];
    uint32_t child = uint32_t(v.nodes.size());
    v.nodes.push_back({});
    v.edge_byte[e0 + gi] = uint8_t(v.bytes[size_t(ids[j])][depth]);
    v.edge_child[e0 + gi] = child;
    build_trie(v, ids, j, k, depth + 1, child);
  }
}
}  // namespace

std::shared_ptr<const TokenVocab> TokenVocab::build(const std::vector<std::string>& token_bytes,
                                                    std::vector<int32_t> eos_ids) {
  auto v = std::make_unique<VocabData>();
  v->bytes = token_bytes;
  v->eos.assign(token_bytes.size(), 0);
  for (int32_t e : eos_ids) {
    if (e < 0 || size_t(e) >= token_bytes.size())
      fail("end-of-sequence id ", e, " is outside the vocabulary (size ", token_bytes.size(), ")");
    v->eos[size_t(e)] = 1;
  }
  v->eos_ids = std::move(eos_ids);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < token_bytes.size(); ++i)
    if (!token_bytes[i].empty() && !v->eos[i]) ids.push_back(int32_t(i));
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return token_bytes[size_t(a)] < token_bytes[size_t(b)] ||
           (token_bytes[size_t(a)] == token_bytes[size_t(b)] && a < b);
  });
  v->nodes.push_back({});
  build_trie(*v, ids, 0, ids.size(), 0, 0);
  return std::shared_ptr<const TokenVocab>(new TokenVocab(std::move(v)));
}

// ---------------------------------------------------------------------------------------------
// JsonMatcher

JsonMatcher::JsonMatcher(std::shared_ptr<const JsonGrammar> grammar,
                         std::shared_ptr<const TokenVocab> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {
  if (!grammar_ || !vocab_) fail("JsonMatcher needs a grammar and a vocabulary");
  g_ = &grammar_->data();
  v_ = &vocab_->data();
  state_.top.kind = kFDoc;
  state_.top.phase = kDocBefore;
}

namespace {
inline void push_frame(std::vector<ArenaFrame>& arena, const GrammarData& g, State& s,
                       int32_t node) {
  arena.push_back({s.top, s.below});
  s.below = uint32_t(arena.size() - 1);
  const Node& n = g.nodes[size_t(node)];
  Frame f;
  f.node = uint32_t(node);
  switch (n.kind) {
    case kObject: f.kind = kFObj; break;
    case kArray: f.kind = kFArr; break;
    case kString: f.kind = kFStr; break;
    case kLiteral:
      f.kind = kFLit;
      f.a = n.lit_trie;
      break;
    default: f.kind = kFNum; break;
  }
  s.top = f;
}
inline void pop_frame(const std::vector<ArenaFrame>& arena, State& s) {
  const ArenaFrame& af = arena[s.below];
  s.top = af.frame;
  s.below = af.below;
}
// A number or literal that may end here (the byte after it decides).
inline bool may_end(const GrammarData& g, const Frame& f) {
  if (f.kind == kFNum)
    return f.phase == kNZero || f.phase == kNInt || f.phase == kNFrac || f.phase == kNExp;
  return f.kind == kFLit && g.trie[f.a].term >= 0;
}
}  // namespace

bool JsonMatcher::step(State& s, uint8_t c) const {
  const GrammarData& g = *g_;
  for (;;) {
    Frame& f = s.top;
    const Node& n = g.nodes[f.node];
    auto value = [&](int32_t node) {  // starts a value of `node` with c; false: c cannot start one
      int32_t t = g.nodes[size_t(node)].first[c];
      if (t < 0) return false;
      f.ws = 0;
      push_frame(arena_, g, s, t);
      return true;
    };
    switch (f.kind) {
      case kFDoc:
        if (f.phase == kDocEnded) return false;
        if (is_ws(c)) return take_ws(f, g.max_ws);
        if (f.phase == kDocAfter) return false;
        f.phase = kDocAfter;
        if (!value(g.root)) return false;
        continue;
      case kFObj:
        switch (f.phase) {
          case kObjStart:
            if (c != '{') return false;
            f.phase = kObjOpen;
            return true;
          case kObjOpen:
          case kObjNext:
            if (is_ws(c)) return take_ws(f, g.max_ws);
            if (c == '"' && can_add_key(n, f)) {
              f.phase = kObjKey;
              f.ws = 0;
              f.a = n.key_trie;
              f.b = kSNormal;
              return true;
            }
            if (c == '}' && f.phase == kObjOpen && (f.seen & n.required) == n.required) {
              pop_frame(arena_, s);
              return true;
            }
            return false;
          case kObjKey: {
            uint32_t st = f.b;
            int r = string_byte(st, c);
            if (r == 0) return false;
            if (r == 2) {
              uint32_t key = kOtherKey;
              if (f.a != kNone && g.trie[f.a].term >= 0) {
                key = uint32_t(g.trie[f.a].term);
                if (f.seen >> key & 1) return false;
                f.seen |= uint64_t(1) << key;
              } else if (n.additional < 0) {
                return false;
              }
              f.phase = kObjColon;
              f.b = key;
              return true;
            }
            uint32_t next = f.a == kNone ? kNone : g.child(f.a, c);
            if (n.additional < 0 && (next == kNone || (g.trie[next].below & ~f.seen) == 0))
              return false;
            f.a = next;
            f.b = st;
            return true;
          }
          case kObjColon:
            if (is_ws(c)) return take_ws(f, g.max_ws);
            if (c != ':') return false;
            f.phase = kObjValue;
            f.ws = 0;
            return true;
          case kObjValue:
            if (is_ws(c)) return take_ws(f, g.max_ws);
            f.phase = kObjAfter;
            if (!value(f.b == kOtherKey ? n.additional : n.props[f.b])) return false;
            continue;
          default:  // kObjAfter
            if (is_ws(c)) return take_ws(f, g.max_ws);
            if (c == ',' && can_add_key(n, f)) {
              f.phase = kObjNext;
              f.ws = 0;
              return true;
            }
            if (c == '}' && (f.seen & n.required) == n.required) {
              pop_frame(arena_, s);
              return true;
            }
            return false;
        }
      case kFArr:
        switch (f.phase) {
          case kArrStart:
            if (c != '[') return false;
            f.phase = kArrOpen;
            return true;
          case kArrOpen:
          case kArrNext:
            if (is_ws(c)) return take_ws(f, g.max_ws);
            if (c == ']' && f.phase == kArrOpen && n.min_items == 0) {
              pop_frame(arena_, s);
              return true;
            }
            if (f.a >= n.max_items) return false;
            ++f.a;
            f.phase = kArrAfter;
            if (!value(n.items)) return false;
            continue;
          default:  // kArrAfter
            if (is_ws(c)) return take_ws(f, g.max_ws);
            if (c == ',' && f.a < n.max_items) {
              f.phase = kArrNext;
              f.ws = 0;
              return true;
            }
            if (c == ']' && f.a >= n.min_items) {
              pop_frame(arena_, s);
              return true;
            }
            return false;
        }
      case kFStr: {
        if (f.phase == kStrStart) {
          if (c != '"') return false;
          f.phase = kStrIn;
          f.b = kSNormal;
          return true;
        }
        int r = string_byte(f.b, c);
        if (r == 2) pop_frame(arena_, s);
        return r != 0;
      }
      case kFNum: {
        bool integer = n.kind == kInteger;
        bool digit = is_digit(c);
        auto to = [&](uint8_t phase, uint32_t digits) {
          f.phase = phase;
          f.a = digits;
          return true;
        };
        switch (f.phase) {
          case kN0:
            if (c == '-') return to(kNMinus, 0);
            [[fallthrough]];
          case kNMinus:
            if (c == '0') return to(kNZero, 1);
            if (digit) return to(kNInt, 1);
            return false;
          case kNZero:
          case kNInt:
            if (digit && f.phase == kNInt && f.a < kMaxIntDigits) return to(kNInt, f.a + 1);
            if (c == '.' && !integer) return to(kNDot, 0);
            if ((c == 'e' || c == 'E') && !integer) return to(kNE, 0);
            break;
          case kNDot: return digit ? to(kNFrac, 1) : false;
          case kNFrac:
            if (digit && f.a < kMaxFracDigits) return to(kNFrac, f.a + 1);
            if (c == 'e' || c == 'E') return to(kNE, 0);
            break;
          case kNE:
            if (c == '+' || c == '-') return to(kNESign, 0);
            [[fallthrough]];
          case kNESign: return digit ? to(kNExp, 1) : false;
          default:  // kNExp
            if (digit && f.a < kMaxExpDigits) return to(kNExp, f.a + 1);
            break;
        }
        if (!may_end(g, f)) return false;
        pop_frame(arena_, s);
        continue;
      }
      default: {  // kFLit
        uint32_t next = g.child(f.a, c);
        if (next != kNone) {
          if (g.trie[next].term >= 0 && g.trie[next].edges.empty()) pop_frame(arena_, s);
          else f.a = next;
          return true;
        }
        if (g.trie[f.a].term < 0) return false;
        pop_frame(arena_, s);
        continue;
      }
    }
  }
}

bool JsonMatcher::advance(State& s, std::string_view bytes) const {
  for (char ch : bytes)
    if (!step(s, uint8_t(ch))) return false;
  return true;
}

bool JsonMatcher::complete_state(State s) const {
  while (s.top.kind != kFDoc && may_end(*g_, s.top)) pop_frame(arena_, s);
  return s.top.kind == kFDoc && s.top.phase != kDocBefore;
}

bool JsonMatcher::complete() const { return complete_state(state_); }
bool JsonMatcher::ended() const { return state_.top.kind == kFDoc && state_.top.phase == kDocEnded; }

void JsonMatcher::walk(uint32_t node, const State& s, uint8_t* mask) const {
  const VocabData& v = *v_;
  const VocabData::VNode& vn = v.nodes[node];
  for (uint32_t e = vn.edge_begin; e < vn.edge_end; ++e) {
    State s2 = s;
    size_t mark = arena_.size();
    if (step(s2, v.edge_byte[e])) {
      const VocabData::VNode& ch = v.nodes[v.edge_child[e]];
      for (uint32_t t = ch.tok_begin; t < ch.tok_end; ++t) mask[v.toks[t]] = 1;
      if (ch.edge_begin != ch.edge_end) walk(v.edge_child[e], s2, mask);
    }
    arena_.resize(mark);
  }
}

void JsonMatcher::allowed(uint8_t* mask) const {
  std::memset(mask, 0, v_->bytes.size());
  if (ended()) return;
  walk(0, state_, mask);
  bool done = complete();
  for (int32_t e : v_->eos_ids) mask[e] = done;
}

bool JsonMatcher::allows(int32_t token) const {
  if (token < 0 || size_t(token) >= v_->bytes.size() || ended()) return false;
  if (v_->eos[size_t(token)]) return complete();
  const std::string& b = v_->bytes[size_t(token)];
  if (b.empty()) return false;
  State s = state_;
  size_t mark = arena_.size();
  bool ok = advance(s, b);
  arena_.resize(mark);
  return ok;
}

bool JsonMatcher::push(int32_t token) {
  if (token < 0 || size_t(token) >= v_->bytes.size() || ended()) return false;
  if (v_->eos[size_t(token)]) {
    if (!complete()) return false;
    history_.push_back({state_, uint32_t(arena_.size())});
    while (state_.top.kind != kFDoc) pop_frame(arena_, state_);
    state_.top.phase = kDocEnded;
    return true;
  }
  const std::string& b = v_->bytes[size_t(token)];
  return !b.empty() && push_bytes(b);
}

bool JsonMatcher::push_bytes(std::string_view bytes) {
  if (ended()) return false;
  Saved saved{state_, uint32_t(arena_.size())};
  State s = state_;
  if (!advance(s, bytes)) {
    arena_.resize(saved.arena_size);
    return false;
  }
  history_.push_back(saved);
  state_ = s;
  return true;
}

void JsonMatcher::pop() {
  if (history_.empty()) fail("JsonMatcher::pop: nothing to undo");
  state_ = history_.back().state;
  arena_.resize(history_.back().arena_size);
  history_.pop_back();
}

}  // namespace dspark
