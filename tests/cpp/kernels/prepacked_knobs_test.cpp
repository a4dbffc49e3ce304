// The "prepacked" family's kernel parameters (prepacked_family.cpp, kernel_parameters.h): every
// value of every knob gives ATen's result on random convolutions with epilogues; the untuned
// lowering is one config of the space and the tuner's start; oneDNN takes no parameters; and the
// spec a tuned lowering carries (tuned_convolution.h) reads back what it wrote.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <string>

#include "csrc/kernels/cpu/torch_ops/tuned_convolution.h"
#include "csrc/kernels/cpu/tuning_families/cpu_families.h"
#include "csrc/kernels/kernel_measurer.h"
#include "csrc/kernels/kernel_space.h"
#include "tests/cpp/kernels/random_convs.h"

namespace nimble::kernels {
namespace {

int label_index(const tuning::Knob& knob, const std::string& label) {
  for (int i = 0; i < knob.size(); ++i)
    if (knob.label(i) == label) return i;
  return -1;
}

TEST(PrepackedKnobs, EveryValueOfEveryKernelParameterMatchesAten) {
  if (nhwc::best_isa() == nhwc::Isa::kPortable) GTEST_SKIP() << "nimble's kernels need AVX2";
  std::mt19937_64 rng(23);
  int checked = 0;
  for (int problem = 0; problem < 24; ++problem) {
    const TunableOp op = random_conv(rng);
    const KernelSpace space(op, {prepacked_family()});
    const tuning::KnobSpace& knobs = space.knobs();
    const auto operands = op.random_operands(problem);
    const at::Tensor reference = op.aten(operands);
    // The untuned lowering: the rule's kernel on every thread, every parameter the rule's.
    const tuning::Config start = space.default_config();
    ASSERT_TRUE(knobs.valid(start)) << op.signature();
    const int kernel_knob = knobs.knob_index("prepacked.kernel");
    const std::string rule = PrepackedConvolution::kernel_name(
        PrepackedConvolution::choose({op.k, op.c / op.groups, op.r, op.s},
                                     {{op.padding[0], op.padding[1]},
                                      {op.stride[0], op.stride[1]},
                                      {op.dilation[0], op.dilation[1]},
                                      op.groups},
                                     {op.n, op.c, op.h, op.w}));
    EXPECT_EQ(knobs.knobs()[kernel_knob].label(start[kernel_knob]), rule) << op.signature();
    for (int k = kernel_knob + 2; k < static_cast<int>(knobs.knobs().size()); ++k)
      EXPECT_EQ(start[k], 0) << knobs.knobs()[k].name();

    tuning::Config nimble = start;
    nimble[kernel_knob] = label_index(knobs.knobs()[kernel_knob],
                                      op.depthwise() ? "nimble_depthwise" : "nimble_gemm");
    ASSERT_GE(nimble[kernel_knob], 0);
    const int onednn = label_index(knobs.knobs()[kernel_knob], "onednn_prepacked");
    for (int k = kernel_knob + 2; k < static_cast<int>(knobs.knobs().size()); ++k) {
      for (int v = 0; v < knobs.knobs()[k].size(); ++v) {
        tuning::Config config = nimble;
        config[k] = v;
        ASSERT_TRUE(knobs.valid(config)) << space.describe(config);
        const std::string wrong = compare_results(space.build(config)->run(operands), reference);
        ASSERT_EQ(wrong, "") << op.signature() << " with " << space.describe(config);
        ++checked;
        if (onednn >= 0 && v > 0) {
          config[kernel_knob] = onednn;
          EXPECT_FALSE(knobs.valid(config)) << "oneDNN with " << space.describe(config);
        }
      }
    }
  }
  EXPECT_GT(checked, 24 * 15);
}

// nimble_winograd is a value of the kernel knob exactly where it applies (3x3, stride 1,
// dilation 1, one group); that config builds and gives ATen's result, and takes no parameters.
TEST(PrepackedKnobs, WinogradKernelValueWhereItAppliesMatchesAten) {
  std::mt19937_64 rng(46);
  int checked = 0;
  for (int problem = 0; problem < 200 && checked < 12; ++problem) {
    const TunableOp op = random_conv(rng);
    const KernelSpace space(op, {prepacked_family()});
    const tuning::KnobSpace& knobs = space.knobs();
    const int kernel_knob = knobs.knob_index("prepacked.kernel");
    const int winograd = label_index(knobs.knobs()[kernel_knob], "nimble_winograd");
    const bool applies = op.r == 3 && op.s == 3 && op.stride[0] == 1 && op.stride[1] == 1 &&
                         op.dilation[0] == 1 && op.dilation[1] == 1 && op.groups == 1;
    ASSERT_EQ(winograd >= 0, applies) << op.signature();
    if (!applies) continue;
    tuning::Config config = space.default_config();
    config[kernel_knob] = winograd;
    ASSERT_TRUE(knobs.valid(config)) << space.describe(config);
    const auto operands = op.random_operands(problem);
    const std::string wrong =
        compare_results(space.build(config)->run(operands), op.aten(operands));
    ASSERT_EQ(wrong, "") << op.signature() << " with " << space.describe(config);
    tuning::Config with_parameter = config;
    with_parameter[kernel_knob + 2] = 1;
    EXPECT_FALSE(knobs.valid(with_parameter)) << space.describe(with_parameter);
    ++checked;
  }
  EXPECT_EQ(checked, 12);
}

// runs_as_rule (cpu_families.h) on convolutions: every one-knob move it calls the rule's gives
// the rule's result bit for bit, and a 1x1 of 256 > 1024 channels on a 4x4 map (1 MB of
// weight, beyond L2: the rule runs its column blocks outside) runs as the rule with
// gemm.loop_order=columns, not with rows.
TEST(PrepackedKnobs, ConfigsThatRunAsTheRuleGiveItsResultBitForBit) {
  std::mt19937_64 rng(12);
  int same = 0;
  for (int problem = 0; problem < 21; ++problem) {
    TunableOp op;
    if (problem == 0) {
      op.n = 1, op.c = 256, op.h = op.w = 4, op.k = 1024, op.r = op.s = 1, op.bias = true;
      op = with_aten_layout(op, /*channels_last=*/true);
    } else {
      op = random_conv(rng);
    }
    const KernelSpace space(op, {prepacked_family()});
    const tuning::Config rule = space.default_config();
    if (rule.empty()) continue;
    const tuning::KnobSpace& knobs = space.knobs();
    const auto operands = op.random_operands(problem);
    const at::Tensor expected = space.build(rule)->run(operands);
    for (size_t k = 0; k < knobs.knobs().size(); ++k) {
      for (int v = 0; v < knobs.knobs()[k].size(); ++v) {
        tuning::Config config = rule;
        config[k] = v;
        if (config == rule || !knobs.valid(config) || !runs_as_rule(space, config)) continue;
        ++same;
        EXPECT_TRUE(at::equal(space.build(config)->run(operands), expected))
            << op.signature() << " with " << space.describe(config);
      }
    }
    const int kernel = knobs.knob_index("prepacked.kernel");
    if (problem == 0 && knobs.knobs()[kernel].label(rule[kernel]) == "nimble_gemm") {
      const int order = knobs.knob_index("prepacked.gemm_loop_order");
      tuning::Config columns = rule, rows = rule;
      columns[order] = 2;  // "columns"
      rows[order] = 1;     // "rows"
      EXPECT_TRUE(runs_as_rule(space, columns)) << space.describe(columns);
      EXPECT_FALSE(runs_as_rule(space, rows)) << space.describe(rows);
    }
  }
  EXPECT_GT(same, 0);
}

TEST(PrepackedKnobs, TunedConvolutionSpecsReadBackWhatTheyWrite) {
  EXPECT_EQ(TunedConvolution::parse("nimble_gemm").to_string(), "nimble_gemm");
  for (const std::string spec :
       {"nimble_gemm threads=1 gemm.pieces=3 gemm.rows_per_block=24 gemm.column_splits=2 "
        "gemm.loop_order=columns gemm.tile_rows=5 gemm.reduction_block=256 gemm.tile_vectors=4",
        "nimble_depthwise depthwise.channel_vectors=2 depthwise.pixels=3 depthwise.windows=off "
        "depthwise.pieces=4",
        "onednn_prepacked threads=1", "nimble_gemm gemm.loop_order=rows",
        "nimble_winograd threads=1"}) {
    EXPECT_EQ(TunedConvolution::parse(spec).to_string(), spec);
  }
  const TunedConvolution t = TunedConvolution::parse("nimble_gemm gemm.tile_rows=4 threads=1");
  EXPECT_EQ(t.kernel, PrepackedConvolution::Kernel::kNimbleGemm);
  EXPECT_EQ(t.threads, 1);
  EXPECT_EQ(t.parameters.gemm.tile_rows, 4);
  EXPECT_TRUE(TunedConvolution::parse("nimble_depthwise").parameters.is_rule());
  // Unknown words, negative counts and another kernel's parameters are refused.
  EXPECT_THROW(TunedConvolution::parse("nimble_gemm gemm.tiles=4"), std::invalid_argument);
  EXPECT_THROW(TunedConvolution::parse("nimble_gemm gemm.tile_rows=-1"), std::invalid_argument);
  EXPECT_THROW(TunedConvolution::parse("nimble_gemm gemm.tile_rows=x"), std::invalid_argument);
  EXPECT_THROW(TunedConvolution::parse("nimble_gemm depthwise.pixels=2"), std::invalid_argument);
  EXPECT_THROW(TunedConvolution::parse("onednn_prepacked gemm.pieces=2"), std::invalid_argument);
  EXPECT_THROW(TunedConvolution::parse("nimble_winograd gemm.pieces=2"), std::invalid_argument);
  EXPECT_THROW(TunedConvolution::parse("nimble_gemm threads=two"), std::invalid_argument);
  EXPECT_ANY_THROW(TunedConvolution::parse("winograd"));
}

}  // namespace
}  // namespace nimble::kernels
