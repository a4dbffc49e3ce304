// The host check of cuda_host_grid_test.cpp can fail: this file is compiled with
// NIMBLE_OFF_BY_ONE=1, which makes every body skip the last input column (depthwise, direct)
// or the last input channel (pointwise) through a `<` bound one short. The same check must then
// find wrong results for each family, on most problems.
#include <gtest/gtest.h>

#include "tests/cpp/kernels/cuda_host_check.h"

#if !NIMBLE_OFF_BY_ONE
#error "cuda_off_by_one_test.cpp must be compiled with NIMBLE_OFF_BY_ONE=1"
#endif

namespace nimble::kernels::cuda {
namespace {

constexpr int kProblems = 60;

TEST(CudaKernelsOffByOne, DepthwiseCheckFails) {
  const HostCheck c = check_on_host<DepthwiseConvSpec>(random_depthwise, kProblems, 1);
  EXPECT_GT(c.wrong, kProblems / 2) << "the check missed an off-by-one index";
}

TEST(CudaKernelsOffByOne, PointwiseGemmCheckFails) {
  const HostCheck c = check_on_host<PointwiseGemmSpec>(random_pointwise, kProblems, 2);
  EXPECT_GT(c.wrong, kProblems / 2) << "the check missed an off-by-one index";
}

TEST(CudaKernelsOffByOne, DirectConv3x3CheckFails) {
  const HostCheck c = check_on_host<DirectConv3x3Spec>(random_direct3x3, kProblems, 3);
  EXPECT_GT(c.wrong, kProblems / 2) << "the check missed an off-by-one index";
}

}  // namespace
}  // namespace nimble::kernels::cuda
