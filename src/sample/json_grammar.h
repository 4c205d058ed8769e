// Internals of the JSON constraint engine shared by the schema compiler (json_schema.cpp) and the
// matcher (json_constraint.cpp): the compiled grammar's nodes and tries. Not a public header.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace dspark {
namespace json_detail {

using nlohmann::json;

constexpr uint32_t kNone = UINT32_MAX;
constexpr uint32_t kOtherKey = UINT32_MAX;  // Frame::b after a key that is no property
constexpr int kMaxProps = 64;
constexpr int kMaxSchemaDepth = 128;  // subschemas nested in subschemas ($ref steps included)
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
  bool inferred = false;  // an object or array whose schema has no "type"
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

}  // namespace json_detail
}  // namespace dspark
