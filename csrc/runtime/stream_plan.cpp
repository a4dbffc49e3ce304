#include "csrc/runtime/stream_plan.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace nimble {

std::vector<std::vector<int>> readers_of_slots(const Program& program) {
  std::vector<std::vector<int>> readers(program.slots.size());
  for (size_t i = 0; i < program.ops.size(); ++i) {
    for (const Arg& arg : program.ops[i].args) {
      if (arg.kind == Arg::Kind::kSlot) readers[arg.slot].push_back(static_cast<int>(i));
      for (int slot : arg.slots) {
        if (slot >= 0) readers[slot].push_back(static_cast<int>(i));
      }
    }
  }
  for (auto& list : readers) list.erase(std::unique(list.begin(), list.end()), list.end());
  return readers;
}

void check_plan_covers(const StreamPlan& plan, const Program& program) {
  if (plan.issue.stream.size() != program.ops.size() || plan.release.size() != program.ops.size()) {
    throw std::invalid_argument("the stream plan does not match the program (" +
                                std::to_string(plan.issue.stream.size()) + " ops planned, " +
                                std::to_string(program.ops.size()) + " in the program)");
  }
}

StreamPlan plan_streams(const Program& program, int streams,
                        const DefaultStreams& default_streams) {
  scheduling::Dag dag;
  dag.num_nodes = static_cast<int>(program.ops.size());
  dag.edges = program.dependencies;
  const scheduling::StreamAssignment assignment = scheduling::assign_streams(dag);
  const int physical = streams > 0 ? streams : std::max(1, default_streams(dag, assignment));
  const scheduling::PhysicalSchedule schedule = scheduling::fold_streams(dag, assignment, physical);

  StreamPlan plan;
  plan.info.logical_streams = assignment.num_logical_streams;
  plan.info.logical_syncs = static_cast<int>(assignment.logical_syncs.size());
  plan.info.logical_stream = assignment.logical_stream;
  plan.info.physical_streams = schedule.num_streams;
  plan.info.physical_syncs = static_cast<int>(schedule.syncs.size());
  plan.info.physical_stream = schedule.stream;
  plan.issue = scheduling::make_issue_plan(dag, schedule);

  // The builder releases a value after its last reader in trace order; on several streams
  // that op may run before another reader, and the value then lives to the end.
  const scheduling::PlanOrder order(dag, plan.issue);
  const auto readers = readers_of_slots(program);
  plan.release.resize(program.ops.size());
  for (size_t op = 0; op < program.ops.size(); ++op) {
    for (int slot : program.ops[op].release) {
      const int point = scheduling::release_point(order, static_cast<int>(op), readers[slot]);
      if (point >= 0) {
        plan.release[point].push_back(slot);
      } else {
        plan.end_release.push_back(slot);
      }
    }
  }
  for (size_t slot = 0; slot < program.slots.size(); ++slot) {
    if (!program.slots[slot].is_stable()) plan.transients.push_back(static_cast<int>(slot));
  }
  return plan;
}

StreamPlan plan_graph_streams(const Program& program, int streams) {
  return plan_streams(
      program, streams,
      [](const scheduling::Dag& dag, const scheduling::StreamAssignment& assignment) {
        return std::min({scheduling::widest_level(dag), assignment.num_logical_streams,
                         kMaxDefaultCudaStreams});
      });
}

}  // namespace nimble
