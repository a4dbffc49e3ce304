// The Replay around an executor: inputs, outputs and their ownership, whatever the
// backend. Runs on the CPU; the CUDA graph's behaviour is mimicked where it matters.
#include "csrc/runtime/replay.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>

#include "csrc/errors.h"
#include "csrc/program/program_builder.h"
#include "csrc/runtime/op_call.h"
#include "csrc/pipeline/replay_pipeline.h"
#include "tests/cpp/program/record_op.h"

namespace nimble {
namespace {

using testing::record;

// Like a CUDA graph: the ops ran once when it was made, and every replay writes its
// results into the tensors of that first run, never touching the state's values.
class OutputReusingExecutor final : public Executor {
 public:
  OutputReusingExecutor(const Program& program, ProgramState& state)
      : program_(program), state_(state) {
    info_.logical_stream.assign(program.ops.size(), 0);
    info_.physical_stream.assign(program.ops.size(), 0);
    std::vector<c10::IValue> stack;
    for (size_t i = 0; i < program.ops.size(); ++i)
      call_op(program.ops[i], state.ops[i], state.values, stack);
  }
  void run() override {
    std::vector<c10::IValue> scratch = state_.values;
    std::vector<c10::IValue> stack;
    for (size_t i = 0; i < program_.ops.size(); ++i)
      call_op(program_.ops[i], state_.ops[i], scratch, stack);
    for (int slot : program_.outputs) {
      if (!program_.slots[slot].is_stable())
        state_.values[slot].toTensor().copy_(scratch[slot].toTensor());
    }
  }
  std::vector<OpTiming> run_timed() override {
    run();
    return {};
  }
  std::string backend() const override { return "test-graph"; }
  int num_streams() const override { return 1; }
  const ScheduleInfo& schedule() const override { return info_; }
  bool reuses_outputs() const override { return true; }

 private:
  const Program& program_;
  ProgramState& state_;
  ScheduleInfo info_;
};

BuiltProgram two_output_program(const at::Tensor& x, const at::Tensor& w) {
  ProgramBuilder b;
  b.add_input(x);
  b.add_state(w);
  const at::Tensor y = record(b, "aten::mul", "Tensor", {x, w}).toTensor();
  const at::Tensor z = record(b, "aten::relu", "", {y}).toTensor();
  const at::Tensor s = record(b, "aten::add", "Tensor", {z, w, 1}).toTensor();
  b.set_outputs({z, s});
  return b.finish({});
}

TEST(Replay, ExecutorThatReusesItsOutputsHandsOutCorrectOutputsOnEveryCall) {
  at::NoGradGuard no_grad;
  const at::Tensor w = at::randn({8});
  Replay replay(two_output_program(at::randn({8}), w), ExecutorOptions{},
                [](const Program& p, ProgramState& s, const ExecutorOptions&) {
                  return std::make_unique<OutputReusingExecutor>(p, s);
                });
  std::vector<std::vector<at::Tensor>> kept;
  std::vector<at::Tensor> inputs;
  for (int call = 0; call < 4; ++call) {
    inputs.push_back(at::randn({8}));
    kept.push_back(replay.run({inputs.back()}, /*copy_outputs=*/true));
  }
  // Every call's outputs are right, and a later call did not change an earlier one's.
  for (int call = 0; call < 4; ++call) {
    const at::Tensor z = at::relu(inputs[call] * w);
    ASSERT_EQ(kept[call].size(), 2u);
    EXPECT_TRUE(at::equal(kept[call][0], z)) << "call " << call;
    EXPECT_TRUE(at::equal(kept[call][1], z + w)) << "call " << call;
  }
  // Without copies the caller gets the executor's own memory, the same every call.
  const auto a = replay.run({inputs[0]}, /*copy_outputs=*/false);
  const auto b = replay.run({inputs[1]}, /*copy_outputs=*/false);
  EXPECT_TRUE(a[0].is_same(b[0]));
  EXPECT_TRUE(at::equal(b[0], at::relu(inputs[1] * w)));
}

TEST(Replay, FreshOutputsOfTheCpuBackendAreNotReused) {
  at::NoGradGuard no_grad;
  const at::Tensor w = at::randn({8});
  Replay replay(two_output_program(at::randn({8}), w), ExecutorOptions{});
  const at::Tensor x1 = at::randn({8});
  const at::Tensor x2 = at::randn({8});
  const auto first = replay.run({x1}, /*copy_outputs=*/false);
  const auto second = replay.run({x2}, /*copy_outputs=*/false);
  EXPECT_FALSE(first[1].is_same(second[1]));
  EXPECT_TRUE(at::equal(first[1], at::relu(x1 * w) + w));
  EXPECT_TRUE(at::equal(second[1], at::relu(x2 * w) + w));
}

TEST(Replay, FailedExecutorRebuildKeepsTheReplayWorking) {
  at::NoGradGuard no_grad;
  const at::Tensor w = at::randn({8});
  int builds = 0;
  Replay replay(two_output_program(at::randn({8}), w), ExecutorOptions{},
                [&builds](const Program& p, ProgramState& s,
                          const ExecutorOptions& options) -> std::unique_ptr<Executor> {
                  ++builds;
                  if (options.streams == 3) throw std::runtime_error("refused");
                  return make_executor(p, s, options);
                });
  ExecutorOptions three;
  three.streams = 3;
  EXPECT_THROW(replay.set_executor_options(three), std::runtime_error);
  EXPECT_EQ(replay.executor_options().streams, 1);
  const at::Tensor x = at::randn({8});
  EXPECT_TRUE(at::equal(replay.run({x}, true)[1], at::relu(x * w) + w));
  EXPECT_EQ(builds, 2);  // the old executor stayed: nothing built a third time
}

// x * 2.5, the scalar an argument that set_scalars may replace.
BuiltProgram times_two_and_a_half() {
  const at::Tensor x = at::randn({8});
  ProgramBuilder b;
  b.add_input(x);
  const at::Tensor y = record(b, "aten::mul", "Scalar", {x, 2.5}).toTensor();
  b.set_outputs({y});
  return b.finish({});
}

// A failed rebuild (issue 45): the executor is built beside the old one and replaces it
// only when the build succeeds.

// Builds the graph twin (an executor that records addresses and writes the state's output
// values while it is built, as a CUDA graph does), then fails when told to.
Replay::ExecutorFactory failing_after_build(std::shared_ptr<bool> fail) {
  return [fail](const Program& p, ProgramState& s, const ExecutorOptions& o) {
    auto built = make_executor(p, s, o);
    if (*fail) throw std::runtime_error("injected build failure");
    return built;
  };
}

ExecutorOptions graph_twin() {
  ExecutorOptions options;
  options.graph_twin = true;
  return options;
}

TEST(ExecutorRebuild, AFailedRebuildKeepsTheOldExecutorAndItsOutputs) {
  at::NoGradGuard no_grad;
  const at::Tensor w = at::randn({8});
  auto fail = std::make_shared<bool>(false);
  Replay replay(two_output_program(at::randn({8}), w), graph_twin(), failing_after_build(fail));
  *fail = true;
  ExecutorOptions two = graph_twin();
  two.streams = 2;
  EXPECT_THROW(replay.set_executor_options(two), std::runtime_error);
  EXPECT_EQ(replay.executor().backend(), "cpu-graph");
  for (int call = 0; call < 3; ++call) {
    const at::Tensor x = at::randn({8});
    const auto out = replay.run({x}, /*copy_outputs=*/true);
    EXPECT_TRUE(at::equal(out[0], at::relu(x * w))) << "call " << call;
    EXPECT_TRUE(at::equal(out[1], at::relu(x * w) + w)) << "call " << call;
  }
}

TEST(ExecutorRebuild, AFailedRebuildAfterAMovedParameterRaisesUntilABuildSucceeds) {
  at::NoGradGuard no_grad;
  at::Tensor w = at::randn({8});
  auto fail = std::make_shared<bool>(false);
  Replay replay(two_output_program(at::randn({8}), w), graph_twin(), failing_after_build(fail));
  const at::Tensor x = at::randn({8});
  replay.run({x}, true);
  // `p.data = t`: the twin recorded the old address, so the replay must build again.
  w.set_(at::randn({8}));
  *fail = true;
  EXPECT_THROW(replay.run({x}, true), std::runtime_error);
  EXPECT_THROW(replay.run({x}, true), std::runtime_error);  // raises again, never crashes
  EXPECT_THROW(replay.executor(), std::runtime_error);
  *fail = false;
  const auto out = replay.run({x}, true);
  EXPECT_TRUE(at::equal(out[1], at::relu(x * w) + w));
  EXPECT_EQ(replay.executor().backend(), "cpu-graph");
}

TEST(ExecutorRebuild, NewScalarsThatFailToBuildLeaveTheOldOnes) {
  at::NoGradGuard no_grad;
  auto fail = std::make_shared<bool>(false);
  Replay replay(times_two_and_a_half(), graph_twin(), failing_after_build(fail));
  replay.register_scalars({{0, 1, -1}});
  *fail = true;
  EXPECT_THROW(replay.set_scalars({4.0}), std::runtime_error);
  const at::Tensor x2 = at::randn({8});
  EXPECT_TRUE(at::allclose(replay.run({x2}, true)[0], x2 * 2.5));
  *fail = false;
  replay.set_scalars({4.0});
  EXPECT_TRUE(at::allclose(replay.run({x2}, true)[0], x2 * 4.0));
}

// Scalars set between calls (an optimizer's learning rate) are the replay's state: the
// program keeps its captured constants, so registering again starts from those.
TEST(Replay, ScalarsChangeTheStateNotTheProgram) {
  at::NoGradGuard no_grad;
  Replay replay(times_two_and_a_half(), ExecutorOptions{});
  replay.register_scalars({{0, 1, -1}});
  replay.set_scalars({4.0});
  const at::Tensor x2 = at::randn({8});
  EXPECT_TRUE(at::allclose(replay.run({x2}, true)[0], x2 * 4.0));
  EXPECT_EQ(replay.program().ops[0].args[1].constant.toDouble(), 2.5);
  replay.set_scalars({-1.0});
  EXPECT_TRUE(at::allclose(replay.run({x2}, true)[0], -x2));
  replay.register_scalars({{0, 1, -1}});
  EXPECT_TRUE(at::allclose(replay.run({x2}, true)[0], x2 * 2.5));
  EXPECT_THROW(replay.set_scalars({1.0, 2.0}), BadInput);
}

// The stages after the hand-over (replay_pipeline.h): the executor is made as the one
// options type asks (streams, cores, the graph twin; the pool with the memory plan).
TEST(ReplayPipeline, BuildsTheReplayTheOptionsAskFor) {
  at::NoGradGuard no_grad;
  const at::Tensor x = at::randn({2, 3});
  ProgramBuilder b;
  b.add_input(x);
  const at::Tensor y = record(b, "aten::sin", "", {x}).toTensor();
  const at::Tensor z = record(b, "aten::cos", "", {y}).toTensor();
  b.set_outputs({z});
  BuildOptions options;
  options.streams = 2;
  options.cores = 3;
  options.plan_memory = false;
  options.graph_twin = true;
  const ExecutorOptions executor = executor_options(options);
  EXPECT_EQ(executor.streams, 2);
  EXPECT_EQ(executor.cores, 3);
  EXPECT_FALSE(executor.memory_pool);
  EXPECT_TRUE(executor.graph_twin);
  const std::shared_ptr<Replay> replay = build_replay(b, options);
  EXPECT_EQ(replay->executor_options().streams, 2);
  EXPECT_TRUE(replay->executor_options().graph_twin);
  EXPECT_EQ(replay->program().buffer_bytes, replay->program().buffer_bytes_unplanned);
  const at::Tensor fresh = at::randn({2, 3});
  EXPECT_TRUE(at::allclose(replay->run({fresh}, true).at(0), at::cos(at::sin(fresh))));
}

}  // namespace
}  // namespace nimble
