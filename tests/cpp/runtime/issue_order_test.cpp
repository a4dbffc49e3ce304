// The graph backends issue a multi-stream plan in its issue order, the critical path first
// (csrc/scheduling/issue_order.h). The CPU twin runs its ops in the order the CUDA graph is
// captured in, so that order shows here, on a CPU: the long branch of a fork starts before
// the short one that comes first in the trace, and the results stay eager's.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "csrc/program/program_builder.h"
#include "csrc/runtime/replay.h"
#include "tests/cpp/program/record_op.h"

namespace nimble {
namespace {

using testing::record;

// mul, then a short branch (relu) and, after it in the trace, a long one (sigmoid, tanh,
// exp, neg), joined by an add.
BuiltProgram fork_program(const at::Tensor& x, const at::Tensor& w) {
  ProgramBuilder b;
  b.add_input(x);
  b.add_state(w);
  const at::Tensor common = record(b, "aten::mul", "Tensor", {x, w}).toTensor();
  const at::Tensor short_end = record(b, "aten::relu", "", {common}).toTensor();
  at::Tensor long_end = common;
  for (const char* name : {"aten::sigmoid", "aten::tanh", "aten::exp", "aten::neg"})
    long_end = record(b, name, "", {long_end}).toTensor();
  b.set_outputs({record(b, "aten::add", "Tensor", {short_end, long_end, 1}).toTensor()});
  return b.finish({});
}

at::Tensor eager(const at::Tensor& x, const at::Tensor& w) {
  const at::Tensor common = x * w;
  return at::relu(common) + at::neg(at::exp(at::tanh(at::sigmoid(common))));
}

// The names of the ops (without overload) that one timed replay on the twin with `streams` streams
// started, in the order they started, after replays whose results must equal eager's.
std::vector<std::string> twin_issue_order(int streams) {
  at::NoGradGuard no_grad;
  const at::Tensor w = at::randn({32});
  ExecutorOptions options;
  options.graph_twin = true;
  options.streams = streams;
  Replay replay(fork_program(at::randn({32}), w), options);
  EXPECT_EQ(replay.executor().num_streams(), streams);
  for (int call = 0; call < 3; ++call) {
    const at::Tensor x = at::randn({32});
    const std::vector<at::Tensor> out = replay.run({x}, /*copy_outputs=*/true);
    EXPECT_EQ(out.size(), 1u);
    EXPECT_TRUE(at::equal(out.at(0), eager(x, w))) << "call " << call;
  }
  std::vector<OpTiming> timings = replay.run_timed({at::randn({32})}).ops;
  std::stable_sort(timings.begin(), timings.end(),
                   [](const OpTiming& a, const OpTiming& b) { return a.start_ns < b.start_ns; });
  std::vector<std::string> names;
  for (const OpTiming& t : timings) {
    const std::string& name = replay.program().ops[t.op].name;
    names.push_back(name.substr(0, name.find('.')));  // "aten::mul.out": "aten::mul"
  }
  return names;
}

size_t position(const std::vector<std::string>& names, const std::string& name) {
  return static_cast<size_t>(std::find(names.begin(), names.end(), name) - names.begin());
}

TEST(IssueOrder, TheGraphTwinRunsTheLongBranchOfAForkFirst) {
  const std::vector<std::string> names = twin_issue_order(2);
  ASSERT_EQ(names.size(), 7u);
  EXPECT_LT(position(names, "aten::sigmoid"), position(names, "aten::relu"))
      << "the short branch was issued first";
}

TEST(IssueOrder, OneStreamKeepsTheTraceOrder) {
  EXPECT_EQ(twin_issue_order(1),
            (std::vector<std::string>{"aten::mul", "aten::relu", "aten::sigmoid", "aten::tanh",
                                      "aten::exp", "aten::neg", "aten::add"}));
}

}  // namespace
}  // namespace nimble
