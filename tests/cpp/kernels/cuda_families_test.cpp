// Which families a CUDA op's space holds: tasks come from a CUDA program as from a CPU one
// (tunable_site and program_tasks do not look at the device beyond "all operands on one"),
// and the device then picks the families: cuDNN's algorithm choice for every dense NCHW
// convolution, cuBLASLt's for linear layers, and nimble's NVRTC kernel for the shapes it has
// one for. (A whole CUDA program needs a GPU to record: tests/gpu/tune_check.py.)
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <set>

#include "csrc/kernels/kernel_space.h"
#include "tests/cpp/kernels/cuda_host_check.h"

namespace nimble::kernels {
namespace {

using cuda::square_conv;

std::set<std::string> families_of(TunableOp op) {
  op.device = c10::DeviceType::CUDA;
  const KernelSpace space(op, all_families());
  std::set<std::string> out;
  if (space.empty()) return out;
  const tuning::Knob& family = space.knobs().knobs()[0];
  for (int i = 0; i < family.size(); ++i) out.insert(family.label(i));
  return out;
}

TEST(CudaFamilies, EachCudaOpGetsTheLibraryChoiceAndNimblesKernelForItsShape) {
  using Set = std::set<std::string>;
  EXPECT_EQ(families_of(square_conv(8, 8, 8, 3, 1)), (Set{"cudnn", "cuda_depthwise"}));
  EXPECT_EQ(families_of(square_conv(8, 8, 8, 5, 2)), (Set{"cudnn", "cuda_depthwise"}));
  EXPECT_EQ(families_of(square_conv(8, 16, 1, 1, 1)), (Set{"cudnn", "cuda_pointwise"}));
  EXPECT_EQ(families_of(square_conv(8, 16, 1, 3, 2)), (Set{"cudnn", "cuda_direct3x3"}));
  EXPECT_EQ(families_of(square_conv(8, 16, 1, 5, 1)), (Set{"cudnn"}));
  EXPECT_EQ(families_of(square_conv(8, 16, 2, 3, 1)), (Set{"cudnn"}));  // grouped, not depthwise
  // The bodies index dense NCHW; a channels_last convolution is ATen's.
  EXPECT_EQ(families_of(square_conv(8, 16, 1, 3, 1, true)), Set{});
  std::mt19937_64 rng(3);
  TunableOp linear = cuda::random_pointwise(rng);
  while (linear.kind != TunableOp::Kind::kLinear) linear = cuda::random_pointwise(rng);
  EXPECT_EQ(families_of(linear), (Set{"cublaslt", "cuda_pointwise"}));
  // More images x channels than a grid's z may hold: no config of cuda_depthwise launches.
  EXPECT_EQ(families_of(square_conv(70000, 70000, 70000, 3, 1)), (Set{"cudnn"}));
  // The CPU families stay with CPU ops.
  const KernelSpace cpu(square_conv(8, 8, 8, 3, 1), all_families());
  const tuning::Knob& family = cpu.knobs().knobs()[0];
  for (int i = 0; i < family.size(); ++i) EXPECT_EQ(family.label(i).find("cud"), std::string::npos);
}

}  // namespace
}  // namespace nimble::kernels
