#include "tokenizer/unicode_util.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/error.h"
// After unicode_util.h, which defines the table row types.
#include "tokenizer/js_unicode_composition.inc"
#include "tokenizer/js_unicode_decomposition.inc"

namespace dspark::tokenizer_detail {

namespace {

struct ByteLevelAlphabet {
  uint32_t byte_to_cp[256];
  int16_t cp_to_byte[324];  // -1 where the code point is not in the alphabet
  ByteLevelAlphabet() {
    std::fill(std::begin(cp_to_byte), std::end(cp_to_byte), int16_t{-1});
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      byte_to_cp[b] = bytelevel_printable(b) ? b : 256 + n++;
      cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};
const ByteLevelAlphabet& bytelevel_alphabet() {
  static const ByteLevelAlphabet a;
  return a;
}

}  // namespace

bool bytelevel_printable(uint32_t b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

std::string bytes_to_bytelevel(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(out, bytelevel_alphabet().byte_to_cp[b]);
  return out;
}

std::optional<std::string> bytelevel_to_bytes(std::string_view token) {
  const ByteLevelAlphabet& a = bytelevel_alphabet();
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    const uint32_t cp = next_codepoint(token, i);
    if (cp >= 324 || a.cp_to_byte[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(a.cp_to_byte[cp]));
  }
  return out;
}

namespace {
constexpr const char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint32_t next_codepoint(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int n = b0 >= 0xF0 ? 3 : b0 >= 0xE0 ? 2 : 1;
  uint32_t cp = b0 & (0x3F >> n);
  ++i;
  for (int k = 0; k < n && i < s.size(); ++k, ++i) cp = (cp << 6) | (static_cast<unsigned char>(s[i]) & 0x3F);
  return cp;
}

// The WHATWG UTF-8 decoder (https://encoding.spec.whatwg.org/#utf-8-decoder).
size_t utf8_decode_prefix(std::string_view in, std::string& out) {
  out.reserve(out.size() + in.size());
  unsigned needed = 0, seen = 0;
  uint32_t cp = 0;
  unsigned char lower = 0x80, upper = 0xBF;
  size_t seq_start = 0;
  size_t i = 0;
  while (i < in.size()) {
    const auto b = static_cast<unsigned char>(in[i]);
    if (needed == 0) {
      seq_start = i;
      if (b <= 0x7F) {
        out.push_back(static_cast<char>(b));
      } else if (b >= 0xC2 && b <= 0xDF) {
        needed = 1;
        cp = b & 0x1F;
      } else if (b >= 0xE0 && b <= 0xEF) {
        if (b == 0xE0) lower = 0xA0;
        if (b == 0xED) upper = 0x9F;
        needed = 2;
        cp = b & 0xF;
      } else if (b >= 0xF0 && b <= 0xF4) {
        if (b == 0xF0) lower = 0x90;
        if (b == 0xF4) upper = 0x8F;
        needed = 3;
        cp = b & 0x7;
      } else {
        out += kReplacement;
      }
      ++i;
      continue;
    }
    if (b < lower || b > upper) {
      // Ill-formed: the bytes seen so far are one maximal subpart; reprocess this byte.
      needed = seen = 0;
      cp = 0;
      lower = 0x80;
      upper = 0xBF;
      out += kReplacement;
      continue;
    }
    lower = 0x80;
    upper = 0xBF;
    cp = (cp << 6) | (b & 0x3F);
    ++i;
    if (++seen == needed) {
      append_utf8(out, cp);
      needed = seen = 0;
      cp = 0;
    }
  }
  return needed ? seq_start : in.size();
}

std::string utf8_sanitize(std::string_view in) {
  std::string out;
  if (utf8_decode_prefix(in, out) < in.size()) out += kReplacement;
  return out;
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    unsigned need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      need = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
      need = 2;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      need = 3;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    for (unsigned k = 1; k <= need; ++k) {
      if (i + k >= n) return false;
      const auto c = static_cast<unsigned char>(s[i + k]);
      if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return false;
    }
    i += need + 1;
  }
  return true;
}

bool is_js_space(uint32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0xA0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000: case 0xFEFF:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool is_word_char(uint32_t cp) {
  if (cp == '_') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

std::string_view js_trim_end(std::string_view s) {
  while (!s.empty()) {
    // Find the start of the last code point.
    size_t k = s.size() - 1;
    while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
    size_t j = k;
    if (!is_js_space(next_codepoint(s, j))) break;
    s = s.substr(0, k);
  }
  return s;
}

std::string_view js_trim_start(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    if (!is_js_space(next_codepoint(s, j))) break;
    i = j;
  }
  return s.substr(i);
}

namespace {

constexpr uint32_t kMaxCp = 0x110000;
constexpr uint32_t kHangulFirst = 0xAC00, kHangulLast = 0xD7A3;

// The JavaScript reference's normalization data, and where utf8proc's differs from it.
struct JsNormData {
  std::vector<uint8_t> ccc;                                            // per code point
  std::unordered_map<uint32_t, const Decomposition*> decomposition;   // NFD != itself
  std::vector<bool> differs;     // per code point: take the table path for text holding it
  std::vector<bool> data_differs;  // per code point: utf8proc's ccc or decomposition differs
  std::unordered_map<uint64_t, uint32_t> pairs;                        // (a, b) -> composite, where they differ
  bool any_difference = false;

  JsNormData() : ccc(kMaxCp, 0), differs(kMaxCp, false), data_differs(kMaxCp, false) {
    for (const NonStarter& n : kJsNonStarters) ccc[n.cp] = n.ccc;
    for (const Decomposition& d : kJsDecompositions) decomposition.emplace(d.cp, &d);
    std::vector<uint32_t> candidates;
    for (uint32_t cp = 0; cp < kMaxCp; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      if (cp >= kHangulFirst && cp <= kHangulLast) continue;  // algorithmic in both
      const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
      if (ccc[cp] || decomposition.count(cp) || p->combining_class || p->decomp_seqindex != UINT16_MAX)
        candidates.push_back(cp);
    }
    for (uint32_t cp : candidates) {
      utf8proc_int32_t buf[32];
      int last = 0;
      const utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp), buf, 32,
                                                         UTF8PROC_DECOMPOSE, &last);
      std::vector<uint32_t> mine(buf, buf + std::max<utf8proc_ssize_t>(n, 0));
      std::vector<uint32_t> js{cp};
      if (auto it = decomposition.find(cp); it != decomposition.end())
        js.assign(kJsDecompData + it->second->offset, kJsDecompData + it->second->offset + it->second->length);
      const bool same_ccc = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp))->combining_class == ccc[cp];
      if (mine != js || (js.size() == 1 && !same_ccc)) differs[cp] = data_differs[cp] = true;
    }
    // New compositions: their parts must take the table path too.
    for (const Composition& c : kJsCompositions) {
      if (!data_differs[c.composite]) continue;
      pairs.emplace((static_cast<uint64_t>(c.first) << 21) | c.second, c.composite);
      differs[c.first] = differs[c.second] = true;
    }
    any_difference = std::find(differs.begin(), differs.end(), true) != differs.end();
  }

  void decompose(uint32_t cp, std::vector<uint32_t>& out) const {
    if (cp >= kHangulFirst && cp <= kHangulLast) {
      const uint32_t s = cp - kHangulFirst;
      out.push_back(0x1100 + s / 588);
      out.push_back(0x1161 + (s % 588) / 28);
      if (s % 28) out.push_back(0x11A7 + s % 28);
      return;
    }
    if (auto it = decomposition.find(cp); it != decomposition.end()) {
      out.insert(out.end(), kJsDecompData + it->second->offset, kJsDecompData + it->second->offset + it->second->length);
      return;
    }
    out.push_back(cp);
  }

  // The primary composite of a + b, or 0.
  uint32_t compose(uint32_t a, uint32_t b) const {
    if (a >= 0x1100 && a < 0x1113 && b >= 0x1161 && b < 0x1176)  // Hangul L + V
      return kHangulFirst + ((a - 0x1100) * 21 + (b - 0x1161)) * 28;
    if (a >= kHangulFirst && a <= kHangulLast && (a - kHangulFirst) % 28 == 0 && b > 0x11A7 && b < 0x11C3)
      return a + (b - 0x11A7);  // Hangul LV + T
    if (differs[a] || differs[b]) {
      auto it = pairs.find((static_cast<uint64_t>(a) << 21) | b);
      if (it != pairs.end()) return it->second;
      if (data_differs[a] || data_differs[b]) return 0;
    }
    // Both parts have the same data in utf8proc: let it compose the pair (STABLE: no
    // composition exclusions).
    utf8proc_int32_t buf[2] = {static_cast<utf8proc_int32_t>(a), static_cast<utf8proc_int32_t>(b)};
    const utf8proc_ssize_t n =
        utf8proc_normalize_utf32(buf, 2, static_cast<utf8proc_option_t>(UTF8PROC_COMPOSE | UTF8PROC_STABLE));
    return n == 1 ? static_cast<uint32_t>(buf[0]) : 0;
  }
};

const JsNormData& js_norm_data() {
  static const JsNormData data;
  return data;
}

}  // namespace

bool normalization_differs_from_js(uint32_t cp) { return cp < kMaxCp && js_norm_data().differs[cp]; }

std::string normalize_with_js_tables(std::string_view s, bool compose) {
  const JsNormData& nd = js_norm_data();
  std::vector<uint32_t> cps;
  cps.reserve(s.size());
  for (size_t i = 0; i < s.size();) nd.decompose(next_codepoint(s, i), cps);
  // Canonical ordering: stable sort of every run of non-starters by combining class.
  for (size_t i = 0; i < cps.size();) {
    if (!nd.ccc[cps[i]]) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && nd.ccc[cps[j]]) ++j;
    std::stable_sort(cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(j),
                     [&](uint32_t a, uint32_t b) { return nd.ccc[a] < nd.ccc[b]; });
    i = j;
  }
  if (compose) {
    // Canonical composition (UAX #15): combine with the last starter unless blocked.
    std::vector<uint32_t> out;
    out.reserve(cps.size());
    ptrdiff_t starter = -1;
    for (uint32_t c : cps) {
      const uint8_t cc = nd.ccc[c];
      if (starter >= 0) {
        const bool adjacent = static_cast<size_t>(starter) + 1 == out.size();
        const bool blocked = !adjacent && (nd.ccc[out.back()] == 0 || nd.ccc[out.back()] >= cc);
        if (!blocked) {
          if (uint32_t p = nd.compose(out[starter], c)) {
            out[starter] = p;
            continue;
          }
        }
      }
      if (cc == 0) starter = static_cast<ptrdiff_t>(out.size());
      out.push_back(c);
    }
    cps.swap(out);
  }
  std::string result;
  result.reserve(s.size());
  for (uint32_t c : cps) append_utf8(result, c);
  return result;
}

std::string normalize(std::string_view s, NormForm form) {
  bool ascii = true;
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii) return std::string(s);
  if (form == NormForm::NFC || form == NormForm::NFD) {
    const JsNormData& nd = js_norm_data();
    if (nd.any_difference) {
      for (size_t i = 0; i < s.size();) {
        if (nd.differs[next_codepoint(s, i)]) return normalize_with_js_tables(s, form == NormForm::NFC);
      }
    }
  }
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormForm::NFC: options |= UTF8PROC_COMPOSE; break;
    case NormForm::NFD: options |= UTF8PROC_DECOMPOSE; break;
    case NormForm::NFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormForm::NFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* dst = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                   static_cast<utf8proc_ssize_t>(s.size()), &dst,
                   static_cast<utf8proc_option_t>(options));
  if (n < 0) fail("unicode normalization failed: ", utf8proc_errmsg(n));
  std::unique_ptr<utf8proc_uint8_t, void (*)(void*)> guard(dst, std::free);
  return std::string(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
}

}  // namespace dspark::tokenizer_detail
