#pragma once
// Nanoseconds on the steady clock: what the CPU backends time their ops with.
#include <chrono>
#include <cstdint>

namespace nimble {

inline int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace nimble
