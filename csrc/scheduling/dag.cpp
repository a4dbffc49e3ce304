#include "csrc/scheduling/dag.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace nimble::scheduling {

void validate(const Dag& dag) {
  if (dag.num_nodes < 0) {
    throw std::invalid_argument("a DAG needs num_nodes >= 0, got " + std::to_string(dag.num_nodes));
  }
  for (size_t i = 0; i < dag.edges.size(); ++i) {
    const auto [from, to] = dag.edges[i];
    if (from < 0 || to < 0 || from >= dag.num_nodes || to >= dag.num_nodes || from >= to) {
      throw std::invalid_argument("edge " + std::to_string(i) + " is (" + std::to_string(from) +
                                  ", " + std::to_string(to) + "); expected 0 <= from < to < " +
                                  std::to_string(dag.num_nodes) +
                                  " (nodes numbered in topological order)");
    }
  }
}

std::vector<std::vector<int>> successors(const Dag& dag) {
  std::vector<std::vector<int>> next(dag.num_nodes);
  for (const auto& [from, to] : dag.edges) next[from].push_back(to);
  for (auto& list : next) {
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
  }
  return next;
}

int widest_level(const Dag& dag) {
  std::vector<int> level(dag.num_nodes, 0);
  std::vector<std::pair<int, int>> edges = dag.edges;
  std::sort(edges.begin(), edges.end());  // by source: sources' levels are final first
  for (const auto& [from, to] : edges) level[to] = std::max(level[to], level[from] + 1);
  std::vector<int> count(dag.num_nodes, 0);
  int widest = 0;
  for (int l : level) widest = std::max(widest, ++count[l]);
  return widest;
}

std::vector<int> remaining_path_lengths(const Dag& dag) {
  const auto next = successors(dag);
  // Computed backwards: edges go forward in the numbering.
  std::vector<int> length(dag.num_nodes, 1);
  for (int v = dag.num_nodes - 1; v >= 0; --v) {
    for (int w : next[v]) length[v] = std::max(length[v], length[w] + 1);
  }
  return length;
}

std::vector<int> critical_path(const Dag& dag) {
  const auto next = successors(dag);
  const std::vector<int> length = remaining_path_lengths(dag);
  std::vector<int> path;
  if (dag.num_nodes == 0) return path;
  int v = static_cast<int>(std::max_element(length.begin(), length.end()) - length.begin());
  path.push_back(v);
  while (length[v] > 1) {
    // Successors are ascending: the smallest one the longest path continues at.
    v = *std::find_if(next[v].begin(), next[v].end(),
                      [&](int w) { return length[w] == length[v] - 1; });
    path.push_back(v);
  }
  return path;
}

}  // namespace nimble::scheduling
