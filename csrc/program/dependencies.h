#pragma once
// The order a replay must keep between ops, the correctness argument every schedule and
// the memory plan rest on. Two ops that touch one storage, one of them writing it, run in
// trace order; ops that only read a storage, or touch disjoint storages, may run in any
// order or at once. Torch-free: an op is the set of storages it reads and writes, each a
// storage id; tensors that may alias (views, in-place results) share one id.
#include <utility>
#include <vector>

namespace nimble {

struct StorageAccess {
  std::vector<int> reads;   // storage ids it reads (an op writing in place lists them too)
  std::vector<int> writes;  // storage ids it writes, in place or by producing a value
};

// Edges (from, to), from < to, sorted and unique. Every edge joins two conflicting ops,
// and for every conflicting pair i < j a path of edges leads from i to j, so the edges
// order exactly what must be ordered. Per storage: its last writer precedes each later
// reader and the next writer, and the readers since a write precede the next writer;
// readers are not ordered among themselves.
std::vector<std::pair<int, int>> dependency_edges(const std::vector<StorageAccess>& ops);

}  // namespace nimble
