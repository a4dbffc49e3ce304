#pragma once
// Maximum cardinality matching of a bipartite graph (Hopcroft-Karp, O(E sqrt(V))).
#include <utility>
#include <vector>

namespace nimble::scheduling {

// Left and right vertices are 0..left-1 and 0..right-1; edges are (left, right).
// Returns match_of_left: the right vertex each left vertex is matched to, or -1.
// `preferred`: edges to start from (a matching: no two share a vertex); the result is still
// maximum, and keeps those an augmenting path does not need to reroute.
std::vector<int> maximum_bipartite_matching(int left, int right,
                                            const std::vector<std::pair<int, int>>& edges,
                                            const std::vector<std::pair<int, int>>& preferred = {});

}  // namespace nimble::scheduling

namespace nimble::scheduling {

// The same, through Boost.Graph's Edmonds matching on the general graph: slower, kept as
// the reference the tests and the benchmark compare Hopcroft-Karp against.
std::vector<int> maximum_bipartite_matching_boost(int left, int right,
                                                  const std::vector<std::pair<int, int>>& edges);

}  // namespace nimble::scheduling
