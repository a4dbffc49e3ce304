// The replay's private memory pool: a recorded replay is planned; later replays are
// served from the block; requests that differ, or whose bytes are still held, go to the
// ordinary allocator; memory outliving its replay or its arena stays valid, freed on any
// thread; the results nimble's kernels make past the dispatcher (kernels::empty_output) are
// at::empty's tensors, served from the block like it.
#include "csrc/runtime/cpu/replay_arena.h"

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "csrc/kernels/cpu/torch_ops/empty_output.h"

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

// Ops as nimble's kernels make their results (kernels::empty_output): op 0 makes a, op 1 b
// from it, op 2 the output. With `keep`, a is kept past its op, as a caller keeps an output.
at::Tensor kernel_replay(ReplayArena& arena, float value, at::Tensor* keep = nullptr) {
  const at::Tensor like = at::ones({1});
  const ReplayArena::Scope scope(arena);
  arena.op_begins(0);
  at::Tensor a = kernels::empty_channels_last({2, 8, 4, 4}, like);
  a.fill_(value);
  arena.op_ends();
  arena.op_begins(1);
  at::Tensor b = kernels::empty_output({2, 8}, like);
  b.copy_(a.mean({2, 3}));
  if (keep != nullptr) *keep = a;
  a.reset();
  arena.op_ends();
  arena.op_begins(2);
  at::Tensor out = b + 1.0f;
  b.reset();
  arena.op_ends();
  return out;
}

TEST(ReplayArena, KernelOutputsAreAtEmptysTensorsServedFromTheBlock) {
  const at::Tensor like = at::ones({1});
  const at::Tensor made = kernels::empty_channels_last({2, 8, 4, 4}, like);
  const at::Tensor eager =
      at::empty({2, 8, 4, 4}, like.options().memory_format(at::MemoryFormat::ChannelsLast));
  EXPECT_EQ(made.strides(), eager.strides());
  EXPECT_EQ(made.key_set(), eager.key_set());
  EXPECT_EQ(made.scalar_type(), eager.scalar_type());
  EXPECT_FALSE(made.requires_grad());
  {
    const c10::InferenceMode inference;
    EXPECT_EQ(kernels::empty_output({3}, like).key_set(), at::empty({3}, like.options()).key_set());
  }

  Program program;
  ProgramState state;
  ReplayArena arena(program, state);
  kernel_replay(arena, 1.0f);
  arena.plan();
  EXPECT_TRUE(at::allclose(kernel_replay(arena, 2.0f), at::full({2, 8}, 3.0f)));
  EXPECT_EQ(arena.stats().served_last, arena.stats().planned_requests);
  EXPECT_EQ(arena.stats().fallbacks_last, 0);
  // A result kept past its lifetime keeps its bytes: the next replays make theirs elsewhere.
  at::Tensor kept;
  kernel_replay(arena, 4.0f, &kept);
  ASSERT_TRUE(arena.owns(kept.data_ptr()));
  for (float value : {5.0f, 6.0f}) {
    EXPECT_TRUE(at::allclose(kernel_replay(arena, value), at::full({2, 8}, value + 1.0f)));
    EXPECT_GE(arena.stats().fallbacks_last, 1);
  }
  EXPECT_TRUE(at::equal(kept, at::full({2, 8, 4, 4}, 4.0f)));
}

TEST(ReplayArena, MemoryFreedOnAnotherThreadWhileReplaying) {
  Program program;
  ProgramState state;
  ReplayArena arena(program, state);
  replay(arena);
  arena.plan();
  // The first from the block, the others (its bytes held) from the ordinary allocator.
  std::vector<at::Tensor> kept;
  for (int i = 0; i < 64; ++i) {
    const ReplayArena::Scope scope(arena);
    arena.op_begins(0);
    kept.push_back(at::full({1000}, 7.0f));
    arena.op_ends();
  }
  ASSERT_TRUE(arena.owns(kept.front().data_ptr()));
  std::thread dropper([&kept] {
    for (at::Tensor& t : kept) {
      t.reset();
      std::this_thread::yield();
    }
  });
  for (int i = 0; i < 200; ++i) EXPECT_FLOAT_EQ(replay(arena)[0].item<float>(), 5000.0f);
  dropper.join();
  replay(arena);
  EXPECT_EQ(arena.stats().fallbacks_last, 0);
}

}  // namespace
}  // namespace nimble
