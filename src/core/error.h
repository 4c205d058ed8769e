// Error: the one exception type dspark throws for bad input; messages name the file, field or tensor.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace dspark {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Builds the message from its parts with operator<< and throws Error.
template <class... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<Parts>(parts));
  throw Error(os.str());
}

#define DSPARK_CHECK(cond, ...)           \
  do {                                    \
    if (!(cond)) ::dspark::fail(__VA_ARGS__); \
  } while (0)

}  // namespace dspark
