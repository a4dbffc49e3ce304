#pragma once
// Memory planning for the preallocated `.out` buffers of a program: two buffers share one
// storage when every op touching the first is an ancestor, in the dependency DAG, of the
// op that first writes the second. The DAG bounds every interleaving any stream schedule
// may produce, so the plan holds for one stream, for N, and for later re-schedules.
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <vector>

#include "csrc/program/program.h"

namespace nimble {

// A `.out` buffer and the views computed from it: every stable slot on one capture-time
// storage, and the ops that read or write it.
struct BufferGroup {
  int producer = -1;       // first op that writes it
  std::vector<int> users;  // every op that reads or writes it, ascending
  std::vector<int> slots;  // stable slots whose tensors live on it
  int64_t bytes = 0;
  c10::Device device = c10::kCPU;
  bool has_buffer = false;  // a slot of it is a buffer, not only views
  // false when it shares memory with an input, parameter, constant or output: its
  // storage must stay where it is and live across replays.
  bool plannable = true;
};

// The program's buffer groups (those holding at least one byte), by first writer; `values`
// are the slots' values (program_state.h).
std::vector<BufferGroup> buffer_groups(const Program& program,
                                       const std::vector<c10::IValue>& values);

// Items that each need `bytes` from `first` to `last` (inclusive, on any clock).
struct Lifetime {
  int64_t bytes = 0;
  int64_t first = 0;
  int64_t last = 0;
};
struct OffsetPlan {
  std::vector<int64_t> offsets;  // per item, a multiple of the alignment
  int64_t total_bytes = 0;       // the block they all fit in
};
// Offsets in one block such that items whose lifetimes overlap share no byte. Greedy,
// each item at the lowest offset that fits; the better of two orders. The live-bytes
// bound (the most bytes alive at one tick) is the least any plan can reach; greedy
// meets it on the chains and branches of the zoo's models, not always.
OffsetPlan plan_offsets(const std::vector<Lifetime>& items, int64_t alignment = 64);

struct MemoryPlan {
  int64_t buffer_bytes_before = 0;  // one storage per buffer
  int64_t buffer_bytes_after = 0;   // after sharing
  int buffers = 0;                  // buffers considered
  int storages = 0;                 // storages they now use
};

// Re-points the buffers' tensors in `values` (and the views computed from them) at shared
// storages; with `share` false, only measures.
MemoryPlan plan_buffer_memory(const Program& program, std::vector<c10::IValue>& values,
                              bool share = true);

}  // namespace nimble
