#include "csrc/kernels/cuda/nvrtc_family.h"

namespace nimble::kernels::cuda {
namespace {

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t i = sizes.size(); i-- > 1;) strides[i - 1] = strides[i] * sizes[i];
  return strides;
}

}  // namespace

int activation_code(const Epilogue& epilogue) {
  switch (epilogue.activation) {
    case Activation::kRelu:
      return nimble_cuda::kActRelu;
    case Activation::kClamp:
      return nimble_cuda::kActHardtanh;
    case Activation::kNone:
      return nimble_cuda::kActNone;
    default:
      // A tunable op's epilogue holds no other (tunable_op.h); the bodies have no code for one.
      throw std::invalid_argument(std::string("nimble's CUDA kernels have no activation ") +
                                  activation_name(epilogue.activation));
  }
}

bool dense_nchw_float(const TunableOp& op) {
  // A size-1 dimension's stride is meaningless, so dense means "as contiguous would index".
  const auto dense = [](const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
    const auto want = contiguous_strides(sizes);
    for (size_t i = 0; i < sizes.size(); ++i)
      if (sizes[i] > 1 && strides.at(i) != want[i]) return false;
    return true;
  };
  return op.dtype == c10::ScalarType::Float && dense({op.n, op.c, op.h, op.w}, op.input_strides) &&
         dense({op.k, op.c / op.groups, op.r, op.s}, op.weight_strides) &&
         dense(op.out_sizes, op.out_strides);
}

OperandPointers operand_pointers(const TunableOp& op, at::TensorList operands, at::Tensor& y) {
  OperandPointers p;
  p.x = operands[0].data_ptr<float>();
  p.weight = operands[1].data_ptr<float>();
  if (op.bias) p.bias = operands[2].data_ptr<float>();
  if (op.epilogue.residual) p.residual = operands.back().data_ptr<float>();
  p.y = y.data_ptr<float>();
  return p;
}

}  // namespace nimble::kernels::cuda
