// Args: every integer and number flag is parsed once, range-checked, and refused naming the flag.
#include <gtest/gtest.h>

#include "../error_of.h"

#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/flags.h"

namespace dspark {
namespace {

Args parsed(std::vector<std::string> words) {
  Args a;
  a.flag("n", "an integer", true, "3").flag("x", "a number", true, "0.5").flag("list", "a list", true, "1,2").flag("on", "a switch", false);
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  a.parse(int(argv.size()), argv.data());
  return a;
}

using dspark::testing::error_of;

TEST(Args, IntegersAreRangeCheckedNeverNarrowed) {
  EXPECT_EQ(parsed({}).integer("n", 0, 10), 3);
  EXPECT_EQ(parsed({"--n", "-7"}).integer("n", -10, 10), -7);
  EXPECT_EQ(parsed({"--n=2147483647"}).integer("n", 0, kFlagIntMax), kFlagIntMax);
  struct Case {
    std::string value, fragment;
  };
  for (const Case& c : std::vector<Case>{{"4294967304", "must be from 0 to 2147483647, got 4294967304"},
                                         {"2147483648", "must be from 0 to 2147483647, got 2147483648"},
                                         {"-1", "must be from 0 to 2147483647, got -1"},
                                         {"99999999999999999999", "expects an integer from 0 to 2147483647"},
                                         {"12abc", "expects an integer"},
                                         {"", "expects an integer"},
                                         {" 5", "expects an integer"},
                                         {"1.5", "expects an integer"}}) {
    const std::string msg = error_of([&] { parsed({"--n", c.value}).integer("n", 0, kFlagIntMax); });
    EXPECT_NE(msg.find("flag --n"), std::string::npos) << c.value << " -> " << msg;
    EXPECT_NE(msg.find(c.fragment), std::string::npos) << c.value << " -> " << msg;
  }
}

TEST(Args, NumbersAreFiniteAndInRange) {
  EXPECT_DOUBLE_EQ(parsed({"--x", "1e-3"}).number("x", 0, 1), 1e-3);
  for (const std::string v : {"nan", "inf", "-inf", "1e999", "abc", ""}) {
    const std::string msg = error_of([&] { parsed({"--x", v}).number("x", 0, 1); });
    EXPECT_NE(msg.find("flag --x expects a finite number"), std::string::npos) << v << " -> " << msg;
  }
  EXPECT_NE(error_of([&] { parsed({"--x", "1.5"}).number("x", 0, 1); }).find("flag --x must be from 0 to 1, got 1.5"),
            std::string::npos);
}

TEST(Args, IntegerListsCheckEveryItem) {
  EXPECT_EQ(parsed({"--list", "4,16,1"}).int_list("list", 1, 16), (std::vector<int>{4, 16, 1}));
  EXPECT_EQ(parsed({"--list", "-1"}).int_list("list", -1, 16), (std::vector<int>{-1}));
  for (const std::string v : {"1,,2", "1,", "", "0", "17", "1,4294967297", "a"}) {
    const std::string msg = error_of([&] { parsed({"--list", v}).int_list("list", 1, 16); });
    EXPECT_NE(msg.find("flag --list expects integers from 1 to 16"), std::string::npos) << v << " -> " << msg;
  }
}

TEST(Args, UnknownFlagsAndMissingValuesNameTheFlag) {
  EXPECT_NE(error_of([] { parsed({"--bogus", "1"}); }).find("unknown flag --bogus"), std::string::npos);
  EXPECT_NE(error_of([] { parsed({"--n"}); }).find("flag --n needs a value"), std::string::npos);
  EXPECT_NE(error_of([] { parsed({"--on=1"}); }).find("flag --on takes no value"), std::string::npos);
}

}  // namespace
}  // namespace dspark
