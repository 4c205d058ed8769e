#include "tokenizer/js_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdio>
#include <vector>

#include "core/error.h"
#include "tokenizer/unicode_util.h"
// After unicode_util.h, which defines CodepointRange.
#include "tokenizer/js_unicode_ranges.inc"

namespace dspark::tokenizer_detail {

namespace {

constexpr uint32_t kMaxCp = 0x110000;

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof buf) < 0) return "PCRE2 error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

void append_hex_cp(std::string& out, uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\x{%X}", cp);
  out += buf;
}

std::string ranges_to_class_body(const std::vector<CodepointRange>& rs) {
  std::string out;
  for (const auto& r : rs) {
    append_hex_cp(out, r.lo);
    if (r.hi != r.lo) {
      out += '-';
      append_hex_cp(out, r.hi);
    }
  }
  return out;
}

template <size_t N>
std::vector<bool> table_bits(const CodepointRange (&table)[N]) {
  std::vector<bool> bits(kMaxCp, false);
  for (const auto& r : table)
    for (uint32_t c = r.lo; c <= r.hi; ++c) bits[c] = true;
  return bits;
}

std::vector<CodepointRange> bits_to_ranges(const std::vector<bool>& bits) {
  std::vector<CodepointRange> out;
  uint32_t c = 0;
  while (c < kMaxCp) {
    if (!bits[c]) {
      ++c;
      continue;
    }
    uint32_t lo = c;
    while (c < kMaxCp && bits[c]) ++c;
    out.push_back({lo, c - 1});
  }
  return out;
}

// The code points that PCRE2's own tables put in `property_pattern` (e.g. "\p{L}"), found by
// matching "<pattern>+" once over a string holding every Unicode scalar value in order.
std::vector<bool> pcre2_property_bits(const char* property_pattern) {
  static const std::string all_scalars = [] {
    std::string s;
    s.reserve(4 * kMaxCp);
    for (uint32_t c = 0; c < kMaxCp; ++c)
      if (c < 0xD800 || c > 0xDFFF) append_utf8(s, c);
    return s;
  }();
  std::string pat = std::string(property_pattern) + "+";
  int err = 0;
  PCRE2_SIZE erroff = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.c_str()), pat.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &erroff, nullptr);
  if (!code) fail("internal: cannot compile ", pat, ": ", pcre2_message(err));
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  std::vector<bool> bits(kMaxCp, false);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(all_scalars.data());
  size_t pos = 0;
  while (pcre2_match(code, subject, all_scalars.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr) > 0) {
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    std::string_view m(all_scalars.data() + ov[0], ov[1] - ov[0]);
    for (size_t i = 0; i < m.size();) bits[next_codepoint(m, i)] = true;
    pos = ov[1];
  }
  pcre2_match_data_free(md);
  pcre2_code_free(code);
  return bits;
}

// Class body (usable inside [...]) that matches exactly JavaScript's set for a property.
template <size_t N>
std::string js_property_class_body(const char* pcre_property, const CodepointRange (&table)[N]) {
  const std::vector<bool> js = table_bits(table);
  const std::vector<bool> pc = pcre2_property_bits(pcre_property);
  std::vector<bool> added(kMaxCp, false);
  bool removals = false;
  for (uint32_t c = 0; c < kMaxCp; ++c) {
    if (js[c] && !pc[c]) added[c] = true;
    if (pc[c] && !js[c]) removals = true;
  }
  // PCRE2's property lookup is a fast table walk; only the few newer code points are listed.
  // Should PCRE2 ever have a code point that JavaScript lacks, spell the whole set out.
  if (removals) return ranges_to_class_body(bits_to_ranges(js));
  return std::string(pcre_property) + ranges_to_class_body(bits_to_ranges(added));
}

struct ClassBodies {
  std::string letter, number, space;
};

const ClassBodies& class_bodies() {
  static const ClassBodies bodies = [] {
    ClassBodies b;
    b.letter = js_property_class_body("\\p{L}", kJsLetter);
    b.number = js_property_class_body("\\p{N}", kJsNumber);
    std::vector<CodepointRange> sp(std::begin(kJsSpace), std::end(kJsSpace));
    b.space = ranges_to_class_body(sp);
    return b;
  }();
  return bodies;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size()))
    s.replace(pos, from.size(), to);
}

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

size_t utf8_len(unsigned char b) { return b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1; }

}  // namespace

std::string rewrite_js_pattern(const std::string& js_pattern) {
  std::string p = js_pattern;
  // What transformers.js does before `new RegExp(p, "gu")` (createPattern).
  for (char c : std::string("#&~")) replace_all(p, std::string("\\") + c, std::string(1, c));
  replace_all(p, "(?i:'s|'t|'re|'ve|'m|'ll|'d)", "(?:'([sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))");

  const ClassBodies& cb = class_bodies();
  static const std::string kWord = "A-Za-z0-9_";
  std::string out;
  out.reserve(p.size() * 2);
  bool in_class = false;
  size_t i = 0;
  auto cls = [&](const std::string& body, bool negate) {
    if (in_class) return body;  // caller guarantees !negate inside a class
    return std::string(negate ? "[^" : "[") + body + "]";
  };
  while (i < p.size()) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      switch (e) {
        case 's':
          out += cls(cb.space, false);
          i += 2;
          continue;
        case 'd':
          out += cls("0-9", false);
          i += 2;
          continue;
        case 'w':
          out += cls(kWord, false);
          i += 2;
          continue;
        case 'S':
        case 'D':
        case 'W':
          if (!in_class) {
            out += cls(e == 'S' ? cb.space : e == 'D' ? std::string("0-9") : kWord, true);
            i += 2;
            continue;
          }
          break;  // negated shorthand inside a class: left to PCRE2
        case 'b':
        case 'B':
          if (!in_class) {
            const std::string w = "[" + kWord + "]";
            out += e == 'b' ? "(?:(?<=" + w + ")(?!" + w + ")|(?<!" + w + ")(?=" + w + "))"
                            : "(?:(?<=" + w + ")(?=" + w + ")|(?<!" + w + ")(?!" + w + "))";
            i += 2;
            continue;
          }
          break;
        case 'p':
        case 'P': {
          std::string name;
          size_t len = 2;
          if (i + 2 < p.size() && p[i + 2] == '{') {
            size_t close = p.find('}', i + 3);
            if (close != std::string::npos) {
              name = p.substr(i + 3, close - (i + 3));
              len = close + 1 - i;
            }
          } else if (i + 2 < p.size()) {
            name = p.substr(i + 2, 1);
            len = 3;
          }
          const std::string* body = nullptr;
          if (name == "L" || name == "Letter" || name == "gc=L" || name == "General_Category=Letter")
            body = &cb.letter;
          if (name == "N" || name == "Number" || name == "gc=N" || name == "General_Category=Number")
            body = &cb.number;
          if (body && (e == 'p' || !in_class)) {
            out += cls(*body, e == 'P');
            i += len;
            continue;
          }
          out.append(p, i, len);
          i += len;
          continue;
        }
        case 'u': {
          // JavaScript \uXXXX and \u{X...}; PCRE2 spells both \x{...}.
          if (i + 2 < p.size() && p[i + 2] == '{') {
            size_t close = p.find('}', i + 3);
            if (close != std::string::npos) {
              out += "\\x{" + p.substr(i + 3, close - (i + 3)) + "}";
              i = close + 1;
              continue;
            }
          } else if (i + 5 < p.size() && is_hex(p[i + 2]) && is_hex(p[i + 3]) && is_hex(p[i + 4]) &&
                     is_hex(p[i + 5])) {
            out += "\\x{" + p.substr(i + 2, 4) + "}";
            i += 6;
            continue;
          }
          break;
        }
        default:
          break;
      }
      // Any other escape: copy the backslash and the whole (possibly multi-byte) character.
      const size_t n = utf8_len(static_cast<unsigned char>(e));
      out.append(p, i, 1 + n);
      i += 1 + n;
      continue;
    }
    if (in_class) {
      if (c == ']') {
        in_class = false;
      } else if (c == '[') {
        out += "\\[";  // a literal in JavaScript; PCRE2 would read "[:" as a POSIX class
        ++i;
        continue;
      }
      out += c;
      ++i;
      continue;
    }
    if (c == '[') {
      in_class = true;
      out += c;
      ++i;
      if (i < p.size() && p[i] == '^') {
        out += '^';
        ++i;
      }
      // JavaScript: "[]" is empty and "[^]" matches anything (PCRE2_ALLOW_EMPTY_CLASS).
      if (i < p.size() && p[i] == ']') {
        out += ']';
        in_class = false;
        ++i;
      }
      continue;
    }
    if (c == '.') {
      out += "[^\\n\\r\\x{2028}\\x{2029}]";
      ++i;
      continue;
    }
    out += c;
    ++i;
  }
  return out;
}

struct JsRegex::Impl {
  pcre2_code* code = nullptr;
  ~Impl() {
    if (code) pcre2_code_free(code);
  }
};

JsRegex::JsRegex(const std::string& js_pattern) : impl_(std::make_unique<Impl>()) {
  pcre_pattern_ = rewrite_js_pattern(js_pattern);
  int err = 0;
  PCRE2_SIZE erroff = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre_pattern_.data()), pcre_pattern_.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY | PCRE2_ALLOW_EMPTY_CLASS |
                                  PCRE2_NEVER_BACKSLASH_C,
                              &err, &erroff, nullptr);
  if (!impl_->code) fail("cannot compile regex /", js_pattern, "/: ", pcre2_message(err));
  // JIT is optional: without it pcre2_match interprets the pattern.
  (void)pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);
}

JsRegex::~JsRegex() = default;

std::vector<std::pair<size_t, size_t>> JsRegex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  if (!md) throw std::bad_alloc();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  uint32_t extra = 0;  // PCRE2_NO_JIT once the JIT stack proved too small
  while (pos <= text.size()) {
    int rc = pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK | extra, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !extra) {
      extra = PCRE2_NO_JIT;  // the interpreter keeps its backtracking state on the heap
      continue;
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      fail("regex match failed: ", pcre2_message(rc));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    out.emplace_back(ov[0], ov[1]);
    if (ov[1] > ov[0]) {
      pos = ov[1];
    } else {
      if (ov[1] >= text.size()) break;
      pos = ov[1] + utf8_len(static_cast<unsigned char>(text[ov[1]]));
    }
  }
  pcre2_match_data_free(md);
  return out;
}

}  // namespace dspark::tokenizer_detail
