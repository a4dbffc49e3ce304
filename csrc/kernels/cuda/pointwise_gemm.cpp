// Family "cuda_pointwise": 1x1 convolutions (most of MobileNetV2's time after the depthwise
// ones) and linear layers as one tiled GEMM over all images' pixels. Knobs: the block's tile
// (block_m output channels x block_n pixels), the channels per step (block_k), threads per
// block, pixels per thread (vec), the unroll of the step's channel loop, and shared-memory
// staging of the tiles.
#include "csrc/kernels/cuda/cuda_families.h"
#include "csrc/kernels/cuda/nvrtc_specs.h"

namespace nimble::kernels::cuda {

template <>
const char* const PointwiseGemmSpec::kName = "cuda_pointwise";
template <>
const char* const PointwiseGemmSpec::kEntry = "nimble_pointwise_gemm";
template <>
const char* const PointwiseGemmSpec::kSource = "csrc/kernels/cuda/pointwise_gemm_kernel.h";

template <>
bool PointwiseGemmSpec::supports_shape(const TunableOp& op) {
  return op.groups == 1 && op.pointwise() && dense_nchw_float(op);
}

template <>
std::vector<tuning::Knob> PointwiseGemmSpec::tuned_knobs() {
  return {tuning::Knob::power_of_two_range("block_m", 32, 64),
          tuning::Knob::power_of_two_range("block_n", 32, 64),
          tuning::Knob::power_of_two_range("block_k", 8, 16),
          tuning::Knob::power_of_two_range("threads", 64, 128),
          tuning::Knob::power_of_two_range("vec", 1, 4),
          tuning::Knob::integer_range("unroll", 1, 4, 3),
          tuning::Knob::categorical("staged", {"off", "on"})};
}

template <>
std::vector<int> PointwiseGemmSpec::op_fields(const TunableOp& op) {
  return {op.bias, op.epilogue.residual, activation_code(op.epilogue)};
}

template <>
bool PointwiseGemmSpec::launchable(const Knobs& k) {
  // The threads tile the block exactly: block_n / vec threads across, and each thread owns
  // rows() x vec outputs, at most 32, so that they stay in registers under __launch_bounds__.
  return k.block_n % k.vec == 0 && k.threads % k.thread_columns() == 0 &&
         k.block_m * k.block_n % (k.threads * k.vec) == 0 && k.rows() >= 1 &&
         k.per_thread() <= 32 && k.shared_floats() * 4 <= 48 * 1024;
}

template <>
nimble_cuda::GridSize PointwiseGemmSpec::grid(const TunableOp& op, const Knobs& k) {
  const int64_t columns = op.n * op.h * op.w;
  return {static_cast<int>((columns + k.block_n - 1) / k.block_n),
          static_cast<int>((op.k + k.block_m - 1) / k.block_m), 1};
}

template <>
PointwiseGemmSpec::Args PointwiseGemmSpec::args(const TunableOp& op, const OperandPointers& p) {
  auto a = operand_args<Args>(op, p);
  a.m = static_cast<int>(op.k);
  a.channels = static_cast<int>(op.c);
  a.pixels = static_cast<int>(op.h * op.w);
  a.columns = static_cast<int>(op.n * op.h * op.w);
  return a;
}

std::shared_ptr<const KernelFamily> pointwise_gemm_family(const CubinCache& cache) {
  return std::make_shared<NvrtcFamily<PointwiseGemmSpec>>(cache);
}

}  // namespace nimble::kernels::cuda
