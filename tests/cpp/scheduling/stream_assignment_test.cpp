// Nimble's stream assignment guarantees, checked on thousands of random DAGs and on
// hand-made ones.
#include "csrc/scheduling/stream_assignment.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "csrc/scheduling/bipartite_matching.h"
#include "csrc/scheduling/issue_order.h"
#include "csrc/scheduling/transitive_reduction.h"
#include "random_dags.h"

namespace nimble::scheduling {
namespace {

using testing::random_layered;
using testing::random_series_parallel;
using testing::random_sparse;

// Reachability by plain DFS, independent of the bitset implementation under test.
std::vector<std::vector<bool>> closure(int n, const std::vector<std::pair<int, int>>& edges) {
  std::vector<std::vector<int>> next(n);
  for (auto [u, v] : edges) next[u].push_back(v);
  std::vector<std::vector<bool>> reach(n, std::vector<bool>(n, false));
  for (int s = 0; s < n; ++s) {
    std::vector<int> todo = {s};
    while (!todo.empty()) {
      const int u = todo.back();
      todo.pop_back();
      for (int v : next[u]) {
        if (!reach[s][v]) {
          reach[s][v] = true;
          todo.push_back(v);
        }
      }
    }
  }
  return reach;
}

int matching_size(const std::vector<int>& match) {
  return static_cast<int>(std::count_if(match.begin(), match.end(), [](int m) { return m >= 0; }));
}

void check_assignment(const Dag& dag, const StreamAssignment& a) {
  const int n = dag.num_nodes;
  const auto reach = closure(n, dag.edges);
  const auto meg_reach = closure(n, a.meg_edges);
  // The MEG has the DAG's reachability and no edge implied by the others.
  ASSERT_EQ(reach, meg_reach);
  for (auto [u, v] : a.meg_edges) {
    std::vector<std::pair<int, int>> others;
    for (auto e : a.meg_edges) {
      if (e != std::make_pair(u, v)) others.push_back(e);
    }
    EXPECT_FALSE(closure(n, others)[u][v]) << "MEG edge " << u << "->" << v << " is redundant";
  }
  // Every op on exactly one logical stream; each stream is a chain of MEG edges.
  ASSERT_EQ(static_cast<int>(a.logical_stream.size()), n);
  std::map<int, std::vector<int>> members;
  for (int v = 0; v < n; ++v) {
    ASSERT_GE(a.logical_stream[v], 0);
    ASSERT_LT(a.logical_stream[v], a.num_logical_streams);
    members[a.logical_stream[v]].push_back(v);
  }
  ASSERT_EQ(static_cast<int>(members.size()), a.num_logical_streams);
  const std::set<std::pair<int, int>> meg(a.meg_edges.begin(), a.meg_edges.end());
  int in_stream_edges = 0;
  for (const auto& [stream, nodes] : members) {
    for (size_t i = 1; i < nodes.size(); ++i) {
      EXPECT_TRUE(meg.count({nodes[i - 1], nodes[i]}))
          << "stream " << stream << " is not a chain of MEG edges";
      ++in_stream_edges;
    }
  }
  // Maximum logical concurrency: ops with no path between them are on different streams.
  for (int u = 0; u < n; ++u) {
    for (int v = u + 1; v < n; ++v) {
      if (!reach[u][v]) EXPECT_NE(a.logical_stream[u], a.logical_stream[v]);
    }
  }
  // Syncs: one per MEG edge between streams, |E_MEG| - |M| with M a maximum matching
  // (cross-checked with Boost's Edmonds matching).
  const int max_matching = matching_size(maximum_bipartite_matching_boost(n, n, a.meg_edges));
  EXPECT_EQ(static_cast<int>(a.logical_syncs.size()),
            static_cast<int>(a.meg_edges.size()) - max_matching);
  EXPECT_EQ(in_stream_edges, max_matching);
  for (auto [u, v] : a.logical_syncs) {
    EXPECT_TRUE(meg.count({u, v}));
    EXPECT_NE(a.logical_stream[u], a.logical_stream[v]);
  }
}

// Runs the physical schedule with a random interleaving of the streams: an op starts once
// its stream predecessor and its sync sources finished. Checks there is no deadlock and
// every DAG edge is honoured.
void check_physical(const Dag& dag, const PhysicalSchedule& s, int max_streams, std::mt19937& rng) {
  const int n = dag.num_nodes;
  ASSERT_LE(s.num_streams, max_streams);
  ASSERT_EQ(static_cast<int>(s.stream.size()), n);
  ASSERT_NO_THROW(validate_order(dag, s.order));
  std::vector<int> rank(n);
  for (int i = 0; i < n; ++i) rank[s.order[i]] = i;
  std::vector<int> seen(n, 0);
  for (int p = 0; p < s.num_streams; ++p) {
    ASSERT_TRUE(std::is_sorted(s.ops[p].begin(), s.ops[p].end(),
                               [&](int x, int y) { return rank[x] < rank[y]; }));
    for (int v : s.ops[p]) {
      ASSERT_EQ(s.stream[v], p);
      ++seen[v];
    }
  }
  for (int v = 0; v < n; ++v) ASSERT_EQ(seen[v], 1) << "op " << v;
  std::vector<std::vector<int>> waits(n);
  for (auto [u, v] : s.syncs) {
    EXPECT_NE(s.stream[u], s.stream[v]);
    waits[v].push_back(u);
  }
  std::vector<int> next(s.num_streams, 0);
  std::vector<int> finished_at(n, -1);
  for (int step = 0; step < n; ++step) {
    std::vector<int> ready;
    for (int p = 0; p < s.num_streams; ++p) {
      if (next[p] >= static_cast<int>(s.ops[p].size())) continue;
      const int v = s.ops[p][next[p]];
      if (std::all_of(waits[v].begin(), waits[v].end(), [&](int u) { return finished_at[u] >= 0; }))
        ready.push_back(p);
    }
    ASSERT_FALSE(ready.empty()) << "deadlock at step " << step;
    const int p = ready[rng() % ready.size()];
    finished_at[s.ops[p][next[p]++]] = step;
  }
  for (auto [u, v] : dag.edges) {
    EXPECT_LT(finished_at[u], finished_at[v]) << "edge " << u << "->" << v << " violated";
  }
}

TEST(StreamAssignment, RandomDagsKeepEveryGuarantee) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 3000; ++trial) {
    Dag dag;
    switch (trial % 3) {
      case 0:
        dag = random_sparse(1 + static_cast<int>(rng() % 24), 3, rng);
        break;
      case 1:
        dag =
            random_layered(2 + static_cast<int>(rng() % 24), 1 + static_cast<int>(rng() % 4), rng);
        break;
      default:
        dag = random_series_parallel(1 + static_cast<int>(rng() % 5), rng);
    }
    SCOPED_TRACE("trial " + std::to_string(trial));
    const StreamAssignment a = assign_streams(dag);
    check_assignment(dag, a);
    const int p = 1 + static_cast<int>(rng() % 6);
    check_physical(dag, fold_streams(dag, a, p), p, rng);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(StreamAssignment, HopcroftKarpMatchesBoostOnRandomBipartiteGraphs) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    const int left = 1 + static_cast<int>(rng() % 30), right = 1 + static_cast<int>(rng() % 30);
    std::vector<std::pair<int, int>> edges;
    const int m = static_cast<int>(rng() % 80);
    for (int i = 0; i < m; ++i) edges.emplace_back(rng() % left, rng() % right);
    const auto hk = maximum_bipartite_matching(left, right, edges);
    ASSERT_EQ(matching_size(hk),
              matching_size(maximum_bipartite_matching_boost(left, right, edges)));
    std::set<int> used;
    for (int l = 0; l < left; ++l) {
      if (hk[l] < 0) continue;
      EXPECT_TRUE(used.insert(hk[l]).second) << "right vertex matched twice";
      EXPECT_NE(std::find(edges.begin(), edges.end(), std::make_pair(l, hk[l])), edges.end());
    }
  }
}

// Brute force over every set of MEG edges that forms chains (each node at most one
// in-stream successor and predecessor): none needs fewer syncs than the assignment.
TEST(StreamAssignment, BruteForceFindsNoAssignmentWithFewerSyncs) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 300; ++trial) {
    const Dag dag = random_sparse(2 + static_cast<int>(rng() % 7), 3, rng);
    const StreamAssignment a = assign_streams(dag);
    const int m = static_cast<int>(a.meg_edges.size());
    ASSERT_LE(m, 20);
    int best_in_stream = 0;
    for (uint32_t mask = 0; mask < (1u << m); ++mask) {
      std::vector<int> out(dag.num_nodes, 0), in(dag.num_nodes, 0);
      bool chains = true;
      int count = 0;
      for (int e = 0; e < m && chains; ++e) {
        if (!(mask >> e & 1)) continue;
        chains = ++out[a.meg_edges[e].first] == 1 && ++in[a.meg_edges[e].second] == 1;
        ++count;
      }
      if (chains) best_in_stream = std::max(best_in_stream, count);
    }
    EXPECT_EQ(static_cast<int>(a.logical_syncs.size()), m - best_in_stream) << "trial " << trial;
  }
}

// Every path from the source passes one edge: max-flow formulations give no answer here,
// the matching does (see the Nimble rebuttal).
TEST(StreamAssignment, BottleneckEdgeGraph) {
  // 0 -> {1, 2} -> 3 -> 4 -> {5, 6} -> 7 : edge 3->4 lies on every source-sink path.
  const Dag dag{8, {{0, 1}, {0, 2}, {1, 3}, {2, 3}, {3, 4}, {4, 5}, {4, 6}, {5, 7}, {6, 7}}};
  const StreamAssignment a = assign_streams(dag);
  check_assignment(dag, a);
  // Chains in the MEG are vertex-disjoint: 0-1-3-4-5-7, then 2 and 6 alone; |M| = 5.
  EXPECT_EQ(a.num_logical_streams, 3);
  EXPECT_EQ(a.logical_stream[3], a.logical_stream[4]);  // the bottleneck edge is matched
  EXPECT_EQ(a.logical_syncs.size(), 9u - 5u);
}

// An Inception block: 0 -> {1 | 2 -> 3 -> 4 | 5 -> 6} -> 7 -> 8. Its longest branch bounds
// the block's time: the chain through it runs on one stream, physical stream 0 (the CUDA
// backend's high-priority one), and the short branches beside it.
TEST(StreamAssignment, TheCriticalPathIsOneStreamOnPhysicalStreamZero) {
  const Dag dag{9,
                {{0, 1}, {0, 2}, {2, 3}, {3, 4}, {0, 5}, {5, 6}, {1, 7}, {4, 7}, {6, 7}, {7, 8}}};
  EXPECT_EQ(critical_path(dag), (std::vector<int>{0, 2, 3, 4, 7, 8}));
  const StreamAssignment a = assign_streams(dag);
  check_assignment(dag, a);
  for (int v : {0, 2, 3, 4, 7, 8}) EXPECT_EQ(a.logical_stream[v], a.critical_stream) << v;
  for (int streams = 1; streams <= 3; ++streams) {
    const PhysicalSchedule p = fold_streams(dag, a, streams);
    for (int v : {0, 2, 3, 4, 7, 8})
      EXPECT_EQ(p.stream[v], 0) << v << ", " << streams << " streams";
  }
}

TEST(StreamAssignment, CriticalPathIsALongestPathOfRandomDags) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 500; ++trial) {
    const Dag dag = random_sparse(1 + static_cast<int>(rng() % 24), 3, rng);
    const std::vector<int> path = critical_path(dag);
    const auto next = successors(dag);
    for (size_t i = 1; i < path.size(); ++i) {
      ASSERT_TRUE(std::binary_search(next[path[i - 1]].begin(), next[path[i - 1]].end(), path[i]))
          << "trial " << trial << ": not a path";
    }
    std::vector<int> level(dag.num_nodes, 0);  // nodes on the longest path ending here, - 1
    for (int v = 0; v < dag.num_nodes; ++v)
      for (int w : next[v]) level[w] = std::max(level[w], level[v] + 1);
    ASSERT_EQ(static_cast<int>(path.size()), *std::max_element(level.begin(), level.end()) + 1)
        << "trial " << trial;
  }
}

TEST(StreamAssignment, PreferredEdgesStillGiveAMaximumMatching) {
  // 0 -> 0 preferred blocks both 0 -> 1 and 1 -> 0 ... unless it is rerouted.
  const std::vector<std::pair<int, int>> edges{{0, 0}, {0, 1}, {1, 0}};
  const auto m = maximum_bipartite_matching(2, 2, edges, {{0, 0}});
  EXPECT_EQ(matching_size(m), 2);
  EXPECT_THROW(maximum_bipartite_matching(2, 2, edges, {{0, 0}, {1, 0}}), std::invalid_argument);
}

TEST(StreamAssignment, ChainIsOneStreamAndDiamondIsTwo) {
  const StreamAssignment chain = assign_streams(Dag{4, {{0, 1}, {1, 2}, {2, 3}, {0, 3}}});
  EXPECT_EQ(chain.num_logical_streams, 1);
  EXPECT_EQ(chain.meg_edges.size(), 3u);  // 0->3 is implied
  EXPECT_TRUE(chain.logical_syncs.empty());
  const StreamAssignment diamond = assign_streams(Dag{4, {{0, 1}, {0, 2}, {1, 3}, {2, 3}}});
  EXPECT_EQ(diamond.num_logical_streams, 2);
  EXPECT_EQ(diamond.logical_syncs.size(), 2u);
}

TEST(StreamAssignment, EmptyAndEdgelessDags) {
  EXPECT_EQ(assign_streams(Dag{0, {}}).num_logical_streams, 0);
  const StreamAssignment a = assign_streams(Dag{3, {}});
  EXPECT_EQ(a.num_logical_streams, 3);
  const PhysicalSchedule p = fold_streams(Dag{3, {}}, a, 2);
  EXPECT_EQ(p.num_streams, 2);
  EXPECT_TRUE(p.syncs.empty());
  EXPECT_EQ(default_physical_streams(a, 2), 2);
  EXPECT_EQ(default_physical_streams(assign_streams(Dag{2, {{0, 1}}}), 8), 1);
}

TEST(StreamAssignment, BadInputIsRefusedWithAClearMessage) {
  EXPECT_THROW(assign_streams(Dag{-1, {}}), std::invalid_argument);
  try {
    assign_streams(Dag{3, {{2, 1}}});
    FAIL() << "a backward edge was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("(2, 1)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("from < to"), std::string::npos) << e.what();
  }
  EXPECT_THROW(assign_streams(Dag{3, {{0, 3}}}), std::invalid_argument);
  const Dag dag{2, {{0, 1}}};
  EXPECT_THROW(fold_streams(dag, assign_streams(dag), 0), std::invalid_argument);
  EXPECT_THROW(fold_streams(Dag{3, {}}, assign_streams(dag), 1), std::invalid_argument);
}

TEST(StreamAssignment, DuplicateEdgesAreTolerated) {
  const Dag dag{3, {{0, 1}, {0, 1}, {1, 2}, {1, 2}}};
  const StreamAssignment a = assign_streams(dag);
  EXPECT_EQ(a.meg_edges.size(), 2u);
  EXPECT_EQ(a.num_logical_streams, 1);
}

}  // namespace
}  // namespace nimble::scheduling
