#include "csrc/scheduling/transitive_reduction.h"

#include <algorithm>

namespace nimble::scheduling {

Reachability::Reachability(const Dag& dag) : n_(dag.num_nodes), words_((dag.num_nodes + 63) / 64) {
  validate(dag);
  rows_.assign(static_cast<size_t>(n_) * words_, 0);
  const auto next = successors(dag);
  // Reverse topological order: a node's row is the union of its successors' rows.
  for (int u = n_ - 1; u >= 0; --u) {
    uint64_t* row = &rows_[static_cast<size_t>(u) * words_];
    for (int v : next[u]) {
      const uint64_t* sub = &rows_[static_cast<size_t>(v) * words_];
      // Rows of later nodes only have bits above their index.
      for (size_t w = static_cast<size_t>(v) / 64; w < words_; ++w) row[w] |= sub[w];
      row[v / 64] |= uint64_t{1} << (v % 64);
    }
  }
}

std::vector<std::pair<int, int>> transitive_reduction(const Dag& dag) {
  const Reachability reach(dag);
  const auto next = successors(dag);
  std::vector<std::pair<int, int>> meg;
  std::vector<uint64_t> covered(reach.words_);
  for (int u = 0; u < dag.num_nodes; ++u) {
    // A successor is redundant when an earlier (smaller) successor reaches it; later
    // successors cannot reach it, as every edge points forward.
    std::fill(covered.begin(), covered.end(), 0);
    for (int v : next[u]) {
      if ((covered[v / 64] >> (v % 64)) & 1u) continue;
      meg.emplace_back(u, v);
      const uint64_t* sub = &reach.rows_[static_cast<size_t>(v) * reach.words_];
      for (size_t w = static_cast<size_t>(v) / 64; w < reach.words_; ++w) covered[w] |= sub[w];
    }
  }
  return meg;
}

}  // namespace nimble::scheduling
