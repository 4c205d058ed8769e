// Stop strings (runtime/request.h, StopStringFilter): text is cut before the earliest stop, even
// across streamed pieces, and only what could begin a stop is held back.
#include <gtest/gtest.h>

#include <string>

#include "runtime/request.h"

namespace dspark {
namespace {

TEST(StopStrings, CutBeforeTheFirstStopAcrossPieces) {
  StopStringFilter f({"</end>", "STOP"});
  std::string out;
  for (const char* piece : {"Hello ", "wor", "ld</", "en", "d> more"}) out += f.push(piece);
  EXPECT_TRUE(f.stopped());
  EXPECT_EQ(out, "Hello world");
  EXPECT_EQ(f.matched(), "</end>");  // vLLM's stop_reason
  EXPECT_EQ(f.flush(), "");
}

TEST(StopStrings, TheEarliestStopInTheTextIsTheOneMatched) {
  StopStringFilter f({"later", "soon"});
  EXPECT_EQ(f.matched(), "");
  EXPECT_EQ(f.push("one soon, later"), "one ");
  EXPECT_EQ(f.matched(), "soon");
}

TEST(StopStrings, HoldsBackOnlyWhatCouldStartAStop) {
  StopStringFilter f({"abc"});
  EXPECT_EQ(f.push("xxxxa"), "xxx");  // "xa" might begin "abc"... only "a" needs holding
  EXPECT_FALSE(f.stopped());
  std::string rest = f.push("bd");
  EXPECT_FALSE(f.stopped());
  rest += f.flush();
  EXPECT_EQ("xxx" + rest, "xxxxabd");
}

TEST(StopStrings, NeverSplitsUtf8) {
  StopStringFilter f({"zz"});
  std::string a = f.push("\xc3\xa9\xc3\xa9");  // "éé"
  std::string b = f.flush();
  // One byte is held back for a possible "zz"; the cut moves back to a character boundary.
  EXPECT_EQ(a, "\xc3\xa9");
  EXPECT_EQ(b, "\xc3\xa9");
}

}  // namespace
}  // namespace dspark
