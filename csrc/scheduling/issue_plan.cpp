#include "csrc/scheduling/issue_plan.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "csrc/scheduling/issue_order.h"

namespace nimble::scheduling {

IssuePlan make_issue_plan(const Dag& dag, const PhysicalSchedule& schedule) {
  const int n = dag.num_nodes;
  if (schedule.num_streams < 1 || static_cast<int>(schedule.stream.size()) != n ||
      static_cast<int>(schedule.ops.size()) != schedule.num_streams) {
    throw std::invalid_argument("the stream schedule does not match the DAG (" +
                                std::to_string(schedule.stream.size()) + " nodes scheduled, " +
                                std::to_string(n) + " in the DAG)");
  }
  validate_order(dag, schedule.order);
  // Each stream runs in the issue order, or an event could be waited for before it is
  // recorded.
  std::vector<std::vector<int>> in_order(schedule.num_streams);
  for (int op : schedule.order) {
    const int s = schedule.stream[op];
    if (s < 0 || s >= schedule.num_streams) {
      throw std::invalid_argument("op " + std::to_string(op) + " is on stream " +
                                  std::to_string(s) + " of " +
                                  std::to_string(schedule.num_streams));
    }
    in_order[s].push_back(op);
  }
  if (in_order != schedule.ops) {
    throw std::invalid_argument("the streams' op lists do not follow the schedule's issue order");
  }
  IssuePlan plan;
  plan.order = schedule.order;
  plan.streams.resize(schedule.num_streams);
  plan.stream = schedule.stream;
  plan.position.assign(n, -1);
  for (int s = 0; s < schedule.num_streams; ++s) {
    for (int op : schedule.ops[s]) {
      plan.position[op] = static_cast<int>(plan.streams[s].size());
      plan.streams[s].push_back(IssueStep{op, {}, -1});
    }
  }
  std::vector<int> rank(n);
  for (int i = 0; i < n; ++i) rank[plan.order[i]] = i;
  std::vector<int> event_of(n, -1);
  for (const auto& [from, to] : schedule.syncs) {
    if (from < 0 || to < 0 || from >= n || to >= n || rank[from] >= rank[to]) {
      throw std::invalid_argument("op " + std::to_string(to) + " waits for op " +
                                  std::to_string(from) +
                                  ", which is not issued before it (or not in the DAG)");
    }
    IssueStep& source = plan.streams[plan.stream[from]][plan.position[from]];
    if (event_of[from] < 0) {
      event_of[from] = plan.num_events++;
      source.signal = event_of[from];
    }
    plan.streams[plan.stream[to]][plan.position[to]].waits.push_back(event_of[from]);
  }
  return plan;
}

PlanOrder::PlanOrder(const Dag& dag, const IssuePlan& plan)
    : plan_(plan), successors_(successors(dag)) {}

bool PlanOrder::before_or_same(int a, int b) const {
  if (a == b) return true;
  if (plan_.stream[a] == plan_.stream[b]) return plan_.position[a] < plan_.position[b];
  if (a > b) return false;  // nodes are numbered in a topological order
  std::vector<int> todo = {a};
  std::vector<char> seen(successors_.size(), 0);
  while (!todo.empty()) {
    const int v = todo.back();
    todo.pop_back();
    for (int w : successors_[v]) {
      if (w == b) return true;
      if (w < b && !seen[w]) {
        seen[w] = 1;
        todo.push_back(w);
      }
    }
  }
  return false;
}

int release_point(const PlanOrder& order, int candidate, const std::vector<int>& readers) {
  const bool last = std::all_of(readers.begin(), readers.end(),
                                [&](int r) { return order.before_or_same(r, candidate); });
  return last ? candidate : -1;
}

}  // namespace nimble::scheduling
