#pragma once
// How a physical schedule is issued, the same for every backend: per stream, its ops in
// order, each preceded by the events it waits for and followed by the event it records.
// A CPU backend turns events into flags between worker threads, a CUDA backend into
// cudaEventRecord / cudaStreamWaitEvent inside one graph capture.
//
// Guarantees (tests/cpp/scheduling/issue_plan_test.cpp, thousands of random DAGs): the
// per-stream order plus the events order every edge of the DAG, and a value released at
// `release_point` is never released before one of its readers is ordered to have run.
#include <vector>

#include "csrc/scheduling/dag.h"
#include "csrc/scheduling/physical_streams.h"

namespace nimble::scheduling {

struct IssueStep {
  int op = 0;
  std::vector<int> waits;  // events recorded by earlier ops of other streams
  int signal = -1;         // the event recorded after this op (one per source of a sync)
};

struct IssuePlan {
  int num_events = 0;
  // The schedule's issue order: one host thread issues the ops in it (each stream then gets
  // its ops in its own order, and every event is recorded before an op waits for it).
  std::vector<int> order;
  std::vector<std::vector<IssueStep>> streams;  // per physical stream, in issue order
  std::vector<int> stream;                      // per op
  std::vector<int> position;                    // per op, its index in its stream
};

// Throws std::invalid_argument when the schedule does not cover `dag`'s nodes, or its
// order is not a topological one that each stream's ops follow.
IssuePlan make_issue_plan(const Dag& dag, const PhysicalSchedule& schedule);

// Which ops the plan orders before which: `a` before `b` when they run on one stream in
// that order or a path of DAG edges leads from `a` to `b` (every DAG edge is ordered by
// the plan). Conservative: orders that only events between unrelated ops give are not
// used, which keeps the answer the same for every interleaving of the streams.
class PlanOrder {
 public:
  PlanOrder(const Dag& dag, const IssuePlan& plan);
  bool before_or_same(int a, int b) const;

 private:
  const IssuePlan& plan_;
  std::vector<std::vector<int>> successors_;
};

// The op after which a value may be dropped: `candidate` (its last reader in trace
// order) when every reader is ordered before or is `candidate`, else -1 (drop it once
// the whole replay has run).
int release_point(const PlanOrder& order, int candidate, const std::vector<int>& readers);

}  // namespace nimble::scheduling
