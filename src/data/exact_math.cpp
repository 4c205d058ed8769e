// Exact rational arithmetic, number printing and parsing, and the equation checker.
#include "data/exact_math.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <stdexcept>
#include <utility>

#include "data/text_util.h"

namespace dspark::data {

// ---------------------------------------------------------------------------------------------
// Rational

namespace {

int64_t checked(__int128 v) {
  if (v > INT64_MAX || v < -INT64_MAX) throw std::overflow_error("rational overflow");
  return int64_t(v);
}

}  // namespace

Rational::Rational(int64_t num, int64_t den) {
  if (den == 0) throw std::domain_error("division by zero");
  if (den < 0) {
    num = -num;
    den = -den;
  }
  const int64_t g = std::gcd(num < 0 ? -num : num, den);
  n = g ? num / g : 0;
  d = g ? den / g : 1;
}

Rational operator+(Rational a, Rational b) {
  return Rational(checked(__int128(a.n) * b.d + __int128(b.n) * a.d), checked(__int128(a.d) * b.d));
}
Rational operator-(Rational a, Rational b) {
  return Rational(checked(__int128(a.n) * b.d - __int128(b.n) * a.d), checked(__int128(a.d) * b.d));
}
Rational operator*(Rational a, Rational b) {
  return Rational(checked(__int128(a.n) * b.n), checked(__int128(a.d) * b.d));
}
Rational operator/(Rational a, Rational b) {
  if (b.n == 0) throw std::domain_error("division by zero");
  return Rational(checked(__int128(a.n) * b.d), checked(__int128(a.d) * b.n));
}
bool operator<(Rational a, Rational b) {
  return __int128(a.n) * b.d < __int128(b.n) * a.d;
}

int decimal_places(Rational r, int max_places) {
  int64_t d = r.d;
  int twos = 0, fives = 0;
  while (d % 2 == 0) d /= 2, ++twos;
  while (d % 5 == 0) d /= 5, ++fives;
  if (d != 1) return -1;
  const int p = std::max(twos, fives);
  return p <= max_places ? p : -1;
}

std::string decimal_string(Rational r, int places) {
  __int128 scale = 1;
  for (int i = 0; i < places; ++i) scale *= 10;
  const __int128 v = __int128(r.n) * scale / r.d;
  const bool neg = v < 0;
  unsigned __int128 a = neg ? -v : v;
  std::string digits;
  do {
    digits.insert(digits.begin(), char('0' + int(a % 10)));
    a /= 10;
  } while (a);
  while (int(digits.size()) <= places) digits.insert(digits.begin(), '0');
  std::string out = neg ? "-" : "";
  if (places == 0) return out + digits;
  return out + digits.substr(0, digits.size() - size_t(places)) + "." +
         digits.substr(digits.size() - size_t(places));
}

std::string to_string(Rational r) {
  if (r.d == 1) return std::to_string(r.n);
  const int p = decimal_places(r, 6);
  if (p >= 0) return decimal_string(r, p);
  return std::to_string(r.n) + "/" + std::to_string(r.d);
}

bool parse_rational(std::string_view s, Rational* out) {
  s = trim(s);
  bool neg = false;
  if (!s.empty() && s[0] == '-') {
    neg = true;
    s.remove_prefix(1);
  }
  if (!s.empty() && s[0] == '$') s.remove_prefix(1);
  if (s.empty()) return false;
  const size_t slash = s.find('/');
  try {
    if (slash != std::string_view::npos) {
      Rational a, b;
      if (!parse_rational(s.substr(0, slash), &a) || !parse_rational(s.substr(slash + 1), &b))
        return false;
      if (!a.is_integer() || !b.is_integer() || b.n == 0) return false;
      *out = Rational(neg ? -a.n : a.n, b.n);
      return true;
    }
    int64_t num = 0, den = 1;
    bool dot = false, digit = false;
    for (size_t i = 0; i < s.size(); ++i) {
      const char c = s[i];
      if (c >= '0' && c <= '9') {
        num = checked(__int128(num) * 10 + (c - '0'));
        if (dot) den = checked(__int128(den) * 10);
        digit = true;
      } else if (c == '.' && !dot && i + 1 < s.size()) {
        dot = true;
      } else {
        return false;
      }
    }
    if (!digit) return false;
    *out = Rational(neg ? -num : num, den);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// ---------------------------------------------------------------------------------------------
// Equation checking

namespace {

struct Tok {
  enum Kind { Num, Op, LParen, RParen, Eq, Word } kind;
  Rational value;
  char op = 0;  // + - * /
};

std::vector<Tok> tokenize_line(std::string_view s) {
  std::vector<Tok> out;
  size_t i = 0;
  const auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  while (i < s.size()) {
    const char c = s[i];
    if (c == ' ' || c == '\t') {
      ++i;
      continue;
    }
    if (is_digit(c) || (c == '$' && i + 1 < s.size() && is_digit(s[i + 1]))) {
      size_t j = i + (c == '$' ? 1 : 0);
      while (j < s.size() && is_digit(s[j])) ++j;
      if (j + 1 < s.size() && s[j] == '.' && is_digit(s[j + 1])) {
        ++j;
        while (j < s.size() && is_digit(s[j])) ++j;
      }
      if (j + 1 < s.size() && s[j] == '/' && is_digit(s[j + 1])) {
        ++j;
        while (j < s.size() && is_digit(s[j])) ++j;
      }
      Tok t{Tok::Num, {}, 0};
      if (!parse_rational(s.substr(i, j - i), &t.value)) t.kind = Tok::Word;
      // A number glued to letters ("2x", "3rd") is not a plain number.
      if (j < s.size() && ((s[j] >= 'a' && s[j] <= 'z') || (s[j] >= 'A' && s[j] <= 'Z')))
        t.kind = Tok::Word;
      out.push_back(t);
      i = j;
      continue;
    }
    static constexpr std::pair<std::string_view, char> kSigns[] = {{"×", '*'}, {"÷", '/'}};
    const auto sign = std::find_if(std::begin(kSigns), std::end(kSigns),
                                   [&](const auto& k) { return starts_with(s.substr(i), k.first); });
    if (sign != std::end(kSigns)) {
      out.push_back({Tok::Op, {}, sign->second});
      i += sign->first.size();
      continue;
    }
    if (c == '+' || c == '-') {
      // An operator only when it stands alone between spaces.
      const bool alone = (i == 0 || s[i - 1] == ' ') && (i + 1 == s.size() || s[i + 1] == ' ');
      out.push_back(alone ? Tok{Tok::Op, {}, c} : Tok{Tok::Word, {}, 0});
      ++i;
      continue;
    }
    if (c == '(' || c == ')' || c == '=') {
      out.push_back({c == '(' ? Tok::LParen : c == ')' ? Tok::RParen : Tok::Eq, {}, 0});
      ++i;
      continue;
    }
    // Anything else is a word: consume up to the next space or symbol.
    size_t j = i + 1;
    while (j < s.size() && s[j] != ' ' && s[j] != '(' && s[j] != ')' && s[j] != '=') ++j;
    out.push_back({Tok::Word, {}, 0});
    i = j;
  }
  return out;
}

// Recursive-descent evaluation of toks[b, e); false if it is not a whole expression.
class Eval {
 public:
  Eval(const std::vector<Tok>& t, size_t b, size_t e) : t_(t), i_(b), e_(e) {}
  bool run(Rational* out) {
    try {
      if (!expr(out)) return false;
      return i_ == e_;
    } catch (const std::exception&) {
      return false;
    }
  }

 private:
  bool expr(Rational* v) { return chain(v, '+', '-', &Eval::term); }
  bool term(Rational* v) { return chain(v, '*', '/', &Eval::atom); }
  // operand (op1 | op2 operand)*, left to right; operands are parsed by `operand`.
  bool chain(Rational* v, char op1, char op2, bool (Eval::*operand)(Rational*)) {
    if (!(this->*operand)(v)) return false;
    while (i_ < e_ && t_[i_].kind == Tok::Op && (t_[i_].op == op1 || t_[i_].op == op2)) {
      const char op = t_[i_++].op;
      Rational r;
      if (!(this->*operand)(&r)) return false;
      *v = op == '+' ? *v + r : op == '-' ? *v - r : op == '*' ? *v * r : *v / r;
    }
    return true;
  }
  bool atom(Rational* v) {
    if (i_ >= e_) return false;
    if (t_[i_].kind == Tok::Num) {
      *v = t_[i_++].value;
      return true;
    }
    if (t_[i_].kind == Tok::LParen) {
      ++i_;
      if (!expr(v)) return false;
      if (i_ >= e_ || t_[i_].kind != Tok::RParen) return false;
      ++i_;
      return true;
    }
    return false;
  }
  const std::vector<Tok>& t_;
  size_t i_, e_;
};

bool expression_token(const Tok& t) {
  return t.kind == Tok::Num || t.kind == Tok::Op || t.kind == Tok::LParen || t.kind == Tok::RParen;
}

}  // namespace

bool verify_equations(std::string_view text, int* count, std::string* bad) {
  int n = 0;
  for (const auto line : split_lines(text)) {
    const auto toks = tokenize_line(line);
    for (size_t k = 0; k < toks.size(); ++k) {
      if (toks[k].kind != Tok::Eq) continue;
      size_t b = k;
      while (b > 0 && expression_token(toks[b - 1])) --b;
      size_t e = k + 1;
      while (e < toks.size() && expression_token(toks[e])) ++e;
      // The left side may carry unmatched text before it ("Step 2: (3 + 4"); drop leading
      // tokens until what is left parses.
      Rational lhs, rhs;
      bool left_ok = false;
      for (size_t s = b; s < k && !left_ok; ++s) left_ok = Eval(toks, s, k).run(&lhs);
      bool right_ok = false;
      for (size_t f = e; f > k + 1 && !right_ok; --f) right_ok = Eval(toks, k + 1, f).run(&rhs);
      if (!left_ok || !right_ok) continue;
      ++n;
      if (!(lhs == rhs)) {
        if (bad) *bad = std::string(line);
        if (count) *count = n;
        return false;
      }
    }
  }
  if (count) *count = n;
  return true;
}

}  // namespace dspark::data
