// Family "cuda_depthwise": nimble's depthwise convolution on a GPU, where cuDNN is weakest
// (Nimble's authors found TVM's tuned kernels faster than cuDNN's on MobileNetV2). Knobs: the
// output tile (tile_h x tile_w), threads per block, outputs per thread along a row (vec: one
// 8- or 16-byte access when aligned), the unroll of the taps loop, and shared-memory staging.
#include "csrc/kernels/cuda/cuda_families.h"
#include "csrc/kernels/cuda/nvrtc_specs.h"

namespace nimble::kernels::cuda {

template <>
const char* const DepthwiseConvSpec::kName = "cuda_depthwise";
template <>
const char* const DepthwiseConvSpec::kEntry = "nimble_depthwise_conv";
template <>
const char* const DepthwiseConvSpec::kSource = "csrc/kernels/cuda/depthwise_conv_kernel.h";

template <>
bool DepthwiseConvSpec::supports_shape(const TunableOp& op) {
  return op.kind == TunableOp::Kind::kConv2d && op.depthwise() && dense_nchw_float(op) &&
         op.r <= 7 && op.s <= 7 && op.stride[0] <= 2 && op.stride[1] <= 2 && op.dilation[0] <= 2 &&
         op.dilation[1] <= 2;
}

template <>
std::vector<tuning::Knob> DepthwiseConvSpec::tuned_knobs() {
  return {tuning::Knob::power_of_two_range("tile_h", 1, 8),
          tuning::Knob::power_of_two_range("tile_w", 8, 32),
          tuning::Knob::power_of_two_range("threads", 32, 128),
          tuning::Knob::power_of_two_range("vec", 1, 4),
          tuning::Knob::integer_range("unroll", 1, 4, 3),
          tuning::Knob::categorical("staged", {"off", "on"})};
}

template <>
std::vector<int> DepthwiseConvSpec::op_fields(const TunableOp& op) {
  const auto i = [](int64_t v) { return static_cast<int>(v); };
  return {i(op.r),
          i(op.s),
          i(op.stride[0]),
          i(op.stride[1]),
          i(op.dilation[0]),
          i(op.dilation[1]),
          op.bias,
          op.epilogue.residual,
          activation_code(op.epilogue)};
}

template <>
bool DepthwiseConvSpec::launchable(const Knobs& k) {
  // Every thread owns whole groups of `vec` outputs of one row, and no more than 16 outputs,
  // so that its accumulators stay in registers under __launch_bounds__.
  return k.tile_w % k.vec == 0 && k.tile_h * k.tile_w % (k.threads * k.vec) == 0 &&
         k.per_thread() <= 16 && k.shared_floats() * 4 <= 48 * 1024;
}

template <>
nimble_cuda::GridSize DepthwiseConvSpec::grid(const TunableOp& op, const Knobs& k) {
  return {static_cast<int>((op.out_w() + k.tile_w - 1) / k.tile_w),
          static_cast<int>((op.out_h() + k.tile_h - 1) / k.tile_h), static_cast<int>(op.n * op.c)};
}

template <>
DepthwiseConvSpec::Args DepthwiseConvSpec::args(const TunableOp& op, const OperandPointers& p) {
  auto a = operand_args<Args>(op, p);
  a.channels = static_cast<int>(op.c);
  a.h = static_cast<int>(op.h);
  a.w = static_cast<int>(op.w);
  a.out_h = static_cast<int>(op.out_h());
  a.out_w = static_cast<int>(op.out_w());
  a.pad_h = static_cast<int>(op.padding[0]);
  a.pad_w = static_cast<int>(op.padding[1]);
  return a;
}

std::shared_ptr<const KernelFamily> depthwise_conv_family(const CubinCache& cache) {
  return std::make_shared<NvrtcFamily<DepthwiseConvSpec>>(cache);
}

}  // namespace nimble::kernels::cuda
