#include "data/gcide.h"

#include <map>
#include <optional>
#include <vector>

#include "data/text_util.h"

namespace dspark::data {

namespace {

// Combining marks for the one-character diacritic codes.
const char* combining(char mark, bool after) {
  switch (mark) {
    case '^': return after ? "\xCC\x86" : "\xCC\x82";  // breve (a^) or circumflex (^a)
    case '=': return "\xCC\x84";                        // macron
    case '-': return "\xCC\x84";
    case '\'': return "\xCC\x81";                       // acute
    case '`': return "\xCC\x80";                        // grave
    case '"': return "\xCC\x88";                        // diaeresis
    case '~': return "\xCC\x83";                        // tilde
    case ',': return "\xCC\xA7";                        // cedilla
    case '.': return "\xCC\xA3";                        // dot below
    case '*': return "\xCC\x87";                        // dot above
    default: return nullptr;
  }
}

// Precomposed forms for the common letters, so the output is NFC for them.
const std::map<std::string, std::string>& precomposed() {
  static const std::map<std::string, std::string> m = {
      {"a\xCC\x86", "ă"}, {"e\xCC\x86", "ĕ"}, {"i\xCC\x86", "ĭ"}, {"o\xCC\x86", "ŏ"}, {"u\xCC\x86", "ŭ"},
      {"a\xCC\x82", "â"}, {"e\xCC\x82", "ê"}, {"i\xCC\x82", "î"}, {"o\xCC\x82", "ô"}, {"u\xCC\x82", "û"},
      {"a\xCC\x84", "ā"}, {"e\xCC\x84", "ē"}, {"i\xCC\x84", "ī"}, {"o\xCC\x84", "ō"}, {"u\xCC\x84", "ū"},
      {"y\xCC\x84", "ȳ"}, {"a\xCC\x81", "á"}, {"e\xCC\x81", "é"}, {"i\xCC\x81", "í"}, {"o\xCC\x81", "ó"},
      {"u\xCC\x81", "ú"}, {"E\xCC\x81", "É"}, {"a\xCC\x80", "à"}, {"e\xCC\x80", "è"}, {"a\xCC\x88", "ä"},
      {"e\xCC\x88", "ë"}, {"i\xCC\x88", "ï"}, {"o\xCC\x88", "ö"}, {"u\xCC\x88", "ü"}, {"n\xCC\x83", "ñ"},
      {"c\xCC\xA7", "ç"}, {"a\xCC\x83", "ã"}, {"o\xCC\x83", "õ"}, {"A\xCC\x88", "Ä"}, {"O\xCC\x88", "Ö"},
      {"U\xCC\x88", "Ü"}, {"y\xCC\x86", "y̆"},
  };
  return m;
}

const std::map<std::string, std::string>& named_codes() {
  static const std::map<std::string, std::string> m = {
      {"ae", "æ"},     {"AE", "Æ"},     {"oe", "œ"},     {"OE", "Œ"},     {"=ae", "ǣ"},    {"imac", "ī"},
      {"aum", "ä"},    {"eth", "ð"},    {"thorn", "þ"},  {"root", "√"},   {"deg", "°"},    {"sect", "§"},
      {"yogh", "ȝ"},   {"ng", "ŋ"},     {"th", "th"},    {"udd", "u"},    {"add", "ă"},    {"asl", "a"},
      {"oo^", "o͝o"},   {"=oo", "o͞o"},   {"beta", "β"},   {"alpha", "α"},  {"gamma", "γ"},  {"delta", "δ"},
      {"pi", "π"},     {"mu", "μ"},     {"bprime", "″"}, {"prime", "′"},  {"frac12", "½"}, {"frac13", "⅓"},
      {"frac14", "¼"}, {"frac34", "¾"}, {"frac23", "⅔"}, {"pound", "£"},  {"cent", "¢"},   {"times", "×"},
      {"divide", "÷"}, {"dsdot", "ḍ"},  {"hand", "☞"},   {"flat", "♭"},   {"sharp", "♯"},  {"natural", "♮"},
  };
  return m;
}

// Source tags like "[1913 Webster + WordNet 1.5]": every word is a tag word or a number.
bool is_source_tag(std::string_view content) {
  static const char* kWords[] = {"1913", "Webster", "Suppl.", "WordNet", "sense", "PJC", "PJC.", "AS", "RDH",
                                 "RHUD", "Century", "Dict.", "MW10", "NPH", "JC", "+", "Chambers", "1906"};
  bool any_word = false;
  size_t i = 0;
  while (i < content.size()) {
    while (i < content.size() && content[i] == ' ') ++i;
    size_t j = i;
    while (j < content.size() && content[j] != ' ') ++j;
    if (j == i) break;
    std::string_view w = content.substr(i, j - i);
    if (w.size() > 1 && w[0] == '+') w.remove_prefix(1);  // "+PJC"
    bool numeric = true;
    for (const char c : w) numeric = numeric && ((c >= '0' && c <= '9') || c == '.');
    bool known = false;
    for (const char* k : kWords) known = known || w == k;
    if (!numeric && !known) return false;
    if (known && w != "+") any_word = true;
    i = j;
  }
  return any_word;
}

// s with each "[...]" of at most `max_len` characters (brackets included) that `rewrite` takes
// replaced: rewrite(inside) returns the replacement, or nullopt to keep the text as it is.
template <class Rewrite>
std::string rewrite_brackets(std::string_view s, size_t max_len, Rewrite rewrite) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const size_t close = s[i] == '[' ? s.find(']', i) : std::string_view::npos;
    if (close != std::string_view::npos && close - i + 1 <= max_len) {
      if (std::optional<std::string> r = rewrite(s.substr(i + 1, close - i - 1))) {
        out += *r;
        i = close;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

std::string strip_source_tags(std::string_view s) {
  return rewrite_brackets(s, 60, [](std::string_view inside) -> std::optional<std::string> {
    if (inside.find('\n') != std::string_view::npos || !is_source_tag(inside)) return std::nullopt;
    return "";
  });
}

std::string strip_pronunciation(std::string_view s) {
  std::string out;
  bool first = true;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\') {
      const size_t close = s.find('\\', i + 1);
      if (close != std::string_view::npos && close - i < 100 &&
          s.substr(i, close - i).find('\n') == std::string_view::npos) {
        size_t j = close + 1;
        if (first) {
          size_t k = j;
          while (k < s.size() && s[k] == ' ') ++k;
          if (k < s.size() && s[k] == '(') {
            const size_t pc = s.find(')', k);
            if (pc != std::string_view::npos && pc - k < 50) {
              const std::string_view inner = s.substr(k + 1, pc - k - 1);
              if (inner.find('[') != std::string_view::npos && inner.find(' ') == std::string_view::npos)
                j = pc + 1;
            }
          }
          first = false;
        }
        // "Run \Run\, v." -> "Run, v.": drop the space before the span.
        while (!out.empty() && out.back() == ' ') out.pop_back();
        i = j - 1;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

// "{Un*wor"thi*ly}" -> "Unworthily".
std::string strip_braces(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  int depth = 0;
  for (const char c : s) {
    if (c == '{') {
      ++depth;
      continue;
    }
    if (c == '}') {
      if (depth > 0) --depth;
      continue;
    }
    if (depth > 0 && (c == '*' || c == '"' || c == '`')) continue;
    out += c;
  }
  return out;
}

bool sense_start(std::string_view t) {
  size_t i = 0;
  while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i;
  if (i > 0 && i < 4 && i + 1 < t.size() && t[i] == '.' && t[i + 1] == ' ') return true;
  if (t.size() > 4 && t[0] == '(' && t[1] >= 'a' && t[1] <= 'z' && t[2] == ')' && t[3] == ' ') return true;
  return starts_with(t, "Syn:") || starts_with(t, "Note:");
}

}  // namespace

std::string gcide_accents(std::string_view s) {
  return rewrite_brackets(s, 9, [](std::string_view inside) -> std::optional<std::string> {
    const std::string code(inside);
    if (auto it = named_codes().find(code); it != named_codes().end()) return it->second;
    // One letter with a mark before or after it: [a^] [=a] ['e] ["o] [,c] [.r] [^o].
    if (code.size() != 2) return std::nullopt;
    const bool letter0 = (code[0] >= 'a' && code[0] <= 'z') || (code[0] >= 'A' && code[0] <= 'Z');
    const bool letter1 = (code[1] >= 'a' && code[1] <= 'z') || (code[1] >= 'A' && code[1] <= 'Z');
    const char* mark = nullptr;
    char letter = 0;
    if (letter0 && !letter1 && code[1] == '^') {
      mark = combining('^', true);
      letter = code[0];
    } else if (!letter0 && letter1) {
      mark = combining(code[0], false);
      letter = code[1];
    }
    if (!mark) return std::nullopt;
    const std::string composed = std::string(1, letter) + mark;
    auto pc = precomposed().find(composed);
    return pc != precomposed().end() ? pc->second : composed;
  });
}

// Some articles end with the next article's headword after the last source tag
// ("[1913 Webster] fine-tooth"); cut it.
static std::string drop_trailing_headword(std::string s) {
  size_t end = s.size();
  while (end > 0 && (s[end - 1] == '\n' || s[end - 1] == ' ')) --end;
  const size_t line_start = s.rfind('\n', end == 0 ? 0 : end - 1);
  const size_t b = line_start == std::string::npos ? 0 : line_start + 1;
  const size_t close = s.rfind(']', end);
  if (close == std::string::npos || close < b || close + 1 >= end) return s;
  const size_t open = s.rfind('[', close);
  if (open == std::string::npos || open < b) return s;
  if (!is_source_tag(std::string_view(s).substr(open + 1, close - open - 1))) return s;
  s.erase(close + 1, end - close - 1);
  return s;
}

bool clean_gcide_entry(const std::string& index_headword, std::string_view raw_in, GcideEntry* out) {
  const std::string raw = drop_trailing_headword(sanitize_utf8(raw_in));
  std::string s = strip_source_tags(raw);
  // The headword: what precedes the first " \" on the first line.
  const std::string_view first_line = split_lines(s).empty() ? std::string_view() : split_lines(s)[0];
  std::string head;
  if (const size_t bs = first_line.find(" \\"); bs != std::string_view::npos && bs > 0)
    head = std::string(trim(first_line.substr(0, bs)));
  if (head.empty()) head = index_headword;
  head = gcide_accents(strip_braces(head));
  s = gcide_accents(strip_braces(strip_pronunciation(s)));

  // Paragraphs (blank-line separated) joined into lines; senses, Syn: and Note: start new lines.
  std::vector<std::string> lines;
  std::string cur;
  const auto flush = [&] {
    const std::string t = collapse_spaces(cur);
    if (!t.empty()) lines.push_back(t);
    cur.clear();
  };
  for (const auto line : split_lines(s)) {
    const std::string_view t = trim(line);
    if (t.empty()) {
      flush();
      continue;
    }
    if (sense_start(t)) flush();
    cur += std::string(t) + " ";
  }
  flush();
  if (lines.empty()) return false;
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  if (!text.empty()) text.pop_back();
  if (text.size() < 40) return false;

  // Definition: the article without its headword and without the etymology in brackets that
  // may follow the part of speech on the headline.
  std::string def;
  {
    std::string first = lines[0];
    if (starts_with(first, head)) first.erase(0, head.size());
    while (!first.empty() && (first[0] == ',' || first[0] == ' ')) first.erase(0, 1);
    const size_t open = first.find('[');
    if (open != std::string::npos && open < 40) {
      int depth = 0;
      for (size_t k = open; k < first.size(); ++k) {
        if (first[k] == '[') ++depth;
        else if (first[k] == ']' && --depth == 0) {
          first.erase(open, k + 1 - open);
          first = collapse_spaces(first);
          break;
        }
      }
    }
    def = first;
    for (size_t i = 1; i < lines.size(); ++i) {
      if (def.size() + lines[i].size() > 1200) break;
      def += (def.empty() ? "" : "\n") + lines[i];
    }
  }
  if (def.size() < 10) return false;
  out->headword = head;
  out->text = text;
  out->definition = def;
  return true;
}

}  // namespace dspark::data
