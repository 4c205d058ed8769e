// UTF-8 helpers for the tokenizer: validation, WHATWG-style decoding with U+FFFD,
// Unicode normalization (utf8proc) and JavaScript's notion of whitespace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dspark::tokenizer_detail {

struct CodepointRange {
  uint32_t lo, hi;  // inclusive
};
struct NonStarter {
  uint32_t cp;
  uint8_t ccc;  // canonical combining class
};
struct Decomposition {
  uint32_t cp, offset;  // offset into the code point data
  uint8_t length;
  uint8_t composite;  // a primary composite: NFC keeps it
};
struct Composition {
  uint32_t first, second, composite;
};

// Appends the UTF-8 encoding of a Unicode scalar value.
void append_utf8(std::string& out, uint32_t cp);

// Decodes one code point at s[i] of a string known to be valid UTF-8; advances i.
uint32_t next_codepoint(std::string_view s, size_t& i);

// True when s is well-formed UTF-8 (no surrogates, no overlongs, <= U+10FFFF).
bool is_valid_utf8(std::string_view s);

// GPT-2's bytes_to_unicode, the alphabet byte-level BPE spells tokens in: the printable bytes
// '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves, the others for U+0100 upwards in
// byte order.
bool bytelevel_printable(uint32_t byte);
std::string bytes_to_bytelevel(std::string_view bytes);
// Raw bytes of a byte-level token; nullopt if a character is outside the alphabet (such a token
// can never come out of byte-level BPE).
std::optional<std::string> bytelevel_to_bytes(std::string_view token);

// Decodes bytes the way the WHATWG "utf-8" TextDecoder does (non-fatal): every maximal
// subpart of an ill-formed sequence becomes one U+FFFD. Stops before a trailing sequence
// that is incomplete but could still become valid, and returns the number of bytes
// consumed; the caller decides whether more bytes may follow (streaming) or not.
size_t utf8_decode_prefix(std::string_view in, std::string& out);

// Whole-input decode: like utf8_decode_prefix, and an incomplete tail becomes one U+FFFD.
std::string utf8_sanitize(std::string_view in);

// JavaScript's \s / String.prototype.trim whitespace (WhiteSpace + LineTerminator).
bool is_js_space(uint32_t cp);
// A letter, a number (utf8proc categories) or '_': what counts as a word for single_word.
bool is_word_char(uint32_t cp);

// Trims JavaScript whitespace from the end / start of valid UTF-8.
std::string_view js_trim_end(std::string_view s);
std::string_view js_trim_start(std::string_view s);

enum class NormForm { NFC, NFD, NFKC, NFKD };
// Unicode normalization of valid UTF-8 (embedded NULs allowed). ASCII passes through.
// utf8proc does the work. For NFC and NFD, text holding a code point on which utf8proc's
// Unicode data differs from the JavaScript reference's (characters assigned after utf8proc's
// Unicode version) is normalized with the tables in js_unicode_composition.inc and
// js_unicode_decomposition.inc instead, so the result equals String.prototype.normalize in the
// Node.js the tables were generated with.
std::string normalize(std::string_view s, NormForm form);
// Exposed for tests: the table-based normalization used for such text.
std::string normalize_with_js_tables(std::string_view s, bool compose);
// Exposed for tests: whether utf8proc and the JavaScript tables disagree on this code point.
bool normalization_differs_from_js(uint32_t cp);

}  // namespace dspark::tokenizer_detail
