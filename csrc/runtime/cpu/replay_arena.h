#pragma once
// A private memory pool for single-stream CPU replays: the CPU counterpart of a CUDA
// graph's private pool, so that a replay needs no more memory than eager does.
//
// The first replay is recorded: each allocation the replay thread makes inside an op
// (results of ops without `.out`, kernels' scratch memory) with its op, its rank among
// that op's allocations and the clock ticks at which it is made and freed. One block is
// then planned for those allocations together with the program's `.out` buffers: two of
// them share bytes only if their lifetimes in the replay's op order do not overlap.
// Later replays serve each recorded request from its planned offset. A request that
// differs from the recording (another size, or an extra one), or whose bytes a live
// allocation still holds, goes to the ordinary allocator instead: a stale plan can cost
// memory, never correctness. Allocations alive when the replay ends (outputs handed to
// the caller, caches) are never planned.
//
// Torch allocates CPU memory through one process-wide allocator, so the pool serves
// through a router installed as that allocator once, at the first arena; threads outside
// a replay's scope, and requests the pool does not serve, go to the allocator that was
// there before.
#include <c10/core/Storage.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "csrc/program/program.h"
#include "csrc/program/program_state.h"
#include "csrc/runtime/executor.h"

namespace nimble {

class ArenaPool;  // the pool's state, shared with the memory it has handed out

class ReplayArena {
 public:
  // `program` and `state` must outlive the arena; the state's buffers are moved into the
  // block by `plan` and back into storages of their own (shared as at build) when the arena
  // goes.
  ReplayArena(const Program& program, ProgramState& state);
  ~ReplayArena();
  ReplayArena(const ReplayArena&) = delete;
  ReplayArena& operator=(const ReplayArena&) = delete;

  // Routes the calling thread's CPU allocations to the pool for one replay.
  class Scope {
   public:
    explicit Scope(ReplayArena& arena);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    ArenaPool* previous_;
  };

  bool recording() const;
  // The replay thread marks each op, so that allocations are told apart by op.
  void op_begins(int op);
  void op_ends();
  // After a successful recorded replay: plans the block and moves the buffers into it.
  void plan();
  // A failed replay's recording is dropped; the next replay records again.
  void discard_recording();

  using Stats = PoolStats;
  Stats stats() const;
  // Whether `ptr` points into the pool's block.
  bool owns(const void* ptr) const;

 private:
  void restore_buffers();

  const Program& program_;
  ProgramState& state_;
  std::shared_ptr<ArenaPool> pool_;
  std::vector<int> moved_slots_;  // buffer and view slots whose storage is in the block
};

}  // namespace nimble
