// Every CPU kernel family, on random convolutions and random configs of their knob spaces,
// gives ATen's result with ATen's layout: the property the slot relies on when it binds one.
#include <gtest/gtest.h>

#include <random>

#include "csrc/kernels/kernel_measurer.h"
#include "csrc/kernels/kernel_space.h"
#include "tests/cpp/kernels/random_convs.h"

namespace nimble::kernels {
namespace {

TEST(KernelFamilies, EveryConfigOfEveryFamilyMatchesAtenOnRandomConvolutions) {
  std::mt19937_64 rng(11);
  int checked = 0;
  std::map<std::string, int> per_family;
  for (int problem = 0; problem < 150; ++problem) {
    const TunableOp op = random_conv(rng);
    const KernelSpace space(op, cpu_families());
    ASSERT_FALSE(space.empty()) << op.signature();
    const auto operands = op.random_operands(problem);
    const at::Tensor reference = op.aten(operands);
    for (int c = 0; c < 6; ++c) {
      const tuning::Config config = space.knobs().random_config(rng);
      const auto kernel = space.build(config);
      const std::string wrong = compare_results(kernel->run(operands), reference);
      ASSERT_EQ(wrong, "") << op.signature() << " with " << space.describe(config);
      ++per_family[space.family(config).name()];
      ++checked;
    }
  }
  EXPECT_EQ(checked, 900);
  // Each family was exercised, not just the one that supports everything.
  EXPECT_GT(per_family["aten"], 50);
  EXPECT_GT(per_family["im2col_gemm"], 50);
  EXPECT_GT(per_family["depthwise"], 20);
}

TEST(KernelFamilies, SupportFollowsTheOpsShape) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200; ++i) {
    const TunableOp op = random_conv(rng);
    const KernelSpace space(op, cpu_families());
    const tuning::Knob& family = space.knobs().knobs()[0];
    std::set<std::string> names;
    for (int f = 0; f < family.size(); ++f) names.insert(family.label(f));
    EXPECT_EQ(names.count("depthwise") == 1, op.depthwise()) << op.signature();
    EXPECT_EQ(names.count("im2col_gemm") == 1, op.groups == 1) << op.signature();
  }
}

TEST(KernelFamilies, PackedWeightsFollowTheWeightWhenItChanges) {
  std::mt19937_64 rng(5);
  TunableOp op = random_conv(rng);
  while (op.groups != 1) op = random_conv(rng);
  const KernelSpace space(op, cpu_families());
  tuning::Config config = space.knobs().random_config(rng);
  config[0] = 1;  // im2col_gemm keeps its weight as a matrix
  for (size_t k = 1; k < config.size(); ++k)
    if (!space.knobs().active(config, static_cast<int>(k))) config[k] = 0;
  ASSERT_EQ(space.family(config).name(), "im2col_gemm");
  const auto kernel = space.build(config);
  auto operands = op.random_operands(1);
  EXPECT_EQ(compare_results(kernel->run(operands), op.aten(operands)), "");
  operands[1].mul_(-3);  // in place: the version counter moves
  EXPECT_EQ(compare_results(kernel->run(operands), op.aten(operands)), "");
}

}  // namespace
}  // namespace nimble::kernels
