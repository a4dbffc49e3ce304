#pragma once
// The order in which a multi-stream schedule is issued: one global topological order that
// every physical stream runs its ops in (CUDA: the order of the capture, and so of each
// stream's queue; CPU: each worker thread's op list). Where branches are independent, the
// one with the longest remaining path goes first (list scheduling by bottom level, as in
// HEFT, every op counted as one): its kernels enter their stream's queue, and the graph's
// node order, before a short branch's, so that a stream holding both does not make the
// critical path wait behind the short branch, and the join waits less.
#include <vector>

#include "csrc/scheduling/dag.h"

namespace nimble::scheduling {

// A topological order of `dag` that, among the ops whose predecessors are all issued,
// takes the one with the longest remaining path (remaining_path_lengths), the smallest
// node on ties. Deterministic; O((V + E) log V).
std::vector<int> critical_path_first_order(const Dag& dag);

// Throws std::invalid_argument unless `order` holds every node of `dag` once and every
// edge goes from an earlier to a later node of it.
void validate_order(const Dag& dag, const std::vector<int>& order);

}  // namespace nimble::scheduling
