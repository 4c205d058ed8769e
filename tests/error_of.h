// error_of: the message of the dspark::Error that f throws, or "" when it throws none.
#pragma once

#include <functional>
#include <string>

#include "core/error.h"

namespace dspark::testing {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace dspark::testing
