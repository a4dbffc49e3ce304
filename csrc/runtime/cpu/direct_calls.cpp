#include "csrc/runtime/cpu/direct_calls.h"

#include <c10/util/SmallVector.h>

#include <optional>
#include <string>
#include <utility>

#include "csrc/kernels/cpu/torch_ops/nhwc_tensor_ops.h"
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

// A kernel called as `f(values)`, `f` holding the op's constants unboxed.
template <typename F>
class FunctionCall final : public DirectCall {
 public:
  FunctionCall(int out_slot, F f) : DirectCall(out_slot), f_(std::move(f)) {}
  at::Tensor call(const std::vector<c10::IValue>& values) const override { return f_(values); }

 private:
  F f_;
};

template <typename F>
std::unique_ptr<const DirectCall> function_call(const OpNode& op, F f) {
  return std::make_unique<FunctionCall<F>>(op.outputs[0].slot, std::move(f));
}

// The op's one result is its first return, and its arguments are `kinds` (a constant's
// value is checked by the caller).
bool shaped(const OpNode& op, std::initializer_list<Arg::Kind> kinds) {
  if (op.outputs.size() != 1 || op.outputs[0].ret != 0 || op.outputs[0].elem >= 0 ||
      op.args.size() != kinds.size())
    return false;
  size_t i = 0;
  for (Arg::Kind kind : kinds)
    if (op.args[i++].kind != kind) return false;
  return true;
}

using Values = std::vector<c10::IValue>;
// Most lists the programs concatenate fit without a heap allocation.
using Tensors = c10::SmallVector<at::Tensor, 8>;

void gather(const std::vector<int>& slots, const Values& values, Tensors& out) {
  for (int slot : slots) out.push_back(values[slot].toTensor());
}

std::unique_ptr<const DirectCall> pool_call(const OpNode& op) {
  constexpr Arg::Kind S = Arg::Kind::kSlot, C = Arg::Kind::kConstant;
  if (!shaped(op, {S, C, C, C, C, C})) return nullptr;
  for (int i = 1; i < 5; ++i)
    if (!op.args[i].constant.isIntList()) return nullptr;
  if (!op.args[5].constant.isBool()) return nullptr;
  const auto list = [&](int i) { return op.args[i].constant.toIntVector(); };
  return function_call(
      op, [self = op.args[0].slot, kernel = list(1), stride = list(2), padding = list(3),
           dilation = list(4), ceil = op.args[5].constant.toBool()](const Values& values) {
        return kernels::max_pool2d_nhwc(values[self].toTensor(), kernel, stride, padding, dilation,
                                        ceil);
      });
}

std::unique_ptr<const DirectCall> list_call(const OpNode& op, bool shuffle, bool nhwc) {
  constexpr Arg::Kind L = Arg::Kind::kTensorList, C = Arg::Kind::kConstant;
  if (!shuffle) {
    if (!shaped(op, {L})) return nullptr;
    return function_call(op, [slots = op.args[0].slots](const Values& values) {
      Tensors inputs;
      gather(slots, values, inputs);
      return kernels::cat_nhwc(inputs);
    });
  }
  if (!shaped(op, {L, C}) || !op.args[1].constant.isInt()) return nullptr;
  return function_call(op, [slots = op.args[0].slots, groups = op.args[1].constant.toInt(),
                            nhwc](const Values& values) {
    Tensors inputs;
    gather(slots, values, inputs);
    return nhwc ? kernels::channel_shuffle_nhwc(inputs, groups)
                : kernels::channel_shuffle(inputs, groups);
  });
}

std::unique_ptr<const DirectCall> mean_call(const OpNode& op) {
  if (!shaped(op, {Arg::Kind::kSlot, Arg::Kind::kConstant}) || !op.args[1].constant.isBool())
    return nullptr;
  return function_call(
      op, [self = op.args[0].slot, keepdim = op.args[1].constant.toBool()](const Values& values) {
        return kernels::mean_hw_nhwc(values[self].toTensor(), keepdim);
      });
}

}  // namespace

std::unique_ptr<const DirectCall> direct_call_for(const OpNode& op) {
  const std::string& name = op.name;
  if (name == "nimble::convolution_prepacked")
    return prepacked_call<kernels::PrepackedConvolution>(op);
  if (name == "nimble::linear_prepacked") return prepacked_call<kernels::PrepackedLinear>(op);
  if (name == "nimble::max_pool2d_nhwc") return pool_call(op);
  if (name == "nimble::cat_nhwc") return list_call(op, false, true);
  if (name == "nimble::channel_shuffle") return list_call(op, true, false);
  if (name == "nimble::channel_shuffle_nhwc") return list_call(op, true, true);
  if (name == "nimble::mean_hw_nhwc") return mean_call(op);
  return nullptr;
}

}  // namespace nimble
