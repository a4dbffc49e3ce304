// Every CPU kernel family, on random convolutions and random configs of their knob spaces,
// gives ATen's result with ATen's layout: the property the slot relies on when it binds one.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <string>

#include "csrc/kernels/cpu/tuning_families/cpu_kernel_support.h"
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
      at::Tensor got;
      try {
        got = kernel->run(operands);
      } catch (const std::exception& e) {
        FAIL() << op.signature() << " with " << space.describe(config) << ": " << e.what();
      }
      const std::string wrong = compare_results(got, reference);
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
  EXPECT_GT(per_family["direct"], 50);
  EXPECT_GT(per_family["winograd"], 10);
  EXPECT_GT(per_family["prepacked"], 50);
}

// A linear layer (addmm of a bias, an input [n, c] and a transposed weight [k, c]), as the
// tuner sees it: a 1x1 convolution of [n, c, 1, 1], checked against ATen's addmm.
TunableOp random_linear(std::mt19937_64& rng, bool relu) {
  std::uniform_int_distribution<int64_t> batch(1, 9), features(1, 300);
  TunableOp op;
  op.kind = TunableOp::Kind::kLinear;
  op.n = batch(rng);
  op.c = features(rng);
  op.k = features(rng);
  op.h = op.w = op.r = op.s = 1;
  op.bias = true;
  op.input_strides = {op.c, 1, 1, 1};
  op.weight_strides = {op.c, 1, 1, 1};
  op.out_sizes = {op.n, op.k, 1, 1};
  op.out_strides = {op.k, 1, 1, 1};
  if (relu) op.epilogue.activation = Activation::kRelu;
  return op;
}

TEST(KernelFamilies, EveryConfigOfEveryFamilyMatchesAddmmOnRandomLinearLayers) {
  std::mt19937_64 rng(17);
  std::map<std::string, int> per_family;
  for (int problem = 0; problem < 40; ++problem) {
    const TunableOp op = random_linear(rng, problem % 2 == 1);
    const KernelSpace space(op, cpu_families());
    const auto operands = op.random_operands(problem);
    const at::Tensor reference = op.aten(operands);
    ASSERT_EQ(reference.sizes(), at::IntArrayRef(op.out_sizes));
    for (int c = 0; c < 6; ++c) {
      const tuning::Config config = space.knobs().random_config(rng);
      const std::string wrong = compare_results(space.build(config)->run(operands), reference);
      ASSERT_EQ(wrong, "") << op.signature() << " with " << space.describe(config);
      ++per_family[space.family(config).name()];
    }
  }
  EXPECT_GT(per_family["aten"], 20);
  EXPECT_GT(per_family["im2col_gemm"], 20);
  EXPECT_GT(per_family["direct"], 20);
  EXPECT_EQ(per_family.count("winograd") + per_family.count("depthwise"), 0u);
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
    EXPECT_EQ(names.count("direct") == 1, !op.depthwise()) << op.signature();
    const bool winograd = op.groups == 1 && op.r == 3 && op.s == 3 &&
                          op.stride == std::array<int64_t, 2>{1, 1} &&
                          op.dilation == std::array<int64_t, 2>{1, 1};
    EXPECT_EQ(names.count("winograd") == 1, winograd) << op.signature();
  }
}

// The family of that name alone, as a space of its own.
KernelSpace family_space(const TunableOp& op, const std::string& name) {
  for (const auto& family : cpu_families())
    if (family->name() == name) return KernelSpace(op, {family});
  throw std::runtime_error("no family " + name);
}

TEST(KernelFamilies, PackedWeightsFollowTheWeightWhenItChanges) {
  std::mt19937_64 rng(5);
  TunableOp op = random_conv(rng);
  // Every family that transforms its weight supports this one (Winograd: 3x3, stride 1).
  while (op.groups != 1 || op.r != 3 || op.s != 3 || op.stride[0] != 1 || op.stride[1] != 1 ||
         op.dilation[0] != 1 || op.dilation[1] != 1)
    op = random_conv(rng);
  for (const std::string name : {"im2col_gemm", "direct", "winograd"}) {
    const KernelSpace space = family_space(op, name);
    ASSERT_FALSE(space.empty()) << name;
    const auto kernel = space.build(space.knobs().random_config(rng));
    auto operands = op.random_operands(1);
    EXPECT_EQ(compare_results(kernel->run(operands), op.aten(operands)), "") << name;
    operands[1].mul_(-3);  // in place: the version counter moves
    EXPECT_EQ(compare_results(kernel->run(operands), op.aten(operands)), "") << name;
    if (op.bias) {
      operands[2].add_(1);
      EXPECT_EQ(compare_results(kernel->run(operands), op.aten(operands)), "") << name;
    }
  }
}

// A replay hands a linear layer's weight to its kernel as a fresh [k, c, 1, 1] view on every
// call, made below the ADInplaceOrView key: the packed weight must be kept across those views
// (re-packing it on every call cost mobilenet_v2's classifier 2.4 ms) and still follow writes.
TEST(KernelFamilies, PackedWeightsSurviveFreshViewsAndFollowWritesToTheirBase) {
  const at::Tensor weight_t = at::randn({4, 6});  // [c, k]: addmm takes weight.t()
  const auto fresh_view = [](const at::Tensor& base) {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    return view_sharing_version(base, {6, 4, 1, 1}, {1, 6, 1, 1});
  };
  DerivedTensor derived;
  int derivations = 0;
  const auto derive = [&](const at::Tensor& w) {
    ++derivations;
    return w.contiguous();
  };
  for (int call = 0; call < 3; ++call) derived.get(fresh_view(weight_t), derive);
  EXPECT_EQ(derivations, 1);
  weight_t.mul_(2);
  EXPECT_TRUE(at::equal(derived.get(fresh_view(weight_t), derive), fresh_view(weight_t)));
  EXPECT_EQ(derivations, 2);
  derived.get(fresh_view(weight_t.clone()), derive);
  EXPECT_EQ(derivations, 3);

  // The same through the slot's own path: the boxed stack of aten::addmm, for every family
  // that packs the weight.
  std::mt19937_64 rng(23);
  const TunableOp op = random_linear(rng, false);
  const at::Tensor bias = at::randn({op.k}), x = at::randn({op.n, op.c});
  const at::Tensor weight = at::randn({op.k, op.c});
  const std::vector<c10::IValue> stack{bias, x, weight.t(), 1, 1};
  for (const std::string name : {"im2col_gemm", "direct"}) {
    const KernelSpace space = family_space(op, name);
    const auto kernel = space.build(space.knobs().random_config(rng));
    for (int call = 0; call < 2; ++call) {
      const auto operands = operands_from_stack(op, stack);
      EXPECT_EQ(compare_results(kernel->run(operands), op.aten(operands)), "") << name;
      weight.mul_(-3);  // through the weight, not the view on the stack
    }
  }
}

double median_seconds(const std::function<void()>& call) {
  for (int i = 0; i < 3; ++i) call();
  std::vector<double> seconds;
  for (int i = 0; i < 15; ++i) {
    const auto start = std::chrono::steady_clock::now();
    call();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(seconds.begin(), seconds.begin() + 7, seconds.end());
  return seconds[7];
}

// Not a check: prints each nimble family's best of a few random configs against ATen on
// convolutions of resnet18 and mobilenet_v2 at 64x64 images, one thread.
TEST(KernelFamilies, TimingAgainstAten) {
  const char* wanted = std::getenv("NIMBLE_KERNEL_TIMING");
  if (wanted == nullptr || std::string(wanted) != "1")
    GTEST_SKIP() << "NIMBLE_KERNEL_TIMING=1 runs it";
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  struct Shape {
    const char* name;
    int64_t c, k, hw, r, stride, pad;
  };
  const Shape shapes[] = {{"resnet18 conv1 7x7/2 3->64 64x64", 3, 64, 64, 7, 2, 3},
                          {"resnet18 3x3 64->64 16x16", 64, 64, 16, 3, 1, 1},
                          {"resnet18 3x3/2 64->128 16x16", 64, 128, 16, 3, 2, 1},
                          {"resnet18 3x3 128->128 8x8", 128, 128, 8, 3, 1, 1},
                          {"resnet18 3x3 256->256 4x4", 256, 256, 4, 3, 1, 1},
                          {"mobilenet_v2 1x1 16->96 32x32", 16, 96, 32, 1, 1, 0},
                          {"mobilenet_v2 1x1 144->24 16x16", 144, 24, 16, 1, 1, 0},
                          {"mobilenet_v2 1x1 192->32 8x8", 192, 32, 8, 1, 1, 0}};
  std::mt19937_64 rng(1);
  for (const Shape& shape : shapes) {
    TunableOp op;
    op.n = 1;
    op.c = shape.c;
    op.k = shape.k;
    op.h = op.w = shape.hw;
    op.r = op.s = shape.r;
    op.stride = {shape.stride, shape.stride};
    op.padding = {shape.pad, shape.pad};
    op.bias = true;
    op = with_aten_layout(op, false);
    const auto operands = op.random_operands(0);
    const at::Tensor reference = op.aten(operands);
    const double aten = median_seconds([&] { op.aten(operands); });
    std::cout << shape.name << ": aten " << aten * 1e3 << " ms";
    for (const std::string name : {"im2col_gemm", "direct", "winograd"}) {
      const KernelSpace space = family_space(op, name);
      if (space.empty()) continue;
      double best = 1e9;
      std::string best_config;
      for (int c = 0; c < 12; ++c) {
        const tuning::Config config = space.knobs().random_config(rng);
        const auto kernel = space.build(config);
        ASSERT_EQ(compare_results(kernel->run(operands), reference), "") << name;
        const double t = median_seconds([&] { kernel->run(operands); });
        if (t < best) {
          best = t;
          best_config = space.describe(config);
        }
      }
      std::cout << ", " << name << " " << best * 1e3 << " ms (" << aten / best << "x; "
                << best_config << ")";
    }
    std::cout << std::endl;
  }
  at::set_num_threads(threads);
}

}  // namespace
}  // namespace nimble::kernels
