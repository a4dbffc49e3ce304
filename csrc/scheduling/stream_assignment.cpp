#include "csrc/scheduling/stream_assignment.h"

#include <algorithm>

#include "csrc/scheduling/bipartite_matching.h"
#include "csrc/scheduling/transitive_reduction.h"

namespace nimble::scheduling {

StreamAssignment assign_streams(const Dag& dag) {
  StreamAssignment a;
  a.meg_edges = transitive_reduction(dag);  // validates the DAG
  const int n = dag.num_nodes;
  // Every edge of a longest path is in the reduction (a detour would make the path longer).
  const std::vector<int> path = critical_path(dag);
  std::vector<std::pair<int, int>> path_edges;
  for (size_t i = 1; i < path.size(); ++i) path_edges.emplace_back(path[i - 1], path[i]);
  const std::vector<int> next = maximum_bipartite_matching(n, n, a.meg_edges, path_edges);
  std::vector<bool> has_prev(n, false);
  for (int u = 0; u < n; ++u) {
    if (next[u] >= 0) has_prev[next[u]] = true;
  }
  // Chains start where no matched edge comes in; numbering them by their first node keeps
  // stream ids stable and in topological order.
  a.logical_stream.assign(n, -1);
  for (int u = 0; u < n; ++u) {
    if (has_prev[u]) continue;
    for (int v = u; v >= 0; v = next[v]) a.logical_stream[v] = a.num_logical_streams;
    ++a.num_logical_streams;
  }
  for (const auto& [u, v] : a.meg_edges) {
    if (next[u] != v) a.logical_syncs.emplace_back(u, v);
  }
  std::vector<int> on_path(a.num_logical_streams, 0);
  for (int v : path) ++on_path[a.logical_stream[v]];
  if (!path.empty())
    a.critical_stream =
        static_cast<int>(std::max_element(on_path.begin(), on_path.end()) - on_path.begin());
  return a;
}

}  // namespace nimble::scheduling
