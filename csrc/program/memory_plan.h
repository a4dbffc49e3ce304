#pragma once
// Memory planning for the preallocated `.out` buffers of a program: two buffers share one
// storage when every op touching the first is an ancestor, in the dependency DAG, of the
// op that first writes the second. The DAG bounds every interleaving any stream schedule
// may produce, so the plan holds for one stream, for N, and for later re-schedules.
#include <cstdint>

#include "program/program.h"

namespace nimble {

struct MemoryPlan {
  int64_t buffer_bytes_before = 0;  // one storage per buffer
  int64_t buffer_bytes_after = 0;   // after sharing
  int buffers = 0;                  // buffers considered
  int storages = 0;                 // storages they now use
};

// Re-points the buffers' tensors (and the views computed from them) at shared storages;
// with `share` false, only measures.
MemoryPlan plan_buffer_memory(Program& program, bool share = true);

}  // namespace nimble
