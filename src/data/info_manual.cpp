#include "data/info_manual.h"

#include "data/text_util.h"

namespace dspark::data {

namespace {

// "*note Label: (manual)Node." / "*Note Node::" -> "Label" / "See Node".
std::string rewrite_xrefs(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const bool lower = s.substr(i, 6) == "*note " || s.substr(i, 6) == "*note\n";
    const bool upper = s.substr(i, 6) == "*Note " || s.substr(i, 6) == "*Note\n";
    if (!lower && !upper) {
      out += s[i++];
      continue;
    }
    const size_t label_begin = i + 6;
    const size_t colon = s.find(':', label_begin);
    if (colon == std::string_view::npos || colon - label_begin > 200) {
      out += s[i++];
      continue;
    }
    const std::string label = collapse_spaces(s.substr(label_begin, colon - label_begin));
    size_t end;
    if (colon + 1 < s.size() && s[colon + 1] == ':') {
      end = colon + 2;
    } else {
      // Node spec up to '.' or ',' (kept as punctuation); parentheses hold a manual name.
      size_t k = colon + 1;
      int paren = 0;
      while (k < s.size() && k - colon < 200) {
        if (s[k] == '(') ++paren;
        else if (s[k] == ')') --paren;
        else if (paren == 0 && (s[k] == '.' || s[k] == ',')) break;
        ++k;
      }
      if (k >= s.size() || k - colon >= 200) {
        out += s[i++];
        continue;
      }
      end = k;  // the punctuation stays
    }
    // "*Note" (@xref) reads "See"; "(*note" (@pxref) reads "(see"; other "*note"s (@ref) follow
    // the author's own words ("see *note X::").
    size_t k = out.size();
    while (k > 0 && (out[k - 1] == ' ' || out[k - 1] == '\n')) --k;
    if (upper) out += "See ";
    else if (k > 0 && out[k - 1] == '(') out += "see ";
    out += label;
    i = end;
  }
  return out;
}

bool underline(std::string_view t) {
  if (t.size() < 3) return false;
  const char c = t[0];
  if (c != '*' && c != '=' && c != '-' && c != '.') return false;
  for (const char x : t)
    if (x != c) return false;
  return true;
}

bool skip_node(const std::string& name) {
  const std::string l = lower_ascii(name);
  return l == "top" || l.find("index") != std::string::npos || l.find("license") != std::string::npos ||
         l.find("copying") != std::string::npos || l.find("licence") != std::string::npos;
}

}  // namespace

std::string info_manual_name(const std::string& path, int* part) {
  const size_t slash = path.rfind('/');
  std::string base = path.substr(slash == std::string::npos ? 0 : slash + 1);
  if (ends_with(base, ".gz")) base.resize(base.size() - 3);
  int p = 0;
  const size_t info = base.rfind(".info");
  if (info != std::string::npos) {
    const std::string tail = base.substr(info + 5);
    if (starts_with(tail, "-")) p = std::atoi(tail.c_str() + 1);
    base.resize(info);
  }
  if (part) *part = p;
  return base;
}

std::vector<InfoNode> parse_info_manual(std::string_view text, std::string* title, size_t min_bytes) {
  std::vector<InfoNode> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t next = text.find('\x1f', pos);
    if (next == std::string_view::npos) next = text.size();
    std::string_view unit = text.substr(pos, next - pos);
    pos = next + 1;
    while (!unit.empty() && (unit[0] == '\n' || unit[0] == '\r')) unit.remove_prefix(1);
    if (!starts_with(unit, "File:") && !starts_with(unit, "File: ")) continue;
    const size_t eol = unit.find('\n');
    const std::string_view header = unit.substr(0, eol);
    const size_t n = header.find("Node: ");
    if (n == std::string_view::npos) continue;
    std::string_view name = header.substr(n + 6);
    if (const size_t c = name.find(",  "); c != std::string_view::npos) name = name.substr(0, c);
    if (const size_t c = name.find('\t'); c != std::string_view::npos) name = name.substr(0, c);
    const std::string node = collapse_spaces(name);
    std::string_view body = eol == std::string_view::npos ? std::string_view() : unit.substr(eol + 1);
    if (node == "Top" && title) {
      for (const auto l : split_lines(body))
        if (!trim(l).empty()) {
          *title = collapse_spaces(l);
          break;
        }
    }
    if (skip_node(node)) continue;
    if (body.find(std::string_view("\0\b[index\0\b]", 12)) != std::string_view::npos) continue;
    // Menus run to the end of the node.
    if (const size_t m = body.find("* Menu:"); m != std::string_view::npos) body = body.substr(0, m);
    std::string cleaned = rewrite_xrefs(body);
    // Special \0\b[...\0\b] sequences (images, index markers).
    for (size_t s; (s = cleaned.find(std::string_view("\0\b[", 3))) != std::string::npos;) {
      const size_t e = cleaned.find(std::string_view("\0\b]", 3), s);
      cleaned.erase(s, e == std::string::npos ? std::string::npos : e + 3 - s);
    }
    cleaned = sanitize_utf8(cleaned);
    std::string result;
    std::string prev;
    int blanks = 0;
    for (const auto line : split_lines(cleaned)) {
      std::string l(line);
      while (!l.empty() && (l.back() == ' ' || l.back() == '\t')) l.pop_back();
      if (underline(trim(l)) && !trim(prev).empty()) continue;
      if (l.empty()) {
        ++blanks;
        prev = l;
        continue;
      }
      if (!result.empty()) result += blanks > 0 ? "\n\n" : "\n";
      blanks = 0;
      result += l;
      prev = l;
    }
    if (result.size() < min_bytes) continue;
    out.push_back({node, result});
  }
  return out;
}

}  // namespace dspark::data
