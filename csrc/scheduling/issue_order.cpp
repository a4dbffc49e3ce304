#include "csrc/scheduling/issue_order.h"

#include <queue>
#include <stdexcept>
#include <string>
#include <utility>

namespace nimble::scheduling {

std::vector<int> critical_path_first_order(const Dag& dag) {
  const int n = dag.num_nodes;
  const auto next = successors(dag);
  const std::vector<int> length = remaining_path_lengths(dag);
  std::vector<int> waiting(n, 0);  // predecessors not yet issued
  for (int v = 0; v < n; ++v) {
    for (int w : next[v]) ++waiting[w];
  }
  // Largest remaining length first, then the smallest node.
  std::priority_queue<std::pair<int, int>> ready;
  for (int v = 0; v < n; ++v) {
    if (waiting[v] == 0) ready.emplace(length[v], -v);
  }
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    const int v = -ready.top().second;
    ready.pop();
    order.push_back(v);
    for (int w : next[v]) {
      if (--waiting[w] == 0) ready.emplace(length[w], -w);
    }
  }
  return order;
}

void validate_order(const Dag& dag, const std::vector<int>& order) {
  validate(dag);
  const int n = dag.num_nodes;
  if (static_cast<int>(order.size()) != n) {
    throw std::invalid_argument("an issue order of " + std::to_string(order.size()) +
                                " ops for a DAG of " + std::to_string(n));
  }
  std::vector<int> rank(n, -1);
  for (int i = 0; i < n; ++i) {
    const int v = order[i];
    if (v < 0 || v >= n || rank[v] >= 0) {
      throw std::invalid_argument("the issue order holds op " + std::to_string(v) +
                                  " twice or out of range");
    }
    rank[v] = i;
  }
  for (const auto& [from, to] : dag.edges) {
    if (rank[from] >= rank[to]) {
      throw std::invalid_argument("the issue order puts op " + std::to_string(to) + " before op " +
                                  std::to_string(from) + ", which it depends on");
    }
  }
}

}  // namespace nimble::scheduling
