// Monotonic wall-clock helpers.
#pragma once

#include <chrono>

namespace dspark {

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace dspark
