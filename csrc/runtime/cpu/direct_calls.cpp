#include "csrc/runtime/cpu/direct_calls.h"

#include <optional>
#include <utility>

#include "csrc/kernels/cpu/torch_ops/prepacked_convolution.h"
#include "csrc/kernels/cpu/torch_ops/prepacked_linear.h"

namespace nimble {

namespace {

// `run(input, other)` of a prepacked object: input from a slot, `other` (a residual) from a
// slot, a constant tensor or none.
template <typename Packed>
class PrepackedCall final : public DirectCall {
 public:
  PrepackedCall(int out_slot, int input_slot, int other_slot, std::optional<at::Tensor> other,
                c10::intrusive_ptr<Packed> packed)
      : DirectCall(out_slot),
        input_slot_(input_slot),
        other_slot_(other_slot),
        other_(std::move(other)),
        packed_(std::move(packed)) {}

  at::Tensor call(const std::vector<c10::IValue>& values) const override {
    const at::Tensor& input = values[input_slot_].toTensor();
    if (other_slot_ < 0 || values[other_slot_].isNone()) return packed_->run(input, other_);
    return packed_->run(input, values[other_slot_].toTensor());
  }

 private:
  int input_slot_;
  int other_slot_;                   // -1: `other_` (a constant, or none)
  std::optional<at::Tensor> other_;  // the constant residual, if any
  c10::intrusive_ptr<Packed> packed_;
};

template <typename Packed>
std::unique_ptr<const DirectCall> prepacked_call(const OpNode& op) {
  if (op.args.size() != 3 || op.outputs.size() != 1) return nullptr;
  const OpNode::Output& out = op.outputs[0];
  const Arg& input = op.args[0];
  const Arg& other = op.args[1];
  const Arg& packed = op.args[2];
  if (out.ret != 0 || out.elem >= 0 || input.kind != Arg::Kind::kSlot ||
      packed.kind != Arg::Kind::kConstant || !packed.constant.isCustomClass())
    return nullptr;
  int other_slot = -1;
  std::optional<at::Tensor> other_constant;
  if (other.kind == Arg::Kind::kSlot) {
    other_slot = other.slot;
  } else if (other.kind != Arg::Kind::kConstant) {
    return nullptr;
  } else if (other.constant.isTensor()) {
    other_constant = other.constant.toTensor();
  } else if (!other.constant.isNone()) {
    return nullptr;
  }
  c10::intrusive_ptr<Packed> object;
  try {
    object = packed.constant.to<c10::intrusive_ptr<Packed>>();
  } catch (const c10::Error&) {
    return nullptr;  // another class than the op's schema names: the boxed call reports it
  }
  return std::make_unique<PrepackedCall<Packed>>(out.slot, input.slot, other_slot,
                                                 std::move(other_constant), std::move(object));
}

}  // namespace

std::unique_ptr<const DirectCall> direct_call_for(const OpNode& op) {
  if (op.name == "nimble::convolution_prepacked")
    return prepacked_call<kernels::PrepackedConvolution>(op);
  if (op.name == "nimble::linear_prepacked") return prepacked_call<kernels::PrepackedLinear>(op);
  return nullptr;
}

}  // namespace nimble
