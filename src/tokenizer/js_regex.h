// JsRegex: a PCRE2 regex that matches what the same pattern matches as a JavaScript
// RegExp with the "gu" flags (the reference implementation, transformers.js, is JS).
//
// Differences handled by rewriting the pattern before compiling it with
// PCRE2_UTF | PCRE2_UCP:
//  - \s / \S: JavaScript's set (includes U+FEFF; excludes U+0085 and U+180E, which PCRE2's
//    Unicode \s includes), spelled out as an explicit class.
//  - \p{L} / \p{N} (and \P{..}): PCRE2's Unicode tables can be older than Node's; the code
//    points JavaScript adds are appended to the class (tables in js_unicode_ranges.inc).
//  - \d, \w, \b: ASCII-only in JavaScript even with the u flag.
//  - "." excludes \n, \r, U+2028, U+2029; "$" only matches at the very end.
//  - "(?i:'s|'t|'re|'ve|'m|'ll|'d)" becomes the explicit-case form transformers.js uses
//    (PCRE2's caseless matching would also accept e.g. U+017F LATIN SMALL LETTER LONG S).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dspark::tokenizer_detail {

class JsRegex {
 public:
  // Throws Error (without file context; callers add it) when the pattern does not compile.
  explicit JsRegex(const std::string& js_pattern);
  ~JsRegex();
  JsRegex(const JsRegex&) = delete;
  JsRegex& operator=(const JsRegex&) = delete;

  // All non-overlapping matches [begin, end) in valid UTF-8 text, as String.prototype.matchAll
  // finds them (after an empty match the search resumes one code point later).
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

  const std::string& pcre_pattern() const { return pcre_pattern_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string pcre_pattern_;
};

// Exposed for tests: the PCRE2 pattern a JavaScript pattern is rewritten to.
std::string rewrite_js_pattern(const std::string& js_pattern);

}  // namespace dspark::tokenizer_detail
