// The Replay around an executor: inputs, outputs and their ownership, whatever the
// backend. Runs on the CPU; the CUDA graph's behaviour is mimicked where it matters.
#include "csrc/runtime/replay.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "csrc/errors.h"
#include "csrc/program/program_builder.h"
#include "csrc/runtime/op_call.h"
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
  EXPECT_EQ(builds, 3);
}

// Scalars set between calls (an optimizer's learning rate) are the replay's state: the
// program keeps its captured constants, so registering again starts from those.
TEST(Replay, ScalarsChangeTheStateNotTheProgram) {
  at::NoGradGuard no_grad;
  const at::Tensor x = at::randn({8});
  ProgramBuilder b;
  b.add_input(x);
  const at::Tensor y = record(b, "aten::mul", "Scalar", {x, 2.5}).toTensor();
  b.set_outputs({y});
  Replay replay(b.finish({}), ExecutorOptions{});
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

}  // namespace
}  // namespace nimble
