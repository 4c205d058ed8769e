#include "client/prom_text.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace dspark {

namespace {

bool name_char(char c, bool first) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':' ||
         (!first && std::isdigit(static_cast<unsigned char>(c)));
}

double parse_value(const std::string& s, size_t line_no) {
  if (s == "+Inf" || s == "Inf") return INFINITY;
  if (s == "-Inf") return -INFINITY;
  if (s == "NaN") return NAN;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size())
    fail("metrics line ", line_no, ": value '", s, "' is not a number");
  return v;
}

PromSample parse_line(const std::string& l, size_t line_no) {
  PromSample s;
  size_t i = 0;
  while (i < l.size() && name_char(l[i], i == 0)) ++i;
  if (i == 0) fail("metrics line ", line_no, ": expected a metric name");
  s.name = l.substr(0, i);
  if (i < l.size() && l[i] == '{') {
    ++i;
    for (;;) {
      while (i < l.size() && (l[i] == ' ' || l[i] == ',')) ++i;
      if (i < l.size() && l[i] == '}') {
        ++i;
        break;
      }
      const size_t k0 = i;
      while (i < l.size() && name_char(l[i], i == k0)) ++i;
      if (i == k0 || i + 1 >= l.size() || l[i] != '=' || l[i + 1] != '"')
        fail("metrics line ", line_no, ": malformed label");
      const std::string key = l.substr(k0, i - k0);
      i += 2;
      std::string value;
      for (;;) {
        if (i >= l.size()) fail("metrics line ", line_no, ": unterminated label value");
        const char c = l[i++];
        if (c == '"') break;
        if (c == '\\' && i < l.size()) {
          const char e = l[i++];
          value += e == 'n' ? '\n' : e;
        } else {
          value += c;
        }
      }
      s.labels[key] = value;
    }
  }
  while (i < l.size() && (l[i] == ' ' || l[i] == '\t')) ++i;
  size_t j = i;
  while (j < l.size() && l[j] != ' ' && l[j] != '\t') ++j;
  s.value = parse_value(l.substr(i, j - i), line_no);  // a timestamp after it is ignored
  return s;
}

}  // namespace

std::vector<PromSample> parse_prom_text(const std::string& text) {
  std::vector<PromSample> out;
  size_t start = 0, line_no = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string l = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (!l.empty() && l.back() == '\r') l.pop_back();
    const size_t first = l.find_first_not_of(" \t");
    if (first == std::string::npos || l[first] == '#') continue;
    out.push_back(parse_line(l.substr(first), line_no));
  }
  return out;
}

double prom_sum(const std::vector<PromSample>& samples, const std::string& name,
                const std::map<std::string, std::string>& match) {
  double sum = 0;
  for (const auto& s : samples) {
    if (s.name != name) continue;
    bool ok = true;
    for (const auto& [k, v] : match) {
      auto it = s.labels.find(k);
      ok = ok && it != s.labels.end() && it->second == v;
    }
    if (ok) sum += s.value;
  }
  return sum;
}

bool prom_has(const std::vector<PromSample>& samples, const std::string& name) {
  for (const auto& s : samples)
    if (s.name == name) return true;
  return false;
}

}  // namespace dspark
