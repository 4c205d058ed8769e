// Error: the one exception type dspark throws for bad input; messages name the file, field or tensor.
// An error about a request also says what kind of refusal it is and which request field is at
// fault, so that the server answers it (HTTP status, OpenAI error object) without reading the
// message.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace dspark {

enum class ErrorKind {
  InvalidRequest,         // the input is wrong: a field's value, a file, a flag (the default)
  ContextLengthExceeded,  // the prompt, or the prompt and max_tokens, do not fit the context
  NotFound,               // what a request names is not here (a model this server does not serve)
  Unavailable,            // the engine is shutting down and takes no more requests
};

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, ErrorKind kind = ErrorKind::InvalidRequest,
                 std::string param = "")
      : std::runtime_error(message), kind_(kind), param_(std::move(param)) {}

  ErrorKind kind() const { return kind_; }
  // The request field at fault ("prompt", "max_tokens", "temperature", ...); empty: none.
  const std::string& param() const { return param_; }

 private:
  ErrorKind kind_;
  std::string param_;
};

namespace error_detail {
template <class... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<Parts>(parts));
  return os.str();
}
}  // namespace error_detail

// Builds the message from its parts with operator<< and throws Error.
template <class... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  throw Error(error_detail::concat(std::forward<Parts>(parts)...));
}

// fail() for a request: the kind and the field at fault travel with the message.
template <class... Parts>
[[noreturn]] void fail_request(ErrorKind kind, std::string param, Parts&&... parts) {
  throw Error(error_detail::concat(std::forward<Parts>(parts)...), kind, std::move(param));
}

#define DSPARK_CHECK(cond, ...)           \
  do {                                    \
    if (!(cond)) ::dspark::fail(__VA_ARGS__); \
  } while (0)

}  // namespace dspark
