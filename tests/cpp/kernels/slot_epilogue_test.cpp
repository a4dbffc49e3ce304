// The tuned-kernel slot's epilogues come from the pass stage (passes/slot_epilogues.h): the pass
// finds them on the recorded ops, the built program keeps them (Program::epilogues), and
// tunable_site takes them from there, checking only what the built program decides.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "csrc/kernels/tunable_op.h"
#include "csrc/passes/trace_passes.h"
#include "tests/cpp/program/record_op.h"

namespace nimble {
namespace {

using testing::record;

// What prepare does after the capture: the pass stage, then the program.
Program build(ProgramBuilder& b, const BuildOptions& options = {}) {
  TracePassResults passes = run_trace_passes(b, options);
  return b.finish(options, std::move(passes)).program;
}

at::Tensor convolution(ProgramBuilder& b, const at::Tensor& x, const at::Tensor& w) {
  const std::vector<int64_t> one{1, 1}, zero{0, 0};
  return record(b, "aten::convolution", "",
                {x, w, c10::IValue(), one, one, one, false, zero, int64_t{1}})
      .toTensor();
}

int op_named(const Program& p, const std::string& name) {
  for (size_t i = 0; i < p.ops.size(); ++i)
    if (p.ops[i].name == name) return static_cast<int>(i);
  return -1;
}

TEST(SlotEpilogue, ResidualAddAndActivationComeFromThePass) {
  at::NoGradGuard no_grad;
  const at::Tensor x = at::randn({1, 4, 6, 6});
  const at::Tensor w1 = at::randn({4, 4, 3, 3}), w2 = at::randn({4, 4, 3, 3});
  ProgramBuilder b;
  b.add_input(x);
  b.add_state(w1);
  b.add_state(w2);
  const at::Tensor residual = convolution(b, x, w1);    // op 0
  const at::Tensor y = convolution(b, residual, w2);    // op 1
  record(b, "aten::add_", "Tensor", {y, residual, 1});  // op 2
  record(b, "aten::hardtanh_", "", {y, 0.0, 6.0});      // op 3
  const at::Tensor z = record(b, "aten::mul", "Tensor", {y, y}).toTensor();
  b.set_outputs({z});
  Program p = build(b);

  ASSERT_EQ(p.epilogues.size(), 1u);
  const OpEpilogue& found = p.epilogues[0];
  EXPECT_EQ(found.op, 1);
  EXPECT_EQ(found.absorbed, (std::vector<int>{2, 3}));
  EXPECT_TRUE(found.epilogue.residual);
  EXPECT_EQ(found.epilogue.activation, Activation::kClamp);
  EXPECT_EQ(found.epilogue.hi, 6.0);
  EXPECT_EQ(found.residual_slot, p.ops[0].outputs.at(0).slot);

  const auto site = kernels::tunable_site(p, 1);
  ASSERT_TRUE(site);
  EXPECT_EQ(site->absorbed, found.absorbed);
  EXPECT_EQ(site->residual_slot, found.residual_slot);
  EXPECT_EQ(describe(site->op.epilogue), "add+hardtanh");
  // The slot does not match again: without the pass's result, the op has no epilogue.
  p.epilogues.clear();
  const auto bare = kernels::tunable_site(p, 1);
  ASSERT_TRUE(bare);
  EXPECT_TRUE(bare->op.epilogue.empty());
  EXPECT_TRUE(bare->absorbed.empty());
}

// x @ w.t() + bias, then a functional relu, read by one more op with `second_reader`.
Program linear_then_relu(bool second_reader, const BuildOptions& options) {
  const at::Tensor x = at::randn({3, 8});
  const at::Tensor w = at::randn({5, 8}), bias = at::randn({5});
  ProgramBuilder b;
  b.add_input(x);
  b.add_state(w);
  b.add_state(bias);
  const at::Tensor wt = record(b, "aten::t", "", {w}).toTensor();
  const at::Tensor y = record(b, "aten::addmm", "", {bias, x, wt, 1, 1}).toTensor();
  const at::Tensor r = record(b, "aten::relu", "", {y}).toTensor();
  at::Tensor out = record(b, "aten::mul", "Tensor", {r, r}).toTensor();
  if (second_reader) out = record(b, "aten::add", "Tensor", {out, y, 1}).toTensor();
  b.set_outputs({out});
  return build(b, options);
}

TEST(SlotEpilogue, AFunctionalActivationTakesOverAReturnedResultOnly) {
  at::NoGradGuard no_grad;
  // A functional addmm: its result may become relu's where relu reads it alone.
  BuildOptions functional;
  functional.use_out_variants = false;
  for (const bool second_reader : {false, true}) {
    const Program p = linear_then_relu(second_reader, functional);
    const int addmm = op_named(p, "aten::addmm");
    ASSERT_GE(addmm, 0);
    const auto site = kernels::tunable_site(p, addmm);
    ASSERT_TRUE(site);
    EXPECT_EQ(site->op.epilogue.activation, second_reader ? Activation::kNone : Activation::kRelu);
    EXPECT_EQ(site->absorbed.size(), second_reader ? 0u : 1u);
  }
  // Into an `.out` buffer the pass's epilogue is left: the buffer cannot become relu's result.
  const Program p = linear_then_relu(false, BuildOptions{});
  const int addmm = op_named(p, "aten::addmm.out");
  ASSERT_GE(addmm, 0);
  ASSERT_EQ(p.epilogues.size(), 1u);
  EXPECT_TRUE(p.epilogues[0].takes_over_result);
  const auto site = kernels::tunable_site(p, addmm);
  ASSERT_TRUE(site);
  EXPECT_TRUE(site->op.epilogue.empty());
}

TEST(SlotEpilogue, TheMatchSeesThroughCopiesTheProgramDrops) {
  at::NoGradGuard no_grad;
  const at::Tensor x = at::randn({1, 4, 6, 6});
  const at::Tensor w = at::randn({4, 4, 3, 3});
  for (const bool drop : {true, false}) {
    ProgramBuilder b;
    b.add_input(x);
    b.add_state(w);
    const at::Tensor y = convolution(b, x, w);
    const at::Tensor copy = record(b, "aten::clone", "", {y, c10::IValue()}).toTensor();
    const at::Tensor r = record(b, "aten::relu", "", {copy}).toTensor();
    b.set_outputs({record(b, "aten::mul", "Tensor", {r, r}).toTensor()});
    BuildOptions options;
    options.drop_noop_ops = drop;
    Program p = build(b, options);
    const auto site = kernels::tunable_site(p, 0);
    ASSERT_TRUE(site);
    // Dropped, the copy's relu reads the convolution's result alone; kept, the copy.
    EXPECT_EQ(site->op.epilogue.activation, drop ? Activation::kRelu : Activation::kNone);
  }
}

}  // namespace
}  // namespace nimble
