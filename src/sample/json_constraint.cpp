// JSON constraint engine: the token trie and the byte-level pushdown matcher (the schema compiler
// is json_schema.cpp).
//
// The grammar is a graph of nodes (object, array, string, number, integer, literal set, union,
// $ref alias). Every node has a first-byte table: for each byte, the concrete node (never a union
// or alias) whose value starts with that byte. The matcher keeps a stack of frames (document,
// object, array, string, number, literal); a byte goes to the top frame, which consumes it,
// finishes with it (a closing quote or bracket: the frame pops), or, for a number or a literal that
// may end here, pops and hands the byte to the frame below. Every state the matcher can reach has a
// completion (unsatisfiable schemas are refused when compiled), so a token is allowed iff its bytes
// step.
#include "sample/json_constraint.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "sample/json_grammar.h"
#include "tokenizer/tokenizer.h"

namespace dspark {
namespace json_detail {

struct VocabData {
  std::vector<std::string> bytes;
  std::vector<uint8_t> eos;  // per id
  std::vector<int32_t> eos_ids;
  struct VNode {
    uint32_t edge_begin, edge_end, tok_begin, tok_end;
  };
  std::vector<VNode> nodes;  // preorder; node 0 is the root of all tokens
  // Tokens that are whole string content (printable ASCII but '"' and '\\', complete UTF-8
  // characters): allowed wherever a string's plain text goes on. The other tokens have their own
  // trie, from rest_root, so a mask inside a string walks only them.
  std::vector<uint8_t> plain;
  uint32_t rest_root = 0;
  std::vector<uint8_t> edge_byte;
  std::vector<uint32_t> edge_child;
  std::vector<int32_t> toks;
};

namespace {

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
  kSNormal,
  kSEsc,
  kSHex0,
  kSHex1Any,
  kSHex1D,
  kSHex2,
  kSHex3,
  kSHi2,
  kSHi3,
  kSNeedBs,
  kSNeedU,
  kSLo0,
  kSLo1,
  kSLo2,
  kSLo3,
  kSU1,
  kSU2,
  kSU3,
  kSE0,
  kSED,
  kSF0,
  kSF4
};

inline bool is_ws(uint8_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
inline bool is_hex(uint8_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
inline bool is_digit(uint8_t c) {
  return c >= '0' && c <= '9';
}

// One byte inside a string: 0 refused, 1 consumed, 2 the closing quote.
inline int string_byte(uint32_t& st, uint8_t c) {
  auto to = [&](uint32_t next) {
    st = next;
    return 1;
  };
  auto cont = [&](uint8_t lo, uint8_t hi, uint32_t next) {
    return c >= lo && c <= hi ? to(next) : 0;
  };
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
    case kSHex1Any:
      return is_hex(c) ? to(kSHex2) : 0;
    case kSHex1D:
      if (c >= '0' && c <= '7') return to(kSHex2);
      if (c == '8' || c == '9' || c == 'a' || c == 'b' || c == 'A' || c == 'B') return to(kSHi2);
      return 0;  // a lone low surrogate, or not hex
    case kSHex2:
      return is_hex(c) ? to(kSHex3) : 0;
    case kSHex3:
      return is_hex(c) ? to(kSNormal) : 0;
    case kSHi2:
      return is_hex(c) ? to(kSHi3) : 0;
    case kSHi3:
      return is_hex(c) ? to(kSNeedBs) : 0;
    case kSNeedBs:
      return c == '\\' ? to(kSNeedU) : 0;
    case kSNeedU:
      return c == 'u' ? to(kSLo0) : 0;
    case kSLo0:
      return c == 'd' || c == 'D' ? to(kSLo1) : 0;
    case kSLo1:
      return (c >= 'c' && c <= 'f') || (c >= 'C' && c <= 'F') ? to(kSLo2) : 0;
    case kSLo2:
      return is_hex(c) ? to(kSLo3) : 0;
    case kSLo3:
      return is_hex(c) ? to(kSNormal) : 0;
    case kSU1:
      return cont(0x80, 0xBF, kSNormal);
    case kSU2:
      return cont(0x80, 0xBF, kSU1);
    case kSU3:
      return cont(0x80, 0xBF, kSU2);
    case kSE0:
      return cont(0xA0, 0xBF, kSU1);
    case kSED:
      return cont(0x80, 0x9F, kSU1);
    case kSF0:
      return cont(0x90, 0xBF, kSU2);
    case kSF4:
      return cont(0x80, 0x8F, kSU2);
    default:
      return 0;
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
// TokenVocab

TokenVocab::TokenVocab(std::unique_ptr<VocabData> data) : data_(std::move(data)) {}
TokenVocab::~TokenVocab() = default;
int TokenVocab::size() const {
  return int(data_->bytes.size());
}
const std::string& TokenVocab::bytes(int32_t id) const {
  return data_->bytes.at(size_t(id));
}
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
  v->plain.assign(token_bytes.size(), 0);
  std::vector<int32_t> ids, rest;
  for (size_t i = 0; i < token_bytes.size(); ++i) {
    if (token_bytes[i].empty() || v->eos[i]) continue;
    ids.push_back(int32_t(i));
    uint32_t st = kSNormal;
    bool plain = true;
    for (char c : token_bytes[i]) plain = plain && string_byte(st, uint8_t(c)) == 1;
    v->plain[i] = plain && st == kSNormal;
    if (!v->plain[i]) rest.push_back(int32_t(i));
  }
  auto by_bytes = [&](int32_t a, int32_t b) {
    return token_bytes[size_t(a)] < token_bytes[size_t(b)] ||
           (token_bytes[size_t(a)] == token_bytes[size_t(b)] && a < b);
  };
  std::sort(ids.begin(), ids.end(), by_bytes);
  std::sort(rest.begin(), rest.end(), by_bytes);
  v->nodes.push_back({});
  build_trie(*v, ids, 0, ids.size(), 0, 0);
  v->rest_root = uint32_t(v->nodes.size());
  v->nodes.push_back({});
  build_trie(*v, rest, 0, rest.size(), 0, v->rest_root);
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
    case kObject:
      f.kind = kFObj;
      break;
    case kArray:
      f.kind = kFArr;
      break;
    case kString:
      f.kind = kFStr;
      break;
    case kLiteral:
      f.kind = kFLit;
      f.a = n.lit_trie;
      break;
    default:
      f.kind = kFNum;
      break;
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
// One byte of an object's key (the frame in kObjKey): the key's characters walk the trie of the
// property names; the closing quote names the key (kOtherKey for one of the additional
// properties). False when refused.
bool key_byte(const GrammarData& g, const Node& n, Frame& f, uint8_t c) {
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
  if (n.additional < 0 && (next == kNone || (g.trie[next].below & ~f.seen) == 0)) return false;
  f.a = next;
  f.b = st;
  return true;
}
// One byte of a number frame: 1 consumed, 0 refused, -1 the number ended before c.
int number_byte(const GrammarData& g, const Node& n, Frame& f, uint8_t c) {
  const bool integer = n.kind == kInteger;
  const bool digit = is_digit(c);
  auto to = [&](uint8_t phase, uint32_t digits) {
    f.phase = phase;
    f.a = digits;
    return 1;
  };
  switch (f.phase) {
    case kN0:
      if (c == '-') return to(kNMinus, 0);
      [[fallthrough]];
    case kNMinus:
      if (c == '0') return to(kNZero, 1);
      if (digit) return to(kNInt, 1);
      return 0;
    case kNZero:
    case kNInt:
      if (digit && f.phase == kNInt && f.a < kMaxIntDigits) return to(kNInt, f.a + 1);
      if (c == '.' && !integer) return to(kNDot, 0);
      if ((c == 'e' || c == 'E') && !integer) return to(kNE, 0);
      break;
    case kNDot:
      return digit ? to(kNFrac, 1) : 0;
    case kNFrac:
      if (digit && f.a < kMaxFracDigits) return to(kNFrac, f.a + 1);
      if (c == 'e' || c == 'E') return to(kNE, 0);
      break;
    case kNE:
      if (c == '+' || c == '-') return to(kNESign, 0);
      [[fallthrough]];
    case kNESign:
      return digit ? to(kNExp, 1) : 0;
    default:  // kNExp
      if (digit && f.a < kMaxExpDigits) return to(kNExp, f.a + 1);
      break;
  }
  return may_end(g, f) ? -1 : 0;
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
              // no property names: any key, read as plain text from the start
              f.a = g.trie[n.key_trie].edges.empty() && g.trie[n.key_trie].term < 0 ? kNone
                                                                                    : n.key_trie;
              f.b = kSNormal;
              return true;
            }
            if (c == '}' && f.phase == kObjOpen && (f.seen & n.required) == n.required) {
              pop_frame(arena_, s);
              return true;
            }
            return false;
          case kObjKey:
            return key_byte(g, n, f, c);
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
        const int r = number_byte(g, n, f, c);
        if (r >= 0) return r == 1;
        pop_frame(arena_, s);  // the number ended before c, which belongs to what follows
        continue;
      }
      default: {  // kFLit
        uint32_t next = g.child(f.a, c);
        if (next != kNone) {
          if (g.trie[next].term >= 0 && g.trie[next].edges.empty())
            pop_frame(arena_, s);
          else
            f.a = next;
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

bool JsonMatcher::complete() const {
  return complete_state(state_);
}
bool JsonMatcher::ended() const {
  return state_.top.kind == kFDoc && state_.top.phase == kDocEnded;
}

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
  const Frame& f = state_.top;
  // Inside a string's text, every plain token is allowed; so is it inside a key when any key may
  // follow (whether the key stays a property's name only matters at its closing quote).
  bool in_text = f.b == kSNormal && ((f.kind == kFStr && f.phase == kStrIn) ||
                                     (f.kind == kFObj && f.phase == kObjKey &&
                                      (f.a == kNone || g_->nodes[f.node].additional >= 0)));
  if (in_text) {
    std::memcpy(mask, v_->plain.data(), v_->bytes.size());
    walk(v_->rest_root, state_, mask);
  } else {
    std::memset(mask, 0, v_->bytes.size());
    if (ended()) return;
    walk(0, state_, mask);
  }
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
