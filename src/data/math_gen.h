// Math word problems with worked, step-by-step solutions, generated from templates.
//
// Every problem is computed twice: once step by step (the steps are what the solution text
// shows) and once from a closed form of the template's parameters; a problem whose two answers
// differ, whose printed numbers are not exact, or whose printed equations do not hold is never
// emitted. The solution ends with a line "Answer: <number>".
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/exact_math.h"

namespace dspark::data {

struct MathProblem {
  std::string kind;                                      // template name, e.g. "shopping_change"
  std::vector<std::pair<std::string, Rational>> params;  // the numbers the template chose
  std::string question;                                  // the word problem
  std::string solution;                                  // worked steps, last line "Answer: <x>"
  Rational answer;
  std::string answer_text;  // what follows "Answer: "
  // The whole document: "Question: ...\n\nSolution:\n..." (ends with the Answer line).
  std::string text() const;
  Rational param(const std::string& name) const;  // throws std::out_of_range if absent
};

// Deterministic in `seed`: the same seed gives the same problem on every machine.
MathProblem generate_math_problem(uint64_t seed);
// The template names, in the order the generator cycles through them.
const std::vector<std::string>& math_problem_kinds();

}  // namespace dspark::data
