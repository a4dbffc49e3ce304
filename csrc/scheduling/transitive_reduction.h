#pragma once
// Minimum equivalent graph of a DAG: the unique smallest edge set with the same
// reachability (for a DAG, its transitive reduction).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "csrc/scheduling/dag.h"

namespace nimble::scheduling {

// Reachability as one bit row per node (bit v of row u: a path u -> v of length >= 1).
class Reachability {
 public:
  explicit Reachability(const Dag& dag);
  bool reaches(int from, int to) const {
    return (rows_[static_cast<size_t>(from) * words_ + to / 64] >> (to % 64)) & 1u;
  }
  int num_nodes() const { return n_; }

 private:
  int n_ = 0;
  size_t words_ = 0;
  std::vector<uint64_t> rows_;
  friend std::vector<std::pair<int, int>> transitive_reduction(const Dag& dag);
};

std::vector<std::pair<int, int>> transitive_reduction(const Dag& dag);

}  // namespace nimble::scheduling
