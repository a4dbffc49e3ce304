// The issue order of a multi-stream schedule: a topological order that takes, among the ops
// ready to issue, the one with the longest remaining path (issue_order.h). Checked on random
// DAGs against its definition, and on hand-made forks where the long branch comes later in
// the trace than the short one.
#include "csrc/scheduling/issue_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "csrc/scheduling/issue_plan.h"
#include "csrc/scheduling/stream_assignment.h"
#include "random_dags.h"

namespace nimble::scheduling {
namespace {

// Nodes on the longest path from each node to a sink, by brute force over the successors.
int longest_from(int v, const std::vector<std::vector<int>>& next, std::vector<int>& memo) {
  if (memo[v] > 0) return memo[v];
  int best = 1;
  for (int w : next[v]) best = std::max(best, 1 + longest_from(w, next, memo));
  return memo[v] = best;
}

std::vector<int> rank_of(const std::vector<int>& order) {
  std::vector<int> rank(order.size());
  for (size_t i = 0; i < order.size(); ++i) rank[order[i]] = static_cast<int>(i);
  return rank;
}

TEST(IssueOrder, RandomDagsGetTheCriticalPathFirstTopologicalOrder) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 3000; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    Dag dag;
    switch (trial % 3) {
      case 0:
        dag = testing::random_sparse(1 + static_cast<int>(rng() % 40), 3, rng);
        break;
      case 1:
        dag = testing::random_layered(2 + static_cast<int>(rng() % 40),
                                      1 + static_cast<int>(rng() % 6), rng);
        break;
      default:
        dag = testing::random_series_parallel(1 + static_cast<int>(rng() % 8), rng);
    }
    const int n = dag.num_nodes;
    const std::vector<int> order = critical_path_first_order(dag);
    ASSERT_EQ(static_cast<int>(order.size()), n);
    const std::vector<int> rank = rank_of(order);
    std::vector<int> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int> all(n);
    std::iota(all.begin(), all.end(), 0);
    ASSERT_EQ(sorted, all) << "not a permutation";
    for (const auto& [u, v] : dag.edges) ASSERT_LT(rank[u], rank[v]) << u << "->" << v;
    ASSERT_NO_THROW(validate_order(dag, order));

    // Replayed step by step: each op is the ready one with the longest remaining path, the
    // smallest on ties.
    const auto next = successors(dag);
    std::vector<int> memo(n, 0);
    std::vector<int> length(n);
    for (int v = 0; v < n; ++v) length[v] = longest_from(v, next, memo);
    ASSERT_EQ(remaining_path_lengths(dag), length);
    std::vector<int> waiting(n, 0);
    for (int v = 0; v < n; ++v)
      for (int w : next[v]) ++waiting[w];
    std::vector<bool> issued(n, false);
    for (int v : order) {
      ASSERT_EQ(waiting[v], 0) << "op " << v << " issued before a predecessor";
      for (int u = 0; u < n; ++u) {
        if (issued[u] || waiting[u] > 0 || u == v) continue;
        ASSERT_TRUE(length[u] < length[v] || (length[u] == length[v] && u > v))
            << "op " << v << " issued while op " << u << " was ready with a longer path";
      }
      issued[v] = true;
      for (int w : next[v]) --waiting[w];
    }
    // The order starts with a longest path's first node.
    if (n > 0) ASSERT_EQ(length[order.front()], *std::max_element(length.begin(), length.end()));
  }
}

// After op 0, a short branch (op 1) comes first in the trace and a long one (ops 2..5)
// after it; op 6 joins them.
const Dag kFork{7, {{0, 1}, {0, 2}, {2, 3}, {3, 4}, {4, 5}, {1, 6}, {5, 6}}};

TEST(IssueOrder, LongBranchOfAForkIsIssuedBeforeTheShortOne) {
  const std::vector<int> order = critical_path_first_order(kFork);
  const std::vector<int> rank = rank_of(order);
  EXPECT_LT(rank[2], rank[1]) << "the long branch's first op after the short branch";
  // The short branch goes once it has the longest path among the ready ops.
  EXPECT_EQ(order, (std::vector<int>{0, 2, 3, 4, 1, 5, 6}));

  // The schedule every backend issues follows it on several streams...
  const StreamAssignment a = assign_streams(kFork);
  const PhysicalSchedule two = fold_streams(kFork, a, 2);
  EXPECT_EQ(two.order, order);
  const IssuePlan plan = make_issue_plan(kFork, two);
  EXPECT_EQ(plan.order, order);
  // ... and on one stream keeps the trace's order (nothing runs beside anything).
  const PhysicalSchedule one = fold_streams(kFork, a, 1);
  EXPECT_EQ(one.order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(one.ops[0], one.order);
}

TEST(IssueOrder, AStreamHoldingTwoBranchesRunsTheLongerFirst) {
  // After op 0: a short branch (op 1), a middle one (ops 2..4) and the longest (ops 5..9),
  // in that trace order, all joined by op 10. On two streams the critical path (0, 5..9,
  // 10) keeps stream 0; the two others share stream 1, where the middle branch starts first
  // and the short one goes once what is left of the middle one is no longer than it.
  const Dag dag{11,
                {{0, 1},
                 {0, 2},
                 {2, 3},
                 {3, 4},
                 {0, 5},
                 {5, 6},
                 {6, 7},
                 {7, 8},
                 {8, 9},
                 {1, 10},
                 {4, 10},
                 {9, 10}}};
  const PhysicalSchedule s = fold_streams(dag, assign_streams(dag), 2);
  ASSERT_EQ(s.num_streams, 2);
  for (int v : {0, 5, 6, 7, 8, 9, 10}) ASSERT_EQ(s.stream[v], 0) << v;
  EXPECT_EQ(s.ops[1], (std::vector<int>{2, 3, 1, 4}));
}

TEST(IssueOrder, EmptyAndEdgelessDags) {
  EXPECT_TRUE(critical_path_first_order(Dag{0, {}}).empty());
  EXPECT_EQ(critical_path_first_order(Dag{3, {}}), (std::vector<int>{0, 1, 2}));
}

TEST(IssueOrder, BadOrdersAreRefused) {
  EXPECT_NO_THROW(validate_order(kFork, critical_path_first_order(kFork)));
  EXPECT_THROW(validate_order(kFork, {0, 1, 2}), std::invalid_argument);  // too short
  EXPECT_THROW(validate_order(kFork, {0, 1, 1, 3, 4, 5, 6}), std::invalid_argument);
  EXPECT_THROW(validate_order(kFork, {0, 1, 2, 3, 4, 5, 7}), std::invalid_argument);
  try {
    validate_order(kFork, {0, 1, 2, 4, 3, 5, 6});
    FAIL() << "an order against an edge was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("op 4 before op 3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nimble::scheduling
