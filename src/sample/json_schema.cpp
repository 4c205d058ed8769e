// JSON constraint engine, the schema compiler: a json_schema (the subset json_constraint.h lists)
// or json_object into the grammar graph of json_grammar.h, with the first-byte tables the matcher
// dispatches on. Unsatisfiable schemas are refused here, so every state the matcher reaches has a
// completion.
#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "sample/json_constraint.h"
#include "sample/json_grammar.h"

namespace dspark {
namespace json_detail {
namespace {

// ---------------------------------------------------------------------------------------------
// Schema compiler

const std::set<std::string> kAnnotations = {"title",    "description", "default",
                                            "examples", "$schema",     "$id",
                                            "$comment", "$defs",       "definitions"};
const std::set<std::string> kKeywords = {"type",  "properties", "required", "additionalProperties",
                                         "items", "minItems",   "maxItems", "enum",
                                         "const", "anyOf",      "oneOf",    "$ref"};

std::string pointer_token(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
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

  // Schemas come from requests: nesting is bounded so compiling (recursive) cannot overflow the
  // stack.
  int32_t compile(const json& s, const std::string& path) {
    if (depth_ >= kMaxSchemaDepth)
      error(path, "the schema is nested deeper than ", kMaxSchemaDepth, " levels");
    ++depth_;
    int32_t node = compile_here(s, path);
    --depth_;
    return node;
  }

  int32_t compile_here(const json& s, const std::string& path) {
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
      if (t.is_string())
        types.push_back(t.get<std::string>());
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
      if (!obj && !arr) return any();
      int32_t node = typed(obj ? "object" : "array", s, path);
      g_.nodes[size_t(node)].inferred = true;
      return node;
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
      if (ap.is_boolean())
        n.additional = ap.get<bool>() ? any() : -1;
      else if (ap.is_object())
        n.additional = compile(ap, path + "/additionalProperties");
      else
        error(path, "\"additionalProperties\" must be a boolean or a schema");
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
          error(path, "required property \"", name,
                "\" is not in \"properties\" and "
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
      error(path, "\"$ref\" \"", s,
            "\": only \"#/$defs/NAME\" and \"#/definitions/NAME\" are supported");
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
      error(path, "alternatives overlap (two can start with '", char(c),
            "'); only alternatives told apart by their first byte are supported");
    slot = target;
  }
  void concrete_first(int32_t i) {
    Node& n = g_.nodes[size_t(i)];
    switch (n.kind) {
      case kObject:
        n.first['{'] = i;
        break;
      case kArray:
        n.first['['] = i;
        break;
      case kString:
        n.first['"'] = i;
        break;
      case kNumber:
      case kInteger:
        n.first['-'] = i;
        for (int c = '0'; c <= '9'; ++c) n.first[size_t(c)] = i;
        break;
      case kLiteral:
        for (const auto& e : g_.trie[n.lit_trie].edges) n.first[e.first] = i;
        break;
      default:
        break;
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
        // JSON Schema lets {"properties": ...} without a type match any non-object too, so such an
        // alternative overlaps every other one: oneOf cannot hold.
        if (one_of && cn.inferred)
          error(cn.path,
                "a \"oneOf\" alternative needs a \"type\" (without one it also "
                "matches values of other types)");
        if (cn.kind == kLiteral)
          lits.back().insert(lits.back().end(), cn.values.begin(), cn.values.end());
        else if (std::find(general.begin(), general.end(), c) == general.end())
          general.push_back(c);
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
  int depth_ = 0;
};

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

}  // namespace dspark
