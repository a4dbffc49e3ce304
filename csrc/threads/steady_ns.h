#pragma once
// The steady clock: what the CPU backends time their ops with, and the tuner its candidates.
#include <chrono>
#include <cstdint>

namespace nimble {

inline int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace nimble
