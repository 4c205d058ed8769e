// Exact numbers for the math generator: rational arithmetic that throws instead of overflowing,
// printing and parsing as a solution writes them, and a checker for the equations in a text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

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

// Decimal digits after the point if r terminates within max_places, else -1.
int decimal_places(Rational r, int max_places);
// r with exactly `places` digits after the point; exact when places >= decimal_places(r, places).
std::string decimal_string(Rational r, int places);

// Checks every equation "a op b ... = c" in a text (ops + - × ÷, fractions a/b, $ signs,
// parentheses); returns false (and the first bad line in *bad) if one does not hold. *count
// receives the number of equations checked.
bool verify_equations(std::string_view text, int* count, std::string* bad = nullptr);

}  // namespace dspark::data
