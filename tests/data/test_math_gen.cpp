// The math generator: answers recomputed independently of the generator, every printed
// equation re-evaluated by a parser written here, determinism and template coverage.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <map>
#include <numeric>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "data/math_gen.h"

namespace dspark::data {
namespace {

// A fraction type of this test's own (the generator's Rational is not used to check it).
struct Q {
  long long n = 0, d = 1;
  Q() = default;
  Q(long long v) : n(v) {}  // NOLINT
  Q(long long a, long long b) {
    if (b < 0) a = -a, b = -b;
    const long long g = std::gcd(a < 0 ? -a : a, b);
    n = a / g;
    d = b / g;
  }
  friend Q operator+(Q a, Q b) { return Q(a.n * b.d + b.n * a.d, a.d * b.d); }
  friend Q operator-(Q a, Q b) { return Q(a.n * b.d - b.n * a.d, a.d * b.d); }
  friend Q operator*(Q a, Q b) { return Q(a.n * b.n, a.d * b.d); }
  friend Q operator/(Q a, Q b) { return Q(a.n * b.d, a.d * b.n); }
  friend bool operator==(Q a, Q b) { return a.n == b.n && a.d == b.d; }
  friend bool operator<(Q a, Q b) { return a.n * b.d < b.n * a.d; }
};

std::string str(Q q) { return std::to_string(q.n) + (q.d == 1 ? "" : "/" + std::to_string(q.d)); }

// "12", "12.50", "$4.25", "7/12".
Q parse_q(std::string s) {
  if (!s.empty() && s[0] == '$') s.erase(0, 1);
  const size_t slash = s.find('/');
  if (slash != std::string::npos) return Q(std::stoll(s.substr(0, slash)), std::stoll(s.substr(slash + 1)));
  const size_t dot = s.find('.');
  if (dot == std::string::npos) return Q(std::stoll(s));
  long long scale = 1;
  for (size_t i = dot + 1; i < s.size(); ++i) scale *= 10;
  return Q(std::stoll(s.substr(0, dot) + s.substr(dot + 1)), scale);
}

Q P(const MathProblem& p, const std::string& name) {
  const Rational r = p.param(name);
  return Q(r.n, r.d);
}

// Independent solutions from the template parameters: closed forms, or brute force where the
// problem is an equation to solve.
Q expected(const MathProblem& p) {
  const auto& k = p.kind;
  const auto v = [&](const char* n) { return P(p, n); };
  if (k == "add_sub") return v("start") - v("give") + v("more");
  if (k == "groups") return v("boxes") * v("per_box") - v("given_away");
  if (k == "sharing") return (v("total") - v("kept")) / v("friends");
  if (k == "shopping_change") return v("paid") - v("qty1") * v("price1") - v("qty2") * v("price2");
  if (k == "discount") return v("price") * (Q(100) - v("percent_off")) / Q(100);
  if (k == "tax_total") return v("qty") * v("price") + v("qty") * v("price") * v("tax_percent") / Q(100);
  if (k == "unit_rate") return v("cost1") * v("qty2") / v("qty1");
  if (k == "distance") return v("speed") * v("hours") + v("extra_km");
  if (k == "average_speed")
    return (v("speed1") * v("hours1") + v("speed2") * v("hours2")) / (v("hours1") + v("hours2"));
  if (k == "travel_time") return v("distance") * Q(60) / v("speed");
  if (k == "work_rate") return v("total") / (v("rate1") + v("rate2"));
  if (k == "percent_of") return v("total") - v("total") * v("percent") / Q(100);
  if (k == "percent_change") return (v("after") - v("before")) * Q(100) / v("before");
  if (k == "ages_multiple") {
    for (long long b = 0; b < 1000; ++b)
      if (v("times") * Q(b) + Q(b) + Q(2) * v("years") == v("sum_later")) return Q(b);
    return Q(-1);
  }
  if (k == "ages_difference") {
    for (long long c = 0; c < 1000; ++c)
      if (Q(c) + v("difference") + v("years") == Q(2) * (Q(c) + v("years"))) return Q(c) + v("difference");
    return Q(-1);
  }
  if (k == "fraction_add") return Q(1) - v("num1") / v("den1") - v("num2") / v("den2");
  if (k == "fraction_of") return v("total") - v("total") * v("num") / v("den");
  if (k == "average") {
    Q s = 0;
    int n = 0;
    for (const auto& [name, r] : p.params) {
      s = s + Q(r.n, r.d);
      ++n;
    }
    return s / Q(n);
  }
  if (k == "fence") return Q(2) * (v("length") + v("width")) * v("cost_per_m");
  if (k == "carpet") return v("length") * v("width") * v("price_per_m2");
  if (k == "ratio") return v("total") * v("ratio_b") / (v("ratio_a") + v("ratio_b"));
  if (k == "interest") return v("principal") + v("principal") * v("rate_percent") * v("years") / Q(100);
  if (k == "consecutive") {
    for (long long n = 0; n < 100000; ++n)
      if (Q(3 * n + 3) == v("sum")) return Q(n + 2);
    return Q(-1);
  }
  if (k == "time_convert") return v("hours") * Q(60) + v("minutes") + v("break_minutes");
  if (k == "savings") {
    for (long long w = 0; w < 10000; ++w)
      if (v("saved") + v("weekly") * Q(w) == v("price")) return Q(w);
    return Q(-1);
  }
  if (k == "bakery") return (v("trays") * v("per_tray") - v("unsold")) * v("price");
  ADD_FAILURE() << "no independent solution for template " << k;
  return Q(-999);
}

// Evaluates "a op b op c" (+ - × ÷ with the usual precedence) from the tokens of a match.
Q eval_expr(const std::string& expr) {
  static const std::regex tok(R"((\$?\d+(?:\.\d+)?(?:/\d+)?)|(\+|-|×|÷))");
  std::vector<Q> vals;
  std::vector<std::string> ops;
  for (auto it = std::sregex_iterator(expr.begin(), expr.end(), tok); it != std::sregex_iterator(); ++it) {
    if ((*it)[1].matched) vals.push_back(parse_q((*it)[1].str()));
    else ops.push_back((*it)[2].str());
  }
  // × and ÷ first, then + and - left to right.
  std::vector<Q> v2 = {vals[0]};
  std::vector<std::string> o2;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i] == "×") v2.back() = v2.back() * vals[i + 1];
    else if (ops[i] == "÷") v2.back() = v2.back() / vals[i + 1];
    else {
      o2.push_back(ops[i]);
      v2.push_back(vals[i + 1]);
    }
  }
  Q r = v2[0];
  for (size_t i = 0; i < o2.size(); ++i) r = o2[i] == "+" ? r + v2[i + 1] : r - v2[i + 1];
  return r;
}

struct Checked {
  int equations = 0;
  bool all_true = true;
  std::string bad;
  Q last_result;
};

// Every "expr = number" in the solution; each line holding " = " must contain one.
Checked check_solution(const std::string& solution) {
  static const std::regex eq(
      R"((\$?\d+(?:\.\d+)?(?:/\d+)?(?:\s*(?:\+|-|×|÷)\s*\$?\d+(?:\.\d+)?(?:/\d+)?)*)\s*=\s*(\$?\d+(?:\.\d+)?(?:/\d+)?))");
  Checked c;
  std::stringstream ss(solution);
  for (std::string line; std::getline(ss, line);) {
    int found = 0;
    for (auto it = std::sregex_iterator(line.begin(), line.end(), eq); it != std::sregex_iterator(); ++it) {
      ++found;
      ++c.equations;
      const Q lhs = eval_expr((*it)[1].str()), rhs = parse_q((*it)[2].str());
      c.last_result = rhs;
      if (!(lhs == rhs)) {
        c.all_true = false;
        c.bad = line;
      }
    }
    if (line.find(" = ") != std::string::npos && found == 0) {
      c.all_true = false;
      c.bad = "unparsed equation: " + line;
    }
  }
  return c;
}

std::string answer_line(const std::string& solution) {
  const size_t at = solution.rfind("\nAnswer: ");
  return at == std::string::npos ? "" : solution.substr(at + 9);
}

constexpr int kSeeds = 3000;

TEST(MathGen, AnswersMatchIndependentRecomputation) {
  for (uint64_t seed = 0; seed < kSeeds; ++seed) {
    const MathProblem p = generate_math_problem(seed * 7919 + 13);
    const std::string ans = answer_line(p.solution);
    ASSERT_FALSE(ans.empty()) << "no Answer line:\n" << p.text();
    ASSERT_EQ(ans, p.answer_text);
    EXPECT_TRUE(std::regex_match(ans, std::regex(R"(\d+(\.\d+)?(/\d+)?)"))) << ans;
    const Q want = expected(p);
    EXPECT_EQ(str(parse_q(ans)), str(want)) << p.kind << ":\n" << p.text();
  }
}

TEST(MathGen, WorkedStepsAreArithmeticallyTrue) {
  for (uint64_t seed = 0; seed < kSeeds; ++seed) {
    const MathProblem p = generate_math_problem(seed);
    const Checked c = check_solution(p.solution);
    EXPECT_TRUE(c.all_true) << p.kind << ": " << c.bad << "\n" << p.text();
    EXPECT_GE(c.equations, 1) << p.text();
    // The answer is the result of the last step.
    EXPECT_EQ(str(c.last_result), str(parse_q(answer_line(p.solution)))) << p.text();
    // The library's own checker agrees.
    int n = 0;
    EXPECT_TRUE(verify_equations(p.solution, &n)) << p.text();
    EXPECT_EQ(n, c.equations) << p.text();
  }
}

TEST(MathGen, ParametersAppearInTheQuestion) {
  const auto dec = [](const Rational& r) {
    if (r.d == 1) return std::to_string(r.n);
    // Shortest terminating decimal.
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6f", double(r.n) / double(r.d));
    std::string s = buf;
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
    return s;
  };
  for (uint64_t seed = 0; seed < 500; ++seed) {
    const MathProblem p = generate_math_problem(seed);
    for (const auto& [name, r] : p.params) {
      if (name.find("hidden") != std::string::npos || r.n == 0) continue;
      EXPECT_NE(p.question.find(dec(r)), std::string::npos) << p.kind << " " << name << "=" << dec(r) << "\n" << p.question;
    }
  }
}

TEST(MathGen, CoversEveryTemplate) {
  std::set<std::string> seen;
  for (uint64_t seed = 0; seed < kSeeds; ++seed) seen.insert(generate_math_problem(seed).kind);
  EXPECT_EQ(seen.size(), math_problem_kinds().size());
  EXPECT_GE(seen.size(), 20u);
}

TEST(MathGen, DeterministicInTheSeed) {
  std::set<std::string> texts;
  for (uint64_t seed = 100; seed < 300; ++seed) {
    const std::string a = generate_math_problem(seed).text();
    EXPECT_EQ(a, generate_math_problem(seed).text());
    texts.insert(a);
  }
  EXPECT_GT(texts.size(), 190u);  // different seeds give (almost always) different problems
}

TEST(MathGen, CheckersCatchWrongArithmetic) {
  // Both this test's checker and the library's fail on a corrupted step.
  const MathProblem p = generate_math_problem(42);
  std::string broken = p.solution;
  const size_t eq = broken.find(" = ");
  ASSERT_NE(eq, std::string::npos);
  size_t digit = eq + 3;
  while (digit < broken.size() && !(broken[digit] >= '0' && broken[digit] <= '9')) ++digit;
  broken[digit] = broken[digit] == '9' ? '1' : char(broken[digit] + 1);
  EXPECT_FALSE(check_solution(broken).all_true) << broken;
  int n = 0;
  std::string bad;
  EXPECT_FALSE(verify_equations(broken, &n, &bad));
  EXPECT_FALSE(bad.empty());
  EXPECT_TRUE(verify_equations("Total: 3 × $1.25 + 2 = $5.75.\n1/4 + 1/3 = 7/12\n(2 + 3) × 4 = 20", &n));
  EXPECT_EQ(n, 3);
  EXPECT_FALSE(verify_equations("Left: 1 - 1/3 = 1/3", &n));
}

TEST(MathGen, RationalFormatting) {
  EXPECT_EQ(to_string(Rational(7, 12)), "7/12");
  EXPECT_EQ(to_string(Rational(5, 2)), "2.5");
  EXPECT_EQ(to_string(Rational(-3)), "-3");
  Rational r;
  ASSERT_TRUE(parse_rational("$12.50", &r));
  EXPECT_EQ(r, Rational(25, 2));
  ASSERT_TRUE(parse_rational("7/12", &r));
  EXPECT_EQ(r, Rational(7, 12));
  EXPECT_FALSE(parse_rational("12a", &r));
  EXPECT_FALSE(parse_rational("", &r));
}

}  // namespace
}  // namespace dspark::data
