#include "csrc/scheduling/physical_streams.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "csrc/scheduling/issue_order.h"
#include "csrc/scheduling/stream_assignment.h"

namespace nimble::scheduling {

PhysicalSchedule fold_streams(const Dag& dag, const StreamAssignment& a, int max_streams) {
  if (max_streams < 1) {
    throw std::invalid_argument("max_streams must be >= 1, got " + std::to_string(max_streams));
  }
  if (static_cast<int>(a.logical_stream.size()) != dag.num_nodes) {
    throw std::invalid_argument("the stream assignment covers " +
                                std::to_string(a.logical_stream.size()) + " nodes, the DAG has " +
                                std::to_string(dag.num_nodes));
  }
  const int n = dag.num_nodes;
  PhysicalSchedule s;
  s.num_streams = std::max(1, std::min(max_streams, a.num_logical_streams));

  // The critical logical stream first (onto physical stream 0), then the longest logical
  // streams first, each onto the least loaded physical stream.
  std::vector<int> size(a.num_logical_streams, 0);
  for (int l : a.logical_stream) ++size[l];
  std::vector<int> order(a.num_logical_streams);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
    if ((x == a.critical_stream) != (y == a.critical_stream)) return x == a.critical_stream;
    return size[x] > size[y];
  });
  std::vector<int> physical_of(a.num_logical_streams, 0);
  std::vector<int> load(s.num_streams, 0);
  for (int l : order) {
    const int p = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    physical_of[l] = p;
    load[p] += size[l];
  }

  if (s.num_streams > 1) {
    s.order = critical_path_first_order(dag);
  } else {
    s.order.resize(n);
    std::iota(s.order.begin(), s.order.end(), 0);
  }
  std::vector<int> rank(n);
  for (int i = 0; i < n; ++i) rank[s.order[i]] = i;
  s.stream.resize(n);
  s.ops.assign(s.num_streams, {});
  for (int v = 0; v < n; ++v) s.stream[v] = physical_of[a.logical_stream[v]];
  for (int v : s.order) s.ops[s.stream[v]].push_back(v);

  // MEG edges carry all of the DAG's reachability, so honouring them honours every edge.
  // A wait is redundant when the stream already waited for a later op (in the issue order)
  // of the same source stream (streams run in that order).
  std::vector<std::vector<int>> preds(n);
  for (const auto& [u, v] : a.meg_edges) preds[v].push_back(u);
  for (int p = 0; p < s.num_streams; ++p) {
    std::vector<int> waited(s.num_streams, -1);  // the latest rank waited for, per stream
    for (int v : s.ops[p]) {
      auto& in = preds[v];
      std::sort(in.begin(), in.end(), [&](int x, int y) { return rank[x] > rank[y]; });
      for (int u : in) {
        const int q = s.stream[u];
        if (q == p || rank[u] <= waited[q]) continue;
        waited[q] = rank[u];
        s.syncs.emplace_back(u, v);
      }
    }
  }
  std::sort(s.syncs.begin(), s.syncs.end());
  return s;
}

int default_physical_streams(const StreamAssignment& a, int cores) {
  return std::max(1, std::min(std::max(1, cores), a.num_logical_streams));
}

}  // namespace nimble::scheduling
