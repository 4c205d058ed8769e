// Small text helpers shared by the corpus builder: UTF-8 repair, JSON escaping, hashing for
// deduplication and splits. (Its random draws come from core/rng.h, seeded with Rng::from_word.)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dspark::data {

// Replaces invalid UTF-8 sequences with U+FFFD and drops NUL and other C0 controls except
// \t and \n; \r\n and lone \r become \n.
std::string sanitize_utf8(std::string_view s);
bool is_valid_utf8(std::string_view s);

// A JSON string literal (with quotes) for valid UTF-8 text; U+0085, U+2028 and U+2029 are
// escaped too, so no JSON Lines reader sees a line break inside a string.
std::string json_quote(std::string_view s);

// 64-bit FNV-1a folded through a finalizer (good avalanche, stable across machines).
uint64_t hash64(std::string_view s, uint64_t seed = 0);
uint64_t mix64(uint64_t x);
// Hash of the text with whitespace runs collapsed, ends trimmed and ASCII letters lower-cased:
// two documents that differ only there are duplicates.
uint64_t normalized_hash(std::string_view s);

std::string_view trim(std::string_view s);
std::vector<std::string_view> split_lines(std::string_view s);  // on \n, without the \n
std::string collapse_spaces(std::string_view s);                  // whitespace runs -> one space, trimmed
bool starts_with(std::string_view s, std::string_view p);
bool ends_with(std::string_view s, std::string_view p);
std::string replace_all(std::string s, std::string_view from, std::string_view to);
std::string lower_ascii(std::string_view s);

}  // namespace dspark::data
