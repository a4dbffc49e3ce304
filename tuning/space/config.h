#pragma once
// A configuration is one index per knob into that knob's value list, so that configs of a
// space are compact, hashable and comparable whatever the knob kinds are.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace nimble::tuning {

using Config = std::vector<int>;

struct ConfigHash {
  size_t operator()(const Config& config) const noexcept {
    uint64_t h = 1469598103934665603ULL;  // FNV-1a over the indices
    for (const int v : config) {
      h ^= static_cast<uint64_t>(static_cast<uint32_t>(v));
      h *= 1099511628211ULL;
    }
    return static_cast<size_t>(h);
  }
};

// "[1,0,3]": the form used by the database and JSON lines.
std::string config_to_json(const Config& config);
Config config_from_json(const std::string& text);

}  // namespace nimble::tuning
