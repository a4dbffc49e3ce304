#include "csrc/scheduling/stream_assignment.h"

#include "csrc/scheduling/bipartite_matching.h"
#include "csrc/scheduling/transitive_reduction.h"

namespace nimble::scheduling {

StreamAssignment assign_streams(const Dag& dag) {
  StreamAssignment a;
  a.meg_edges = transitive_reduction(dag);  // validates the DAG
  const int n = dag.num_nodes;
  const std::vector<int> next = maximum_bipartite_matching(n, n, a.meg_edges);
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
  return a;
}

}  // namespace nimble::scheduling
