// Family "cuda_direct3x3": dense 3x3 convolutions (ResNet's and MobileNetV2's stem) computed
// directly, without unfolding. Knobs: the output tile (tile_h x tile_w), output channels per
// block (block_k), input channels per step (block_c), threads per block, outputs per thread
// along a row (vec), the unroll of the step's channel loop, and shared-memory staging.
#include "csrc/kernels/cuda/cuda_families.h"
#include "csrc/kernels/cuda/nvrtc_specs.h"

namespace nimble::kernels::cuda {

template <>
const char* const DirectConv3x3Spec::kName = "cuda_direct3x3";
template <>
const char* const DirectConv3x3Spec::kEntry = "nimble_direct_conv3x3";
template <>
const char* const DirectConv3x3Spec::kSource = "csrc/kernels/cuda/direct_conv3x3_kernel.h";

template <>
bool DirectConv3x3Spec::supports_shape(const TunableOp& op) {
  return op.kind == TunableOp::Kind::kConv2d && op.groups == 1 && op.r == 3 && op.s == 3 &&
         op.stride[0] == op.stride[1] && op.stride[0] <= 2 &&
         op.dilation == std::array<int64_t, 2>{1, 1} && dense_nchw_float(op);
}

template <>
std::vector<tuning::Knob> DirectConv3x3Spec::tuned_knobs() {
  return {tuning::Knob::power_of_two_range("tile_h", 2, 4),
          tuning::Knob::power_of_two_range("tile_w", 8, 16),
          tuning::Knob::power_of_two_range("block_k", 8, 16),
          tuning::Knob::power_of_two_range("block_c", 8, 8),
          tuning::Knob::power_of_two_range("threads", 64, 128),
          tuning::Knob::power_of_two_range("vec", 1, 4),
          tuning::Knob::integer_range("unroll", 1, 4, 3),
          tuning::Knob::categorical("staged", {"off", "on"})};
}

template <>
std::vector<int> DirectConv3x3Spec::op_fields(const TunableOp& op) {
  return {static_cast<int>(op.stride[0]), op.bias, op.epilogue.residual,
          activation_code(op.epilogue)};
}

template <>
bool DirectConv3x3Spec::launchable(const Knobs& k) {
  // Whole groups of `vec` outputs of one row per thread, at most 32 outputs in registers.
  return k.tile_w % k.vec == 0 && k.block_k * k.tile_h * k.tile_w % (k.threads * k.vec) == 0 &&
         k.per_thread() <= 32 && k.shared_floats() * 4 <= 48 * 1024;
}

template <>
nimble_cuda::GridSize DirectConv3x3Spec::grid(const TunableOp& op, const Knobs& k) {
  return {static_cast<int>((op.out_w() + k.tile_w - 1) / k.tile_w),
          static_cast<int>((op.out_h() + k.tile_h - 1) / k.tile_h),
          static_cast<int>(op.n * ((op.k + k.block_k - 1) / k.block_k))};
}

template <>
DirectConv3x3Spec::Args DirectConv3x3Spec::args(const TunableOp& op, const OperandPointers& p) {
  auto a = operand_args<Args>(op, p);
  a.c = static_cast<int>(op.c);
  a.h = static_cast<int>(op.h);
  a.w = static_cast<int>(op.w);
  a.k = static_cast<int>(op.k);
  a.out_h = static_cast<int>(op.out_h());
  a.out_w = static_cast<int>(op.out_w());
  a.pad_h = static_cast<int>(op.padding[0]);
  a.pad_w = static_cast<int>(op.padding[1]);
  return a;
}

std::shared_ptr<const KernelFamily> direct_conv3x3_family(const CubinCache& cache) {
  return std::make_shared<NvrtcFamily<DirectConv3x3Spec>>(cache);
}

}  // namespace nimble::kernels::cuda
