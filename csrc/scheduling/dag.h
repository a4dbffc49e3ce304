#pragma once
// The op dependency DAG the stream assignment works on.
#include <utility>
#include <vector>

namespace nimble::scheduling {

// Nodes are 0..num_nodes-1 numbered in a topological order (the capture order): every
// edge goes from a smaller to a larger index. Duplicate edges are allowed.
struct Dag {
  int num_nodes = 0;
  std::vector<std::pair<int, int>> edges;
};

// Throws std::invalid_argument naming the first bad edge (out of range, or not forward).
void validate(const Dag& dag);

// Successor lists, sorted ascending, without duplicates.
std::vector<std::vector<int>> successors(const Dag& dag);

// The most nodes of one level, a node's level being the length of the longest path that
// ends at it. Nodes of one level have no path between them, so this is a lower bound of
// the DAG's width (its largest set of mutually independent nodes), found in O(V + E).
int widest_level(const Dag& dag);

// Per node, the nodes on the longest path that starts at it (1 for a sink): its "bottom
// level" (HEFT's upward rank) with every op counted as one, like critical_path.
std::vector<int> remaining_path_lengths(const Dag& dag);

// A longest path (by number of nodes), in order: with ops of similar cost, the chain that
// bounds the replay's time however many streams run beside it. Among equally long paths,
// the one that starts at the smallest node, continuing at the smallest successor.
std::vector<int> critical_path(const Dag& dag);

}  // namespace nimble::scheduling
