#pragma once
// Folding logical streams onto a bounded pool of physical streams (CPU worker threads,
// CUDA streams). Every physical stream runs its ops in one global topological order (the
// issue order), so every wait points backwards in that order and no fold can deadlock.
#include <utility>
#include <vector>

#include "csrc/scheduling/dag.h"

namespace nimble::scheduling {

struct StreamAssignment;

struct PhysicalSchedule {
  int num_streams = 0;
  std::vector<int> stream;                 // per node, 0..num_streams-1
  std::vector<int> order;                  // the issue order: a topological order of the nodes
  std::vector<std::vector<int>> ops;       // per stream, its nodes in the issue order
  std::vector<std::pair<int, int>> syncs;  // node .second waits for node .first to finish
};

// max_streams >= 1. Throws std::invalid_argument otherwise or on a mismatched assignment.
// Physical stream 0 holds the assignment's critical logical stream (and whatever shares it).
// On several streams the issue order is critical_path_first_order (issue_order.h); on one,
// the nodes' own order, which the trace's results, memory reuse and a one-stream replay's
// recorded memory plan were made in: nothing runs beside anything, so no reorder pays.
PhysicalSchedule fold_streams(const Dag& dag, const StreamAssignment& assignment, int max_streams);

// The number of physical streams worth running: no more than the cores, nor than the
// logical streams (an upper bound of the DAG's width).
int default_physical_streams(const StreamAssignment& assignment, int cores);

}  // namespace nimble::scheduling
