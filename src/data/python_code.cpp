#include "data/python_code.h"

#include "data/text_util.h"

namespace dspark::data {

namespace {

size_t indent_of(std::string_view line) {
  size_t i = 0;
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  return i;
}

bool blank(std::string_view line) { return trim(line).empty(); }

// Net parenthesis depth change of a line, ignoring strings and comments (roughly).
int paren_delta(std::string_view line) {
  int d = 0;
  char quote = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quote) {
      if (c == '\\') ++i;
      else if (c == quote) quote = 0;
      continue;
    }
    if (c == '#') break;
    if (c == '\'' || c == '"') quote = c;
    else if (c == '(' || c == '[' || c == '{') ++d;
    else if (c == ')' || c == ']' || c == '}') --d;
  }
  return d;
}

}  // namespace

std::vector<PyFunction> extract_python_functions(std::string_view source, int max_lines, size_t max_bytes) {
  std::vector<PyFunction> out;
  const auto lines = split_lines(source);
  const size_t n = lines.size();
  for (size_t i = 0; i < n; ++i) {
    std::string_view l = lines[i];
    const bool is_async = starts_with(l, "async def ");
    if (!starts_with(l, "def ") && !is_async) continue;
    // Decorators directly above.
    size_t start = i;
    while (start > 0 && starts_with(lines[start - 1], "@")) --start;
    // Signature: until the parentheses balance on a line ending with ':'.
    size_t sig_end = i;
    int depth = 0;
    bool ok = false;
    for (; sig_end < n && sig_end < i + 20; ++sig_end) {
      depth += paren_delta(lines[sig_end]);
      std::string_view t = trim(lines[sig_end]);
      if (const size_t hash = t.find("  #"); hash != std::string_view::npos) t = trim(t.substr(0, hash));
      if (depth == 0 && ends_with(t, ":")) {
        ok = true;
        break;
      }
    }
    if (!ok) continue;
    std::string sig;
    for (size_t k = i; k <= sig_end; ++k) {
      std::string_view l = lines[k];
      while (!l.empty() && (l.back() == ' ' || l.back() == '\\')) l.remove_suffix(1);  // line continuations
      sig += std::string(l) + " ";
    }
    const size_t name_at = sig.find("def ") + 4;
    const size_t open = sig.find('(', name_at);
    if (open == std::string::npos) continue;
    const std::string name(trim(std::string_view(sig).substr(name_at, open - name_at)));
    if (name.empty() || name[0] == '_') continue;
    // Matching close parenthesis.
    int d = 0;
    size_t close = std::string::npos;
    for (size_t k = open; k < sig.size(); ++k) {
      if (sig[k] == '(') ++d;
      else if (sig[k] == ')' && --d == 0) {
        close = k;
        break;
      }
    }
    if (close == std::string::npos) continue;
    const std::string params = collapse_spaces(std::string_view(sig).substr(open + 1, close - open - 1));

    // Docstring: the first non-blank line after the signature.
    size_t ds = sig_end + 1;
    while (ds < n && blank(lines[ds])) ++ds;
    if (ds >= n || indent_of(lines[ds]) == 0) continue;
    std::string_view first = trim(lines[ds]);
    size_t prefix = 0;
    while (prefix < first.size() && prefix < 2 && (first[prefix] == 'r' || first[prefix] == 'R' || first[prefix] == 'u'))
      ++prefix;
    first.remove_prefix(prefix);
    std::string_view q;
    if (starts_with(first, "\"\"\"")) q = "\"\"\"";
    else if (starts_with(first, "'''")) q = "'''";
    else continue;
    // Find the closing quotes.
    size_t ds_end = ds;
    std::string doc;
    {
      std::string_view rest = first.substr(3);
      size_t found = rest.find(q);
      if (found != std::string_view::npos) {
        doc = std::string(rest.substr(0, found));
      } else {
        doc = std::string(rest) + "\n";
        bool closed = false;
        for (size_t k = ds + 1; k < n && k < ds + 200; ++k) {
          const size_t f = lines[k].find(q);
          if (f != std::string_view::npos) {
            doc += std::string(lines[k].substr(0, f));
            ds_end = k;
            closed = true;
            break;
          }
          doc += std::string(lines[k]) + "\n";
        }
        if (!closed) continue;
      }
    }
    // Summary: the first paragraph of the docstring.
    std::string summary;
    for (const auto dl : split_lines(doc)) {
      if (blank(dl)) {
        if (!summary.empty()) break;
        continue;
      }
      summary += std::string(trim(dl)) + " ";
    }
    summary = collapse_spaces(summary);
    if (summary.size() > 200) {
      const size_t dot = summary.find(". ");
      if (dot == std::string::npos || dot > 200) continue;
      summary = summary.substr(0, dot + 1);
    }
    int words = 0;
    for (size_t k = 0; k < summary.size(); ++k)
      if (summary[k] != ' ' && (k == 0 || summary[k - 1] == ' ')) ++words;
    if (words < 3) continue;

    // Body: until the next non-blank line at column 0.
    size_t end = ds_end + 1;
    size_t last = ds_end;
    while (end < n && (blank(lines[end]) || indent_of(lines[end]) > 0)) {
      if (!blank(lines[end])) last = end;
      ++end;
    }
    if (last == ds_end) continue;  // docstring only
    if (int(last - start + 1) > max_lines) continue;
    PyFunction f;
    f.name = name;
    f.params = params;
    f.summary = summary;
    for (size_t k = start; k <= ds_end; ++k) f.header += std::string(lines[k]) + "\n";
    for (size_t k = ds_end + 1; k <= last; ++k) f.body += std::string(lines[k]) + "\n";
    f.source = f.header + f.body;
    if (f.source.size() > max_bytes) continue;
    out.push_back(std::move(f));
    i = last;
  }
  return out;
}

bool skip_python_file(const std::string& path, std::string_view text, size_t max_bytes) {
  if (text.size() > max_bytes) return true;
  if (path.find("/test/") != std::string::npos || path.find("/tests/") != std::string::npos ||
      path.find("/idle_test/") != std::string::npos)
    return true;
  const size_t slash = path.rfind('/');
  const std::string base = path.substr(slash == std::string::npos ? 0 : slash + 1);
  if (starts_with(base, "_sysconfigdata")) return true;
  if (text.find_first_not_of(" \t\n") == std::string_view::npos) return true;  // empty __init__.py
  const std::string head = lower_ascii(text.substr(0, 1500));
  for (const char* marker : {"gencodec", "autogenerated", "automatically generated", "do not edit"})
    if (head.find(marker) != std::string::npos) return true;
  return false;
}

}  // namespace dspark::data
