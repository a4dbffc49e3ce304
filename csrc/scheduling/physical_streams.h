#pragma once
// Folding logical streams onto a bounded pool of physical streams (CPU worker threads,
// CUDA streams). Every physical stream runs its ops in the global topological order, so
// every wait points backwards in that order and no fold can deadlock.
#include <utility>
#include <vector>

#include "csrc/scheduling/dag.h"

namespace nimble::scheduling {

struct StreamAssignment;

struct PhysicalSchedule {
  int num_streams = 0;
  std::vector<int> stream;                 // per node, 0..num_streams-1
  std::vector<std::vector<int>> ops;       // per stream, its nodes in increasing order
  std::vector<std::pair<int, int>> syncs;  // node .second waits for node .first to finish
};

// max_streams >= 1. Throws std::invalid_argument otherwise or on a mismatched assignment.
// Physical stream 0 holds the assignment's critical logical stream (and whatever shares it).
PhysicalSchedule fold_streams(const Dag& dag, const StreamAssignment& assignment, int max_streams);

// The number of physical streams worth running: no more than the cores, nor than the
// logical streams (an upper bound of the DAG's width).
int default_physical_streams(const StreamAssignment& assignment, int cores);

}  // namespace nimble::scheduling
