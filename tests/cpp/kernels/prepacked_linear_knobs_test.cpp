// The "prepacked_linear" family (prepacked_linear_family.cpp): every value of every knob, on both
// kernels, gives ATen's result on random linear layers (rows, in and out features with odd
// sizes, with and without a bias, with the epilogues the lowering fuses); the untuned lowering
// is one config of the space and the tuner's start; oneDNN takes no parameters; a linear
// layer's spec (TunedLinear) reads back what it wrote and refuses a convolution's kernels.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <string>

#include "csrc/kernels/aten_epilogue.h"
#include "csrc/kernels/cpu/torch_ops/tuned_convolution.h"
#include "csrc/kernels/cpu/tuning_families/cpu_families.h"
#include "csrc/kernels/kernel_measurer.h"
#include "csrc/kernels/kernel_space.h"
#include "csrc/slot/lowering_choices.h"

namespace nimble::kernels {
namespace {

TunableOp random_linear(std::mt19937_64& rng, int problem) {
  const auto pick = [&](std::initializer_list<int64_t> values) {
    return *(values.begin() + std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng));
  };
  TunableOp op;
  op.kind = TunableOp::Kind::kLinear;
  op.n = pick({1, 2, 5, 17, 50, 197});
  op.c = pick({1, 3, 8, 31, 64, 100, 257});
  op.k = pick({1, 7, 16, 33, 96, 130});
  op.h = op.w = op.r = op.s = 1;
  op.bias = problem % 3 != 0;
  op.input_strides = {op.c, 1, 1, 1};
  op.weight_strides = {op.c, 1, 1, 1};
  op.out_sizes = {op.n, op.k, 1, 1};
  op.out_strides = {op.k, 1, 1, 1};
  switch (problem % 4) {
    case 1:
      op.epilogue.activation = Activation::kRelu;
      break;
    case 2:
      op.epilogue.residual = true;
      break;
    case 3:
      op.epilogue.residual = true;
      op.epilogue.activation = Activation::kClamp;
      op.epilogue.lo = 0;
      op.epilogue.hi = 6;
      break;
    default:
      break;
  }
  return op;
}

// ATen's linear layer, with or without a bias, then the epilogue, in the 4-D form.
at::Tensor reference(const TunableOp& op, const std::vector<at::Tensor>& operands) {
  const at::Tensor x = operands[0].reshape({op.n, op.c});
  const at::Tensor w = operands[1].reshape({op.k, op.c});
  at::Tensor y = op.bias ? at::addmm(operands[2], x, w.t()) : at::mm(x, w.t());
  y = y.view({op.n, op.k, 1, 1});
  apply_in_place(op.epilogue, y, op.epilogue.residual ? &operands.back() : nullptr);
  return y;
}

int label_index(const tuning::Knob& knob, const std::string& label) {
  for (int i = 0; i < knob.size(); ++i)
    if (knob.label(i) == label) return i;
  return -1;
}

TEST(PrepackedLinearKnobs, EveryValueOfEveryKnobOnBothKernelsMatchesAten) {
  std::mt19937_64 rng(44);
  int checked = 0;
  for (int problem = 0; problem < 24; ++problem) {
    const TunableOp op = random_linear(rng, problem);
    const KernelSpace space(op, {prepacked_linear_family()});
    const tuning::KnobSpace& knobs = space.knobs();
    const auto operands = op.random_operands(problem);
    const at::Tensor expected = reference(op, operands);
    const int kernel_knob = knobs.knob_index("prepacked_linear.kernel");
    const int threads_knob = kernel_knob + 1;
    const std::optional<PrepackedLinear::Kernel> rule = PrepackedLinear::choose(op.n, op.c, op.k);
    const tuning::Config start = space.default_config();
    if (rule) {
      // The untuned lowering: the rule's kernel on every thread, every parameter the rule's.
      ASSERT_TRUE(knobs.valid(start)) << op.signature();
      EXPECT_EQ(knobs.knobs()[kernel_knob].label(start[kernel_knob]),
                PrepackedLinear::kernel_name(*rule));
      EXPECT_EQ(start[threads_knob], knobs.knobs()[threads_knob].size() - 1);
      for (int k = threads_knob + 1; k < static_cast<int>(knobs.knobs().size()); ++k)
        EXPECT_EQ(start[k], 0) << knobs.knobs()[k].name();
    } else {
      EXPECT_TRUE(start.empty()) << "the rule leaves " << op.signature() << " to ATen";
    }
    tuning::Config base(knobs.knobs().size(), 0);
    const int nimble = label_index(knobs.knobs()[kernel_knob], "nimble_gemm");
    const int onednn = label_index(knobs.knobs()[kernel_knob], "onednn_prepacked");
    ASSERT_GE(nimble, 0);
    for (int threads = 0; threads < knobs.knobs()[threads_knob].size(); ++threads) {
      for (const int kernel : {nimble, onednn}) {
        if (kernel < 0) continue;
        tuning::Config config = base;
        config[kernel_knob] = kernel;
        config[threads_knob] = threads;
        ASSERT_EQ(compare_results(space.build(config)->run(operands), expected), "")
            << op.signature() << " with " << space.describe(config);
        ++checked;
      }
    }
    base[kernel_knob] = nimble;
    for (int k = threads_knob + 1; k < static_cast<int>(knobs.knobs().size()); ++k) {
      for (int v = 1; v < knobs.knobs()[k].size(); ++v) {
        tuning::Config config = base;
        config[k] = v;
        ASSERT_TRUE(knobs.valid(config)) << space.describe(config);
        ASSERT_EQ(compare_results(space.build(config)->run(operands), expected), "")
            << op.signature() << " with " << space.describe(config);
        ++checked;
        if (onednn >= 0) {
          config[kernel_knob] = onednn;
          EXPECT_FALSE(knobs.valid(config)) << "oneDNN with " << space.describe(config);
        }
      }
    }
  }
  EXPECT_GT(checked, 24 * 10);
}

// runs_as_rule (cpu_families.h): a config that resolves to the rule's tiling runs the rule's
// kernel, so it gives the rule's result bit for bit; vit_b_16's 17x768 > 3072 layer has such
// configs (the rule's loop order there is columns outside: its 9 MB weight is beyond L2), and
// a config that changes what runs (one thread, oneDNN, 2-row register tiles) is not one.
TEST(PrepackedLinearKnobs, ConfigsThatRunAsTheRuleGiveItsResultBitForBit) {
  std::mt19937_64 rng(12);
  int same = 0, differ = 0;
  for (int problem = 0; problem < 8; ++problem) {
    TunableOp op = random_linear(rng, problem);
    if (problem == 0) {
      op.n = 17, op.c = 768, op.k = 3072;
      op.input_strides = {op.c, 1, 1, 1};
      op.weight_strides = {op.c, 1, 1, 1};
      op.out_sizes = {op.n, op.k, 1, 1};
      op.out_strides = {op.k, 1, 1, 1};
    }
    const KernelSpace space(op, {prepacked_linear_family()});
    const tuning::Config rule = space.default_config();
    if (rule.empty()) continue;
    EXPECT_TRUE(runs_as_rule(space, rule));
    const auto operands = op.random_operands(problem);
    const at::Tensor expected = space.build(rule)->run(operands);
    const tuning::KnobSpace& knobs = space.knobs();
    for (size_t k = 0; k < knobs.knobs().size(); ++k) {
      for (int v = 0; v < knobs.knobs()[k].size(); ++v) {
        tuning::Config config = rule;
        config[k] = v;
        if (config == rule || !knobs.valid(config)) continue;
        if (!runs_as_rule(space, config)) {
          ++differ;
          continue;
        }
        ++same;
        EXPECT_TRUE(at::equal(space.build(config)->run(operands), expected))
            << op.signature() << " with " << space.describe(config);
      }
    }
    if (problem == 0) {
      tuning::Config columns = rule;
      columns[knobs.knob_index("prepacked_linear.gemm_loop_order")] = 2;  // "columns"
      EXPECT_TRUE(runs_as_rule(space, columns)) << space.describe(columns);
      tuning::Config one_thread = rule;
      one_thread[knobs.knob_index("prepacked_linear.threads")] = 0;
      if (one_thread != rule) EXPECT_FALSE(runs_as_rule(space, one_thread));
      tuning::Config rows = rule;
      rows[knobs.knob_index("prepacked_linear.gemm_loop_order")] = 1;  // "rows"
      EXPECT_FALSE(runs_as_rule(space, rows));
    }
  }
  EXPECT_GT(same, 0);
  EXPECT_GT(differ, same);
}

TEST(PrepackedLinearKnobs, TheFamilyTakesLinearLayersOnly) {
  std::mt19937_64 rng(3);
  TunableOp op = random_linear(rng, 0);
  EXPECT_TRUE(prepacked_linear_family()->supports(op));
  op.kind = TunableOp::Kind::kConv2d;
  EXPECT_FALSE(prepacked_linear_family()->supports(op));
}

TEST(PrepackedLinearKnobs, LoweredSignaturesReadBackTheLayerAndItsSpace) {
  const std::string key = PrepackedLinear::shape_key(17, 768, 3072);
  EXPECT_EQ(key, "linear in=17x768 out=3072");
  const auto op = slot::lowered_op_of_shape_key(slot::lowered_signature(key, "relu"));
  ASSERT_TRUE(op);
  EXPECT_EQ(op->kind, TunableOp::Kind::kLinear);
  EXPECT_EQ(slot::lowered_shape_key(*op), key);
  const KernelSpace space = slot::lowered_space(*op);
  ASSERT_FALSE(space.default_config().empty());
  EXPECT_EQ(space.family(space.default_config()).name(), "prepacked_linear");
  EXPECT_FALSE(slot::lowered_op_of_shape_key("linear in=17x768"));
  EXPECT_FALSE(
      slot::linear_of_shape_key("in=1x3x8x8 weight=4x3x1x1 stride=1,1 pad=0,0 dil=1,1 "
                                "groups=1"));
}

TEST(PrepackedLinearKnobs, TunedLinearSpecsReadBackWhatTheyWrite) {
  for (const std::string spec :
       {"nimble_gemm", "onednn_prepacked threads=1",
        "nimble_gemm threads=1 gemm.pieces=3 gemm.rows_per_block=16 gemm.column_splits=2 "
        "gemm.loop_order=columns gemm.tile_rows=4"})
    EXPECT_EQ(TunedLinear::parse(spec).to_string(), spec);
  const TunedLinear t = TunedLinear::parse("nimble_gemm gemm.tile_rows=2 threads=1");
  EXPECT_EQ(t.kernel, PrepackedLinear::Kernel::kNimbleGemm);
  EXPECT_EQ(t.threads, 1);
  EXPECT_EQ(t.parameters.gemm.tile_rows, 2);
  EXPECT_ANY_THROW(TunedLinear::parse("nimble_depthwise"));
  EXPECT_ANY_THROW(TunedLinear::parse("nimble_winograd"));
  EXPECT_THROW(TunedLinear::parse("onednn_prepacked gemm.pieces=2"), std::invalid_argument);
  EXPECT_THROW(TunedLinear::parse("nimble_gemm depthwise.pixels=2"), std::invalid_argument);
}

}  // namespace
}  // namespace nimble::kernels
