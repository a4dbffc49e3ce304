#pragma once
// Nimble's stream assignment: transitive reduction (MEG), a bipartite graph with an edge
// x_u -> y_v per MEG edge, a maximum matching, chains of matched edges as logical
// streams, one event per unmatched MEG edge. Guarantees: two ops with no path between
// them are on different logical streams (maximum logical concurrency), and the number of
// cross-stream syncs, |E_MEG| - |M|, is the minimum for that.
#include <utility>
#include <vector>

#include "csrc/scheduling/dag.h"
#include "csrc/scheduling/physical_streams.h"

namespace nimble::scheduling {

struct StreamAssignment {
  std::vector<std::pair<int, int>> meg_edges;  // transitive reduction
  std::vector<int> logical_stream;             // per node, 0..num_logical_streams-1
  int num_logical_streams = 0;
  std::vector<std::pair<int, int>>
      logical_syncs;  // unmatched MEG edges: record after .first, wait before .second
  // The logical stream holding most of the DAG's critical path (dag.h), -1 for no nodes.
  // The matching starts from the path's edges, so that the path runs as one chain where a
  // maximum matching allows: each branch point then continues along its longest branch.
  int critical_stream = -1;
};

// Throws std::invalid_argument on a bad DAG.
StreamAssignment assign_streams(const Dag& dag);

}  // namespace nimble::scheduling
