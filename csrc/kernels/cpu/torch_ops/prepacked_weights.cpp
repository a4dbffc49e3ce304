#include "csrc/kernels/cpu/torch_ops/prepacked_weights.h"

#include "csrc/kernels/cpu/torch_ops/prepacked_convolution.h"
#include "csrc/kernels/cpu/torch_ops/prepacked_linear.h"

namespace nimble::kernels {

namespace {

template <typename Packed>
int64_t bytes_if(const c10::IValue& constant) {
  static const c10::ClassTypePtr type = c10::getCustomClassType<c10::intrusive_ptr<Packed>>();
  return constant.type() == type ? constant.toCustomClass<Packed>()->packed_bytes() : 0;
}

}  // namespace

int64_t prepacked_weight_bytes(const Program& program) {
  int64_t bytes = 0;
  for (const OpNode& op : program.ops) {
    for (const Arg& arg : op.args) {
      if (arg.kind != Arg::Kind::kConstant || !arg.constant.isCustomClass()) continue;
      bytes +=
          bytes_if<PrepackedConvolution>(arg.constant) + bytes_if<PrepackedLinear>(arg.constant);
    }
  }
  return bytes;
}

}  // namespace nimble::kernels
