// The CPU backend's streams (worker threads) and the events between them, replayed many
// times: every result equals eager's, whatever the interleaving. Built under ThreadSanitizer
// by tests/sanitize.sh, where a missing happens-before between streams is a report even
// when the numbers come out right.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include "csrc/program/program_builder.h"
#include "csrc/runtime/replay.h"
#include "tests/cpp/program/record_op.h"

namespace nimble {
namespace {

using testing::record;

constexpr int kBranches = 4;

// kBranches independent chains from one input, summed pairwise: logical streams to spread
// over the physical ones, and events wherever a sum reads another stream's chain.
BuiltProgram branching_program(const at::Tensor& x, const std::vector<at::Tensor>& weights) {
  ProgramBuilder b;
  b.add_input(x);
  for (const at::Tensor& w : weights) b.add_state(w);
  std::vector<at::Tensor> ends;
  for (const at::Tensor& w : weights) {
    const at::Tensor m = record(b, "aten::mul", "Tensor", {x, w}).toTensor();
    const at::Tensor r = record(b, "aten::relu", "", {m}).toTensor();
    ends.push_back(record(b, "aten::add", "Tensor", {r, w, 1}).toTensor());
  }
  const at::Tensor left = record(b, "aten::add", "Tensor", {ends[0], ends[1], 1}).toTensor();
  const at::Tensor right = record(b, "aten::add", "Tensor", {ends[2], ends[3], 1}).toTensor();
  const at::Tensor sum = record(b, "aten::add", "Tensor", {left, right, 1}).toTensor();
  b.set_outputs({sum, ends[3]});
  return b.finish({});
}

// The same ops in the same order: bitwise equal to the replay's result.
at::Tensor eager(const at::Tensor& x, const std::vector<at::Tensor>& weights) {
  std::vector<at::Tensor> ends;
  for (const at::Tensor& w : weights) ends.push_back(at::relu(x * w) + w);
  return (ends[0] + ends[1]) + (ends[2] + ends[3]);
}

std::vector<at::Tensor> random_weights() {
  std::vector<at::Tensor> weights;
  for (int i = 0; i < kBranches; ++i) weights.push_back(at::randn({64}));
  return weights;
}

void expect_replays_match_eager(Replay& replay, const std::vector<at::Tensor>& weights, int calls) {
  for (int call = 0; call < calls; ++call) {
    const at::Tensor x = at::randn({64});
    const std::vector<at::Tensor> out = replay.run({x}, /*copy_outputs=*/true);
    ASSERT_EQ(out.size(), 2u);
    ASSERT_TRUE(at::equal(out[0], eager(x, weights))) << "call " << call;
    ASSERT_TRUE(at::equal(out[1], at::relu(x * weights[3]) + weights[3])) << "call " << call;
  }
}

TEST(CpuStreams, EveryStreamCountMatchesEager) {
  at::NoGradGuard no_grad;
  const std::vector<at::Tensor> weights = random_weights();
  for (int streams : {2, 3, 4}) {
    ExecutorOptions options;
    options.streams = streams;
    options.cores = streams;  // one intra-op thread per stream
    Replay replay(branching_program(at::randn({64}), weights), options);
    ASSERT_EQ(replay.executor().num_streams(), streams);
    expect_replays_match_eager(replay, weights, 100);
  }
}

TEST(CpuStreams, DelaysThatReorderTheStreamsChangeNoResult) {
  at::NoGradGuard no_grad;
  const std::vector<at::Tensor> weights = random_weights();
  BuiltProgram built = branching_program(at::randn({64}), weights);
  const size_t ops = built.program.ops.size();
  ExecutorOptions options;
  options.streams = 4;
  options.cores = 4;
  // Early ops of some chains held back: their readers on other streams must wait.
  options.stress_delays_us.assign(ops, 0);
  for (size_t op = 0; op < ops; op += 3) options.stress_delays_us[op] = 200;
  Replay replay(std::move(built), options);
  expect_replays_match_eager(replay, weights, 30);
}

TEST(CpuStreams, ExecutorsStartAndStopTheirWorkersCleanly) {
  at::NoGradGuard no_grad;
  const std::vector<at::Tensor> weights = random_weights();
  // Destroyed right after their first replay, or before any: shutdown races with workers
  // that are still going back to wait for the next replay.
  for (int round = 0; round < 20; ++round) {
    ExecutorOptions options;
    options.streams = 2 + round % 3;
    options.cores = options.streams;
    Replay replay(branching_program(at::randn({64}), weights), options);
    if (round % 2 == 0) expect_replays_match_eager(replay, weights, 1);
  }
}

}  // namespace
}  // namespace nimble
