#include "data/freedict.h"

#include "data/text_util.h"

namespace dspark::data {

namespace {

// Removes <...> grammar tags and {...} braces; collapses spaces.
std::string strip_markup(std::string_view s) {
  std::string out;
  int angle = 0;
  for (const char c : s) {
    if (c == '<') {
      ++angle;
      continue;
    }
    if (c == '>' && angle > 0) {
      --angle;
      continue;
    }
    if (angle > 0 || c == '{' || c == '}') continue;
    out += c;
  }
  // "word , word" left by removed tags.
  std::string t = collapse_spaces(out);
  t = replace_all(t, " ,", ",");
  t = replace_all(t, " ;", ";");
  return t;
}

}  // namespace

bool parse_freedict_entry(std::string_view raw_in, FreedictEntry* out) {
  const std::string raw = sanitize_utf8(raw_in);
  const auto lines = split_lines(raw);
  size_t i = 0;
  while (i < lines.size() && trim(lines[i]).empty()) ++i;
  if (i >= lines.size()) return false;
  FreedictEntry e;
  std::string_view head = trim(lines[i]);
  // Grammar: the last <...> on the headline.
  if (const size_t lt = head.rfind('<'); lt != std::string_view::npos && ends_with(head, ">")) {
    e.pos = std::string(trim(head.substr(lt + 1, head.size() - lt - 2)));
    head = trim(head.substr(0, lt));
  }
  // Pronunciation: " /.../".
  if (const size_t sl = head.find(" /"); sl != std::string_view::npos && ends_with(head, "/"))
    head = trim(head.substr(0, sl));
  e.headword = collapse_spaces(head);
  if (e.headword.empty()) return false;
  for (++i; i < lines.size(); ++i) {
    std::string_view t = trim(lines[i]);
    if (t.empty()) continue;
    if (starts_with(t, "see:") || starts_with(t, "Synonym:") || starts_with(t, "Antonym:") ||
        starts_with(t, "Synonyms:") || starts_with(t, "See also:"))
      continue;
    if (starts_with(t, "Note:")) {
      const std::string n = strip_markup(t.substr(5));
      if (!n.empty()) e.notes.push_back(n);
      continue;
    }
    if (t[0] == '"') {
      // "source"  - target
      const size_t close = t.find('"', 1);
      if (close != std::string_view::npos) {
        const std::string src = collapse_spaces(t.substr(1, close - 1));
        std::string_view rest = trim(t.substr(close + 1));
        if (starts_with(rest, "-")) rest = trim(rest.substr(1));
        const std::string tgt = strip_markup(rest);
        if (!src.empty() && !tgt.empty()) e.examples.emplace_back(src, tgt);
      }
      continue;
    }
    // Sense numbering "2. ".
    size_t k = 0;
    while (k < t.size() && t[k] >= '0' && t[k] <= '9') ++k;
    if (k > 0 && k + 1 < t.size() && t[k] == '.' && t[k + 1] == ' ') t = trim(t.substr(k + 2));
    const std::string tr = strip_markup(t);
    if (!tr.empty() && tr != e.headword) e.translations.push_back(tr);
  }
  if (e.translations.empty()) return false;
  *out = std::move(e);
  return true;
}

std::string language_name(const std::string& code) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"eng", "English"}, {"deu", "German"},  {"fra", "French"},     {"spa", "Spanish"},
      {"ita", "Italian"}, {"nld", "Dutch"},   {"por", "Portuguese"}, {"swe", "Swedish"},
      {"pol", "Polish"},  {"rus", "Russian"}, {"tur", "Turkish"},    {"ces", "Czech"},
  };
  for (const auto& [k, v] : kNames)
    if (code == k) return v;
  return {};
}

}  // namespace dspark::data
