#pragma once
// The physical schedule every backend runs, computed once per program and stream count:
// Nimble's stream assignment folded onto the physical streams, the issue plan (each
// stream's ops, the events between them), and when each transient value may be dropped
// so that no stream still reads it. Backends only decide how a stream and an event are
// made (worker threads and flags on the CPU, CUDA streams and events in one graph).
#include <functional>
#include <vector>

#include "csrc/program/program.h"
#include "csrc/runtime/executor.h"
#include "csrc/scheduling/issue_plan.h"
#include "csrc/scheduling/stream_assignment.h"

namespace nimble {

struct StreamPlan {
  ScheduleInfo info;
  scheduling::IssuePlan issue;
  // Per op: transient slots that every reader is ordered before or at this op, in every
  // interleaving of the streams, so they may be dropped once it has been issued.
  std::vector<std::vector<int>> release;
  std::vector<int> end_release;  // transient slots dropped once the whole replay has run
  std::vector<int> transients;   // every transient slot (dropped after a failed replay)
  int num_streams() const { return info.physical_streams; }
};

// The number of physical streams a backend runs when the caller asks for its default.
using DefaultStreams =
    std::function<int(const scheduling::Dag&, const scheduling::StreamAssignment&)>;

// `streams` >= 1 physical streams, or 0 for `default_streams`' choice.
StreamPlan plan_streams(const Program& program, int streams, const DefaultStreams& default_streams);

// The plan a graph backend issues (the CUDA graph and its CPU twin): by default as many
// streams as the DAG is wide (streams beyond its width would have nothing to run side by
// side), at most kMaxDefaultCudaStreams.
StreamPlan plan_graph_streams(const Program& program, int streams);

// Throws std::invalid_argument when `plan` was made for another program.
void check_plan_covers(const StreamPlan& plan, const Program& program);

// Per slot, the ops that read it (directly or inside a tensor list), ascending.
std::vector<std::vector<int>> readers_of_slots(const Program& program);

}  // namespace nimble
