// Math word problems with worked, step-by-step solutions, generated from templates.
//
// Every problem is computed twice: once step by step (the steps are what the solution text
// shows) and once from a closed form of the template's parameters; a problem whose two answers
// differ, whose printed numbers are not exact, or whose printed equations do not hold is never
// emitted. The solution ends with a line "Answer: <number>".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dspark::data {

// An exact fraction n/d (d > 0, lowest terms). Arithmetic throws std::overflow_error on int64
// overflow and std::domain_error on division by zero.
struct Rational {
  int64_t n = 0, d = 1;
  Rational() = default;
  Rational(int64_t v) : n(v) {}  // NOLINT: integers convert implicitly
  Rational(int64_t num, int64_t den);
  static Rational cents(int64_t c) { return Rational(c, 100); }
  bool is_integer() const { return d == 1; }
  double to_double() const { return double(n) / double(d); }
  friend Rational operator+(Rational a, Rational b);
  friend Rational operator-(Rational a, Rational b);
  friend Rational operator*(Rational a, Rational b);
  friend Rational operator/(Rational a, Rational b);
  friend bool operator==(Rational a, Rational b) { return a.n == b.n && a.d == b.d; }
  friend bool operator<(Rational a, Rational b);
  friend bool operator<=(Rational a, Rational b) { return !(b < a); }
  friend bool operator>(Rational a, Rational b) { return b < a; }
  friend bool operator>=(Rational a, Rational b) { return !(a < b); }
};
// "12", "12.5", "7/12": a decimal when it terminates within 6 places, else a fraction.
std::string to_string(Rational r);
// Parses "12", "-3", "12.50", "$4.25", "1,250", "7/12"; false if it is not a number.
bool parse_rational(std::string_view s, Rational* out);

struct MathProblem {
  std::string kind;                                     // template name, e.g. "shopping_change"
  std::vector<std::pair<std::string, Rational>> params;  // the numbers the template chose
  std::string question;                                 // the word problem
  std::string solution;                                 // worked steps, last line "Answer: <x>"
  Rational answer;
  std::string answer_text;                              // what follows "Answer: "
  // The whole document: "Question: ...\n\nSolution:\n..." (ends with the Answer line).
  std::string text() const;
  Rational param(const std::string& name) const;        // throws std::out_of_range if absent
};

// Deterministic in `seed`: the same seed gives the same problem on every machine.
MathProblem generate_math_problem(uint64_t seed);
// The template names, in the order the generator cycles through them.
const std::vector<std::string>& math_problem_kinds();

// Checks every equation "a op b ... = c" in a text (ops + - × ÷, fractions a/b, $ signs,
// parentheses); returns false (and the first bad line in *bad) if one does not hold. *count
// receives the number of equations checked.
bool verify_equations(std::string_view text, int* count, std::string* bad = nullptr);

}  // namespace dspark::data
