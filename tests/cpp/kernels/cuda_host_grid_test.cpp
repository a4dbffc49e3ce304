// nimble's CUDA kernel bodies, compiled as host C++ and run over their whole grid on the CPU
// phase by phase, give ATen's results on random small problems with random launchable configs
// and every epilogue: the arithmetic and indexing a GPU will run, checked without one.
// NIMBLE_CUDA_HOST_PROBLEMS=<n> checks n problems per family instead of 500.
#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/cpp/kernels/cuda_host_check.h"

namespace nimble::kernels::cuda {
namespace {

int problems() {
  const char* n = std::getenv("NIMBLE_CUDA_HOST_PROBLEMS");
  return n != nullptr ? std::atoi(n) : 500;
}

TEST(CudaKernelsOnHost, DepthwiseMatchesAten) {
  const HostCheck c = check_on_host<DepthwiseConvSpec>(random_depthwise, problems(), 1);
  EXPECT_EQ(c.checked, problems());
  EXPECT_EQ(c.wrong, 0) << c.first_wrong;
}

TEST(CudaKernelsOnHost, PointwiseGemmMatchesAten) {
  const HostCheck c = check_on_host<PointwiseGemmSpec>(random_pointwise, problems(), 2);
  EXPECT_EQ(c.checked, problems());
  EXPECT_EQ(c.wrong, 0) << c.first_wrong;
}

TEST(CudaKernelsOnHost, DirectConv3x3MatchesAten) {
  const HostCheck c = check_on_host<DirectConv3x3Spec>(random_direct3x3, problems(), 3);
  EXPECT_EQ(c.checked, problems());
  EXPECT_EQ(c.wrong, 0) << c.first_wrong;
}

}  // namespace
}  // namespace nimble::kernels::cuda
