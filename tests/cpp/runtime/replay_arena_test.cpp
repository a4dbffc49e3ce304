// The replay's private memory pool: a recorded replay is planned; later replays are
// served from the block; requests that differ, or whose bytes are still held, go to the
// ordinary allocator; memory outliving its replay or its arena stays valid.
#include "csrc/runtime/cpu/replay_arena.h"

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace nimble {
namespace {

// One "replay": op 0 makes a and b, op 1 makes c from them and drops a and b, op 2
// makes d and drops c. Returns d (alive at the end, like an output).
at::Tensor replay(ReplayArena& arena, int64_t n0 = 1000) {
  const ReplayArena::Scope scope(arena);
  arena.op_begins(0);
  at::Tensor a = at::full({n0}, 1.0f);
  at::Tensor b = at::full({2000}, 2.0f);
  arena.op_ends();
  arena.op_begins(1);
  at::Tensor c = at::cat({a, b});
  a.reset();
  b.reset();
  arena.op_ends();
  arena.op_begins(2);
  at::Tensor d = c.sum().reshape({1}) + at::zeros({3000});
  c.reset();
  arena.op_ends();
  return d;
}

TEST(ReplayArena, RecordsPlansAndServes) {
  Program program;
  ProgramState state;
  ReplayArena arena(program, state);
  EXPECT_TRUE(arena.recording());
  const at::Tensor first = replay(arena);
  arena.plan();
  EXPECT_FALSE(arena.recording());
  const ReplayArena::Stats s = arena.stats();
  EXPECT_TRUE(s.planned);
  EXPECT_GT(s.requests, 0);
  EXPECT_GT(s.planned_requests, 0);
  EXPECT_LT(s.planned_requests, s.requests);  // d, alive at the end, is not planned
  EXPECT_GT(s.block_bytes, 0);
  // a and b are alive together, and c with both: at least their bytes; but less than
  // every request's.
  EXPECT_GE(s.block_bytes, (1000 + 2000 + 3000) * 4);
  // The planned requests are a, b, c, the sum and the zeros; the zeros fit where a and b were.
  EXPECT_LT(s.block_bytes, (1000 + 2000 + 3000 + 1 + 3000) * 4);

  const at::Tensor second = replay(arena);
  EXPECT_TRUE(at::equal(first, second));
  EXPECT_EQ(arena.stats().served_last, s.planned_requests);
  EXPECT_EQ(arena.stats().fallbacks_last, 0);
  EXPECT_FALSE(arena.owns(second.data_ptr()));  // an output: never from the block
}

TEST(ReplayArena, OtherRequestsGoElsewhere) {
  Program program;
  ProgramState state;
  ReplayArena arena(program, state);
  replay(arena);
  arena.plan();
  // The first request is larger now: served by the ordinary allocator, the rest still
  // from the block, and the result is right.
  const at::Tensor d = replay(arena, 1500);
  EXPECT_FLOAT_EQ(d[0].item<float>(), 1500.0f + 4000.0f);
  EXPECT_GE(arena.stats().fallbacks_last, 1);
  EXPECT_GT(arena.stats().served_last, 0);
  // Outside a scope, nothing comes from the block.
  EXPECT_FALSE(arena.owns(at::empty({100}).data_ptr()));
}

TEST(ReplayArena, HeldMemoryIsNeverHandedOutAgain) {
  Program program;
  ProgramState state;
  ReplayArena arena(program, state);
  replay(arena);
  arena.plan();
  // Keep a planned tensor past its recorded lifetime, then replay again: its bytes must
  // not be served to anything else while it lives.
  at::Tensor kept;
  {
    const ReplayArena::Scope scope(arena);
    arena.op_begins(0);
    kept = at::full({1000}, 7.0f);
    arena.op_ends();
  }
  ASSERT_TRUE(arena.owns(kept.data_ptr()));
  const at::Tensor d = replay(arena);
  EXPECT_FLOAT_EQ(d[0].item<float>(), 1000.0f + 4000.0f);
  EXPECT_TRUE(at::equal(kept, at::full({1000}, 7.0f)));
  EXPECT_GE(arena.stats().fallbacks_last, 1);
}

// oneDNN's way: a bare pointer, freed through the allocator's raw deleter.
void raw_scratch(ReplayArena& arena, size_t bytes) {
  const ReplayArena::Scope scope(arena);
  arena.op_begins(0);
  void* raw = c10::GetCPUAllocator()->raw_allocate(bytes);
  static_cast<char*>(raw)[bytes - 1] = 1;
  c10::GetCPUAllocator()->raw_deallocate(raw);
  arena.op_ends();
}

TEST(ReplayArena, RawAllocations) {
  Program program;
  ProgramState state;
  ReplayArena arena(program, state);
  raw_scratch(arena, 256);
  arena.plan();
  raw_scratch(arena, 256);
  EXPECT_EQ(arena.stats().served_last, 1);
  raw_scratch(arena, 512);  // unlike the recording: the ordinary allocator's raw path
  EXPECT_EQ(arena.stats().served_last, 0);
  EXPECT_EQ(arena.stats().fallbacks_last, 1);
}

TEST(ReplayArena, MemoryOutlivesTheArena) {
  Program program;
  ProgramState state;
  auto arena = std::make_unique<ReplayArena>(program, state);
  replay(*arena);
  arena->plan();
  at::Tensor kept;
  {
    const ReplayArena::Scope scope(*arena);
    arena->op_begins(0);
    kept = at::full({1000}, 3.0f);
    arena->op_ends();
  }
  ASSERT_TRUE(arena->owns(kept.data_ptr()));
  arena.reset();  // the block stays until `kept` goes
  kept.add_(1.0f);
  EXPECT_TRUE(at::equal(kept, at::full({1000}, 4.0f)));
  kept.reset();
  // Plain allocations are untouched by the router.
  const at::Tensor plain = at::ones({10});
  EXPECT_FLOAT_EQ(plain.sum().item<float>(), 10.0f);
}

TEST(ReplayArena, DiscardedRecordingStartsOver) {
  Program program;
  ProgramState state;
  ReplayArena arena(program, state);
  replay(arena, 4000);
  arena.discard_recording();
  EXPECT_TRUE(arena.recording());
  replay(arena);
  arena.plan();
  replay(arena);
  EXPECT_EQ(arena.stats().fallbacks_last, 0);
}

}  // namespace
}  // namespace nimble
