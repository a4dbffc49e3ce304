// The mechanisms of the CUDA runtime's fixes (issue 45) that a CPU can show: the choice of
// pool streams, the refusal of host-device copies, SymInt sizes returned by ops, explicit
// generators in the state snapshot, FP32 references. A failed rebuild: replay_test.cpp.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "csrc/errors.h"
#include "csrc/kernels/cuda/fp32_reference.h"
#include "csrc/program/program_builder.h"
#include "csrc/runtime/host_device_copies.h"
#include "csrc/runtime/pool_streams.h"
#include "csrc/runtime/replay.h"
#include "csrc/runtime/state_snapshot.h"
#include "tests/cpp/program/record_op.h"

namespace nimble {
namespace {

using testing::record;

// A pool handing out streams round-robin, as torch's does, to us and to others.
struct RoundRobinPool {
  int size = 4;
  int next = 0;
  int take() { return next++ % size; }
};

TEST(PoolStreams, DistinctStreamsFromARoundRobinPool) {
  RoundRobinPool pool;
  const auto streams = take_distinct_streams<int>(3, pool.size, [&](int) { return pool.take(); });
  EXPECT_EQ(streams, (std::vector<int>{0, 1, 2}));
}

TEST(PoolStreams, RepeatsHandedOutBetweenOurDrawsAreSkipped) {
  // Another user of the pool took streams in between: the pool comes round to ours again.
  RoundRobinPool pool;
  int draws = 0;
  const auto streams = take_distinct_streams<int>(3, pool.size, [&](int) {
    ++draws;
    const int s = pool.take();
    pool.take();  // someone else's draw
    pool.take();
    pool.take();
    return s;
  });
  // Every fourth stream is ours: 0, 0, 0, ... The pool cannot give another one to us within
  // its size, so the plan runs on one stream (correct, without concurrency).
  EXPECT_EQ(streams, (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(draws, 1 + 2 * pool.size);
}

TEST(PoolStreams, MoreStreamsThanThePoolHasRepeat) {
  RoundRobinPool pool;
  const auto streams = take_distinct_streams<int>(6, pool.size, [&](int) { return pool.take(); });
  ASSERT_EQ(streams.size(), 6u);
  EXPECT_EQ(std::vector<int>(streams.begin(), streams.begin() + 4), (std::vector<int>{0, 1, 2, 3}));
}

// `_to_copy` of a CPU program, with the devices of its slots as a CUDA program has them.
struct CopyProgram {
  BuiltProgram built;
  int copy = -1;
  int input_slot = -1;
};

CopyProgram to_copy_program() {
  const at::Tensor x = at::randn({4});
  ProgramBuilder b;
  CopyProgram p;
  p.input_slot = b.add_input(x);
  const at::Tensor y = record(b, "aten::_to_copy", "",
                              {x, c10::IValue(at::kDouble), c10::IValue(), c10::IValue(),
                               c10::IValue(), false, c10::IValue()})
                           .toTensor();
  const at::Tensor z = record(b, "aten::mul", "Tensor", {y, y}).toTensor();
  b.set_outputs({z});
  p.built = b.finish({});
  for (size_t i = 0; i < p.built.program.ops.size(); ++i) {
    if (p.built.program.ops[i].handle.operator_name().name == "aten::_to_copy")
      p.copy = static_cast<int>(i);
  }
  return p;
}

TEST(HostDeviceCopies, ACopyFromTheDeviceToTheHostIsRefusedNamingTheOp) {
  CopyProgram p = to_copy_program();
  ASSERT_GE(p.copy, 0);
  Program& program = p.built.program;
  EXPECT_FALSE(copies_between_host_and_device(program, p.copy));  // CPU to CPU
  EXPECT_NO_THROW(refuse_host_device_copies(program));
  program.slots[p.input_slot].device = c10::Device(c10::DeviceType::CUDA, 0);
  EXPECT_TRUE(copies_between_host_and_device(program, p.copy));
  try {
    refuse_host_device_copies(program);
    FAIL() << "a copy from the device to the host was not refused";
  } catch (const UnsupportedOp& e) {
    EXPECT_NE(std::string(e.what()).find("aten::_to_copy"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("between host and device"), std::string::npos);
  }
}

TEST(HostDeviceCopies, OtherOpsMixingDevicesAreNotCopies) {
  // A CUDA op given a CPU tensor (a 0-dim scalar) reads it as a number at launch.
  CopyProgram p = to_copy_program();
  Program& program = p.built.program;
  for (SlotInfo& slot : program.slots) slot.device = c10::Device(c10::DeviceType::CUDA, 0);
  program.slots[p.input_slot].device = c10::Device(c10::DeviceType::CPU);
  for (size_t i = 0; i < program.ops.size(); ++i) {
    if (static_cast<int>(i) != p.copy)
      EXPECT_FALSE(copies_between_host_and_device(program, static_cast<int>(i)))
          << program.ops[i].name;
  }
  EXPECT_TRUE(copies_between_host_and_device(program, p.copy));  // host to device
}

TEST(SizesReturnedByOps, SymIntReturnsAreShapesNotValues) {
  // flash attention as CUDA runs it in fp16: (output, logsumexp, cum_seq_q, cum_seq_k,
  // SymInt max_q, SymInt max_k, rng_state, unused, debug_attn_mask). Recorded, not run.
  const at::Tensor q = at::randn({1, 2, 16, 8});
  ProgramBuilder b;
  b.add_input(q);
  const std::vector<c10::IValue> args{q, q, q, 0.0, false, false, c10::IValue()};
  const std::vector<c10::IValue> returns{at::randn({1, 2, 16, 8}),
                                         at::randn({1, 2, 16}),
                                         at::empty({0}),
                                         at::empty({0}),
                                         int64_t{16},
                                         int64_t{16},
                                         at::empty({2}, at::kLong),
                                         at::empty({0}),
                                         at::empty({0})};
  EXPECT_NO_THROW(b.add_op("aten::_scaled_dot_product_flash_attention", "", args, returns));
  // A plain int return is a number the op computed: still refused.
  EXPECT_THROW(b.add_op("aten::_nnz", "", {q}, {int64_t{3}}), NotStatic);
}

// x + torch.randn(16, generator=g)
BuiltProgram input_plus_noise(const at::Generator& g) {
  const at::Tensor x = at::randn({16});
  ProgramBuilder b;
  b.add_input(x);
  const at::Tensor r = record(b, "aten::randn", "generator",
                              {c10::IValue(std::vector<int64_t>{16}), c10::IValue(g), c10::IValue(),
                               c10::IValue(), c10::IValue(), c10::IValue()})
                           .toTensor();
  const at::Tensor y = record(b, "aten::add", "Tensor", {x, r, 1}).toTensor();
  b.set_outputs({y});
  return b.finish({});
}

ExecutorOptions graph_twin() {
  ExecutorOptions options;
  options.graph_twin = true;
  return options;
}

TEST(StateSnapshot, ExplicitGeneratorsArePutBack) {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(1234);
  BuiltProgram built = input_plus_noise(g);
  ASSERT_EQ(explicit_generators(built.program).size(), 1u);

  StateSnapshot snapshot(built.program, built.state);
  EXPECT_EQ(snapshot.num_generators(), 2);  // the CPU's default one and g
  const at::Tensor before = g.get_state();
  at::randn({16}, g);
  snapshot.restore();
  EXPECT_TRUE(at::equal(g.get_state(), before));
}

TEST(StateSnapshot, BuildingTheGraphTwinLeavesAnExplicitGeneratorAsItWas) {
  at::NoGradGuard no_grad;
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(99);
  BuiltProgram built = input_plus_noise(g);  // recording the op drew from g once
  at::Generator twin_of_g = g.clone();
  Replay replay(std::move(built), graph_twin());  // warm-up and recording draw from g
  const at::Tensor x2 = at::randn({16});
  // The first replay draws what eager would draw next from g.
  EXPECT_TRUE(at::equal(replay.run({x2}, true)[0], x2 + at::randn({16}, twin_of_g)));
}

TEST(Fp32Reference, TurnsTf32OffForItsScopeAndRestoresIt) {
  at::Context& context = at::globalContext();
  const bool cudnn = context.allowTF32CuDNN();
  const at::Float32MatmulPrecision matmul = context.float32MatmulPrecision();
  context.setAllowTF32CuDNN(true);
  context.setFloat32MatmulPrecision("high");
  {
    const kernels::cuda::Fp32Reference exact;
    EXPECT_FALSE(context.allowTF32CuDNN());
    EXPECT_FALSE(context.allowTF32CuBLAS());
  }
  EXPECT_TRUE(context.allowTF32CuDNN());
  EXPECT_EQ(context.float32MatmulPrecision(), at::Float32MatmulPrecision::HIGH);
  context.setAllowTF32CuDNN(cudnn);
  context.setFloat32MatmulPrecision(matmul == at::Float32MatmulPrecision::HIGHEST ? "highest"
                                    : matmul == at::Float32MatmulPrecision::HIGH  ? "high"
                                                                                  : "medium");
}

}  // namespace
}  // namespace nimble
