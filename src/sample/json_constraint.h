// JSON constraint engine for `response_format` (structured output): which tokens keep the output a
// prefix of an allowed JSON text. Standalone: a compiled grammar (JsonGrammar), the vocabulary as
// bytes (TokenVocab) and one request's position (JsonMatcher). The caller turns the mask into a
// per-request logit mask; drafting and verification apply the same mask, so speculative decoding
// stays lossless. Files: json_schema.cpp (the schema compiler), json_constraint.cpp (vocab trie and
// matcher), json_grammar.h (internals both share).
//
// The allowed texts
// - json_object (JsonGrammar::any_object): one JSON object, any keys, any values.
// - json_schema (JsonGrammar::from_schema), this subset, nested arbitrarily:
//   * type: "object", "array", "string", "number", "integer", "boolean", "null", or a list of
//     them (["string","null"]). No type: {} is any value; properties, required and
//     additionalProperties imply "object"; items, minItems and maxItems imply "array".
//   * object: properties, required, additionalProperties (false, true or a schema).
//     additionalProperties absent means false when the schema lists properties (OpenAI strict
//     mode) and true (any values) when it does not. A required name outside properties is an
//     additional property that must appear (an error where additional properties are not allowed).
//   * array: items (a schema, or true), minItems, maxItems.
//   * enum / const: any JSON values, written exactly as nlohmann::json::dump() writes them
//     (compact, keys sorted, non-ASCII as UTF-8); with a type, values of other types are dropped.
//   * anyOf / oneOf: the alternatives must be told apart by their first byte ('{', '[', '"', a
//     digit or '-', a literal's first byte). Under anyOf (and type lists) "number" absorbs
//     "integer", "string"/"number"/"integer" absorb enum values of their type, and literal sets
//     merge; oneOf drops literals that two alternatives share, and its object and array
//     alternatives need a "type" (without one, JSON Schema matches other types too). Any other
//     overlap (two object schemas, say) throws.
//   * $ref to "#/$defs/NAME" or "#/definitions/NAME" of the root schema, recursion included.
//   * Subschemas nest at most 128 levels ($ref steps counted), objects list at most 64 keys.
//   * Ignored annotations: title, description, default, examples, $schema, $id, $comment, $defs,
//     definitions. Any other keyword (pattern, format, minLength, minimum, allOf, not,
//     prefixItems, ...) throws Error naming it and the JSON-pointer path of its subschema.
// Key order: any order; each key at most once; every required key before '}'. Property names
//   match only when written as dump() writes them (no \u escapes of plain characters); where
//   additional properties are allowed, other spellings are other keys.
// Strings: any valid UTF-8, checked byte by byte (overlongs, surrogates and code points above
//   U+10FFFF are refused), no raw control characters, the JSON escapes; \u escapes of surrogates
//   must pair. Tokens may split characters and escapes anywhere.
// Numbers: the JSON number grammar; "integer" has no fraction or exponent. Lengths are bounded so
//   a model cannot run on forever and doubles stay finite: at most 19 integer digits, 19 fraction
//   digits and 2 exponent digits. A number at the top level is complete as soon as it could end.
// Whitespace rule: JSON whitespace (space, \t, \n, \r) wherever JSON allows it (before and after
//   the document, around ':' and ',', after '{' '[' and before '}' ']'), at most max_whitespace
//   (default 16) consecutive bytes at each place. After the document only that trailing
//   whitespace and then an end-of-sequence token are allowed. Nesting depth is not bounded.
// Exactness: every state the matcher can reach has a completion (unsatisfiable schemas are
//   refused when compiled), so a token is allowed iff its bytes step from the current state.
// Cost: a mask walks the byte trie of the vocabulary from the current state, pruning subtrees;
//   inside string text it copies a precomputed mask of plain tokens and walks only the others.
//   Per allowed() call (tests/sample/test_json_constraint.cpp, AllowedTiming): demo vocab (8192)
//   about 2-5 us anywhere; Qwen3's (151,669) about 110-130 us inside strings and keys, 5-30 us
//   elsewhere.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace dspark {

class Tokenizer;

namespace json_detail {
struct GrammarData;
struct VocabData;
// One level of the matcher's pushdown stack (an open object, array, string, number, literal).
struct Frame {
  uint32_t node = 0;  // grammar node
  uint8_t kind = 0;
  uint8_t phase = 0;
  uint8_t ws = 0;     // consecutive whitespace bytes at the current place
  uint32_t a = 0;     // trie position, digit count or item count (by kind)
  uint32_t b = 0;     // string escape/UTF-8 state, or the key being read
  uint64_t seen = 0;  // object: the properties written so far
};
// The matcher's position: the top frame by value, the frames below it in an arena (by index).
struct State {
  Frame top;
  uint32_t below = UINT32_MAX;
};
struct ArenaFrame {
  Frame frame;
  uint32_t below;
};
}  // namespace json_detail

// A compiled constraint: what text is allowed. Immutable, shared between requests.
class JsonGrammar {
 public:
  static constexpr int kDefaultMaxWhitespace = 16;

  // response_format {"type":"json_object"}: one JSON object, any keys and values.
  static std::shared_ptr<const JsonGrammar> any_object(int max_whitespace = kDefaultMaxWhitespace);
  // response_format json_schema: the subset above. Errors (Error) start with `where` and the
  // JSON-pointer path of the subschema, e.g.
  // `response_format.json_schema.schema/properties/age: unsupported keyword "pattern"`.
  static std::shared_ptr<const JsonGrammar> from_schema(
      const nlohmann::json& schema, const std::string& where = "response_format.json_schema.schema",
      int max_whitespace = kDefaultMaxWhitespace);

  ~JsonGrammar();
  const json_detail::GrammarData& data() const { return *data_; }

 private:
  explicit JsonGrammar(std::unique_ptr<json_detail::GrammarData> data);
  std::unique_ptr<json_detail::GrammarData> data_;
};

// The vocabulary as bytes, built once per tokenizer, with a byte trie of all tokens so a mask walk
// prunes whole subtrees. Tokens with empty bytes or marked special are never allowed; the
// end-of-sequence ids are allowed exactly when the text is complete.
class TokenVocab {
 public:
  static std::shared_ptr<const TokenVocab> build(const Tokenizer& tok,
                                                 std::vector<int32_t> eos_ids);
  // token_bytes[id]: the raw bytes of token id; empty: never allowed (special tokens, gaps).
  static std::shared_ptr<const TokenVocab> build(const std::vector<std::string>& token_bytes,
                                                 std::vector<int32_t> eos_ids);

  ~TokenVocab();
  int size() const;  // the mask length: largest id + 1
  const std::string& bytes(int32_t id) const;
  bool is_eos(int32_t id) const;
  const json_detail::VocabData& data() const { return *data_; }

 private:
  explicit TokenVocab(std::unique_ptr<json_detail::VocabData> data);
  std::unique_ptr<json_detail::VocabData> data_;
};

// One request's position in the grammar. Not thread-safe (allowed() and allows() use scratch space
// of the matcher); one matcher per request, grammar and vocab shared.
class JsonMatcher {
 public:
  JsonMatcher(std::shared_ptr<const JsonGrammar> grammar, std::shared_ptr<const TokenVocab> vocab);

  // Writes mask[0 .. vocab->size()): 1 where pushing the token keeps the output a prefix of an
  // allowed text (one that some continuation completes), else 0; end-of-sequence ids: 1 iff
  // complete(). All zero after an end-of-sequence token was pushed. No allocation once warm.
  // Ids at or beyond vocab->size() (a model's padding rows) are the caller's to mask off.
  void allowed(uint8_t* mask) const;
  bool allows(int32_t token) const;  // the same answer for one token
  // Advances by a token; false (state unchanged) when it is not allowed.
  bool push(int32_t token);
  // Advances by raw bytes, as one step that pop() undoes; false (state unchanged) if not allowed.
  bool push_bytes(std::string_view bytes);
  void pop();  // undoes the last successful push (throws Error when there is none)
  size_t depth() const { return history_.size(); }  // pushes outstanding
  bool complete() const;  // the text so far is a whole allowed document: EOS allowed
  bool ended() const;     // an end-of-sequence token was pushed

 private:
  bool step(json_detail::State& s, uint8_t byte) const;
  bool advance(json_detail::State& s, std::string_view bytes) const;
  bool complete_state(json_detail::State s) const;
  void walk(uint32_t node, const json_detail::State& s, uint8_t* mask) const;

  std::shared_ptr<const JsonGrammar> grammar_;
  std::shared_ptr<const TokenVocab> vocab_;
  const json_detail::GrammarData* g_;
  const json_detail::VocabData* v_;
  json_detail::State state_;
  struct Saved {
    json_detail::State state;
    uint32_t arena_size;
  };
  std::vector<Saved> history_;
  // Frames below the top: the committed ones first; allowed() appends scratch frames and cuts them
  // off again.
  mutable std::vector<json_detail::ArenaFrame> arena_;
};

}  // namespace dspark
