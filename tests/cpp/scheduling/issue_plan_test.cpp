// The issue plan every backend runs: per-stream order plus events must order every
// dependency of the DAG, and release points must come after every reader, under any
// interleaving of the streams. Checked on thousands of random DAGs.
#include "csrc/scheduling/issue_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "csrc/scheduling/issue_order.h"
#include "csrc/scheduling/stream_assignment.h"
#include "random_dags.h"

namespace nimble::scheduling {
namespace {

Dag random_dag(int trial, std::mt19937& rng) {
  switch (trial % 3) {
    case 0:
      return testing::random_sparse(1 + static_cast<int>(rng() % 30), 3, rng);
    case 1:
      return testing::random_layered(2 + static_cast<int>(rng() % 30),
                                     1 + static_cast<int>(rng() % 5), rng);
    default:
      return testing::random_series_parallel(1 + static_cast<int>(rng() % 6), rng);
  }
}

// What the plan alone guarantees, built without the DAG: an op runs after the op before
// it on its stream, and after the op that records each event it waits for.
std::vector<std::vector<bool>> plan_order(const IssuePlan& plan) {
  const int n = static_cast<int>(plan.stream.size());
  std::vector<int> recorder(plan.num_events, -1);
  for (const auto& steps : plan.streams) {
    for (const IssueStep& step : steps) {
      if (step.signal >= 0) recorder[step.signal] = step.op;
    }
  }
  std::vector<std::vector<int>> preds(n);
  for (const auto& steps : plan.streams) {
    for (size_t i = 0; i < steps.size(); ++i) {
      if (i > 0) preds[steps[i].op].push_back(steps[i - 1].op);
      for (int e : steps[i].waits) preds[steps[i].op].push_back(recorder[e]);
    }
  }
  // Every predecessor comes earlier in the issue order (checked by the caller), so one pass
  // in that order closes the relation.
  std::vector<std::vector<bool>> before(n, std::vector<bool>(n, false));
  for (int v : plan.order) {
    for (int u : preds[v]) {
      before[u][v] = true;
      for (int w = 0; w < n; ++w) {
        if (before[w][u]) before[w][v] = true;
      }
    }
  }
  return before;
}

std::vector<std::vector<bool>> reachability(const Dag& dag) {
  const int n = dag.num_nodes;
  std::vector<std::vector<bool>> reach(n, std::vector<bool>(n, false));
  std::vector<std::pair<int, int>> edges = dag.edges;
  std::sort(edges.begin(), edges.end(), [](auto a, auto b) { return a.second < b.second; });
  for (const auto& [u, v] : edges) {
    reach[u][v] = true;
    for (int w = 0; w < n; ++w) {
      if (reach[w][u]) reach[w][v] = true;
    }
  }
  return reach;
}

void check_plan(const Dag& dag, const IssuePlan& plan, std::mt19937& rng) {
  const int n = dag.num_nodes;
  // Each op is issued exactly once; each event is recorded by exactly one op, and by an
  // op issued earlier in the issue order than every op waiting for it (a CUDA stream
  // waiting for an event not yet recorded would not wait at all).
  ASSERT_NO_THROW(validate_order(dag, plan.order));
  std::vector<int> rank(n);
  for (int i = 0; i < n; ++i) rank[plan.order[i]] = i;
  std::vector<int> issued(n, 0);
  std::vector<int> recorder(plan.num_events, -1);
  for (size_t s = 0; s < plan.streams.size(); ++s) {
    for (size_t i = 0; i < plan.streams[s].size(); ++i) {
      const IssueStep& step = plan.streams[s][i];
      ++issued[step.op];
      ASSERT_EQ(plan.stream[step.op], static_cast<int>(s));
      ASSERT_EQ(plan.position[step.op], static_cast<int>(i));
      if (i > 0) ASSERT_LT(rank[plan.streams[s][i - 1].op], rank[step.op]);
      if (step.signal >= 0) {
        ASSERT_EQ(recorder[step.signal], -1) << "event " << step.signal << " recorded twice";
        recorder[step.signal] = step.op;
      }
    }
  }
  for (int v = 0; v < n; ++v) ASSERT_EQ(issued[v], 1) << "op " << v;
  for (const auto& steps : plan.streams) {
    for (const IssueStep& step : steps) {
      for (int e : step.waits) {
        ASSERT_GE(recorder[e], 0) << "event " << e << " is never recorded";
        ASSERT_LT(rank[recorder[e]], rank[step.op]);
        ASSERT_NE(plan.stream[recorder[e]], plan.stream[step.op]) << "a wait on its own stream";
      }
    }
  }

  // Every dependency is ordered by the plan alone, whatever the interleaving.
  const auto before = plan_order(plan);
  for (const auto& [u, v] : dag.edges) {
    ASSERT_TRUE(before[u][v]) << "edge " << u << "->" << v << " is not ordered by the plan";
  }

  // PlanOrder never claims an order the plan does not give.
  const PlanOrder order(dag, plan);
  const auto reach = reachability(dag);
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      const bool claimed = order.before_or_same(a, b);
      ASSERT_EQ(claimed,
                a == b || reach[a][b] ||
                    (plan.stream[a] == plan.stream[b] && plan.position[a] < plan.position[b]))
          << a << " before " << b;
      if (claimed && a != b) ASSERT_TRUE(before[a][b]) << a << " before " << b;
    }
  }

  // Values with random readers among the ops that depend on their producer: a release
  // point, when there is one, comes after every reader in every interleaving.
  for (int producer = 0; producer < n; ++producer) {
    std::vector<int> dependents;
    for (int v = producer + 1; v < n; ++v) {
      if (reach[producer][v]) dependents.push_back(v);
    }
    if (dependents.empty()) continue;
    std::shuffle(dependents.begin(), dependents.end(), rng);
    dependents.resize(1 + rng() % dependents.size());
    const int candidate = *std::max_element(dependents.begin(), dependents.end());
    const int point = release_point(order, candidate, dependents);
    if (point < 0) continue;
    ASSERT_EQ(point, candidate);
    for (int r : dependents) {
      ASSERT_TRUE(r == point || before[r][point]) << "value of op " << producer << " released at "
                                                  << point << " before reader " << r << " ran";
    }
  }
}

TEST(IssuePlan, OrdersEveryDependencyOnRandomDags) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const Dag dag = random_dag(trial, rng);
    const StreamAssignment assignment = assign_streams(dag);
    const int streams = 1 + static_cast<int>(rng() % 8);
    check_plan(dag, make_issue_plan(dag, fold_streams(dag, assignment, streams)), rng);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(IssuePlan, OneStreamHasNoEvents) {
  std::mt19937 rng(3);
  const Dag dag = testing::random_series_parallel(5, rng);
  const IssuePlan plan = make_issue_plan(dag, fold_streams(dag, assign_streams(dag), 1));
  EXPECT_EQ(plan.num_events, 0);
  ASSERT_EQ(plan.streams.size(), 1u);
  EXPECT_EQ(static_cast<int>(plan.streams[0].size()), dag.num_nodes);
}

TEST(IssuePlan, DiamondSignalsOncePerSource) {
  // 0 -> {1, 2} -> 3 on two streams: one event after 0 (or none when 0 shares the stream
  // of both), one after the branch the join does not share a stream with.
  const Dag dag{4, {{0, 1}, {0, 2}, {1, 3}, {2, 3}}};
  const IssuePlan plan = make_issue_plan(dag, fold_streams(dag, assign_streams(dag), 2));
  ASSERT_EQ(plan.streams.size(), 2u);
  EXPECT_EQ(plan.num_events, 2);
  std::mt19937 rng(1);
  check_plan(dag, plan, rng);
}

TEST(IssuePlan, MismatchedScheduleIsRefused) {
  const Dag dag{3, {{0, 1}}};
  PhysicalSchedule schedule = fold_streams(dag, assign_streams(dag), 2);
  schedule.stream.pop_back();
  EXPECT_THROW(make_issue_plan(dag, schedule), std::invalid_argument);
}

TEST(IssuePlan, ScheduleOutOfItsIssueOrderIsRefused) {
  // 0 -> {1, 2, 3} -> 4; on two streams the issue order is not the nodes' own order.
  const Dag dag{5, {{0, 1}, {0, 2}, {2, 3}, {1, 4}, {3, 4}}};
  const PhysicalSchedule good = fold_streams(dag, assign_streams(dag), 2);
  ASSERT_NO_THROW(make_issue_plan(dag, good));

  PhysicalSchedule backwards = good;  // an order that breaks an edge
  std::swap(backwards.order.front(), backwards.order.back());
  EXPECT_THROW(make_issue_plan(dag, backwards), std::invalid_argument);

  PhysicalSchedule unsorted = good;  // a stream's ops against the issue order
  const auto longest =
      std::max_element(unsorted.ops.begin(), unsorted.ops.end(),
                       [](const auto& a, const auto& b) { return a.size() < b.size(); });
  std::reverse(longest->begin(), longest->end());
  EXPECT_THROW(make_issue_plan(dag, unsorted), std::invalid_argument);

  PhysicalSchedule late_wait = good;  // a wait for an op issued after the waiting one
  ASSERT_FALSE(late_wait.syncs.empty());
  std::swap(late_wait.syncs.front().first, late_wait.syncs.front().second);
  EXPECT_THROW(make_issue_plan(dag, late_wait), std::invalid_argument);
}

TEST(IssuePlan, WidestLevelBoundsConcurrency) {
  EXPECT_EQ(widest_level(Dag{0, {}}), 0);
  EXPECT_EQ(widest_level(Dag{4, {{0, 1}, {1, 2}, {2, 3}}}), 1);
  EXPECT_EQ(widest_level(Dag{4, {{0, 1}, {0, 2}, {1, 3}, {2, 3}}}), 2);
  // Four branches of different lengths between a fork and a join.
  EXPECT_EQ(
      widest_level(
          Dag{8, {{0, 1}, {0, 2}, {0, 3}, {0, 4}, {4, 5}, {1, 7}, {2, 7}, {3, 7}, {5, 6}, {6, 7}}}),
      4);
}

}  // namespace
}  // namespace nimble::scheduling
