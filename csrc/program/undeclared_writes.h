#pragma once
// Ops whose schemas do not declare every argument they write: batch norms in training update
// their running statistics without an alias annotation (and without moving the tensors'
// version counters). Whatever must know what a run writes (the runtime's state snapshot, the
// capture's copy-on-write model snapshot) takes these arguments as written too.
#include <cstddef>
#include <string>
#include <unordered_map>
#include <vector>

namespace nimble {

// Operator name (`aten::native_batch_norm`) -> the positions of the arguments it writes
// undeclared.
inline const std::unordered_map<std::string, std::vector<size_t>>& undeclared_writes() {
  static const std::unordered_map<std::string, std::vector<size_t>> ops = {
      {"aten::native_batch_norm", {3, 4}},
      {"aten::cudnn_batch_norm", {3, 4}},
      {"aten::miopen_batch_norm", {3, 4}},
      {"aten::batch_norm_update_stats", {1, 2}},
  };
  return ops;
}

}  // namespace nimble
