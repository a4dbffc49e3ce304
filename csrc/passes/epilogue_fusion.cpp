#include "csrc/passes/epilogue_fusion.h"

#include <string>

#include "csrc/passes/op_patterns.h"

namespace nimble {

namespace {

bool is_residual_add(const RecordedOp& op) {
  const auto& name = op.handle.operator_name();
  if ((name.name != "aten::add" && name.name != "aten::add_") || name.overload_name != "Tensor")
    return false;
  if (!is_one(op.args[2]) || !op.args[0].isTensor() || !op.args[1].isTensor()) return false;
  const at::Tensor& a = op.args[0].toTensor();
  const at::Tensor& b = op.args[1].toTensor();
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         storage_of(a) != storage_of(b);
}

// A view that only reshapes `value` (contiguous, same elements).
bool is_reshaping_view(const RecordedOp& op, const at::Tensor& value) {
  const auto& name = op.handle.operator_name();
  if ((name.name != "aten::view" && name.name != "aten::_unsafe_view") ||
      !name.overload_name.empty() || !op.args[0].isTensor() || op.returns.size() != 1 ||
      !op.returns[0].isTensor())
    return false;
  const at::Tensor& viewed = op.returns[0].toTensor();
  return same_values(op.args[0].toTensor(), value) && value.is_contiguous() &&
         viewed.is_contiguous() && storage_of(viewed) == storage_of(value) &&
         viewed.storage_offset() == value.storage_offset();
}

// Whether an op after `from` other than `except` reads exactly `value`.
bool read_elsewhere(const std::vector<RecordedOp>& ops, const at::Tensor& value, size_t from,
                    size_t except) {
  for (size_t i = from + 1; i < ops.size(); ++i) {
    if (i == except) continue;
    bool reads = false;
    for_each_tensor_arg(ops[i],
                        [&](const at::Tensor& t, bool) { reads = reads || same_values(t, value); });
    if (reads) return true;
  }
  return false;
}

}  // namespace

std::optional<Epilogue> activation_of(const RecordedOp& op) {
  const auto& name = op.handle.operator_name();
  if (!name.overload_name.empty()) return std::nullopt;
  if (name.name.rfind("aten::", 0) != 0) return std::nullopt;
  std::string base = name.name.substr(6);
  if (!base.empty() && base.back() == '_') base.pop_back();
  const std::optional<Activation> activation = activation_of_aten_name(base);
  if (!activation) return std::nullopt;
  Epilogue epilogue;
  epilogue.activation = *activation;
  // The scalars as recorded (the dispatcher records every argument, defaults included).
  if (epilogue.activation == Activation::kClamp) {
    if (op.args.size() != 3) return std::nullopt;
    epilogue.lo = op.args[1].toScalar().toDouble();
    epilogue.hi = op.args[2].toScalar().toDouble();
  }
  if (epilogue.activation == Activation::kLeakyRelu) {
    if (op.args.size() != 2) return std::nullopt;
    epilogue.lo = op.args[1].toScalar().toDouble();
  }
  if (epilogue.activation == Activation::kGeluErf && op.args.size() == 2 &&
      op.args[1].toStringRef() == "tanh")
    epilogue.activation = Activation::kGeluTanh;
  return epilogue;
}

void fuse_epilogue(FusedProduct& product, const std::vector<RecordedOp>& ops,
                   const TraceAccess& access, const CpuLoweringCallbacks& callbacks,
                   std::vector<bool>& taken, bool through_views) {
  at::Tensor value = product.result;
  size_t views = 0;  // views at the end of `fused`, with nothing fused after them yet
  std::vector<at::Tensor> before_views;
  while (true) {
    const std::optional<size_t> next = access.next_reader(value, product.last());
    if (!next || taken[*next]) break;
    const RecordedOp& op = ops[*next];
    if (through_views && product.epilogue.empty() && is_reshaping_view(op, value) &&
        !callbacks.is_output(value) && !read_elsewhere(ops, value, product.product, *next)) {
      before_views.push_back(value);
      value = op.returns[0].toTensor();
      product.result = value;
      product.fused.push_back(*next);
      ++views;
      continue;
    }
    const bool in_place = writes_first_argument(op);
    const bool add = is_residual_add(op) && product.epilogue.empty();
    const std::optional<Epilogue> activation =
        product.epilogue.activation == Activation::kNone ? activation_of(op) : std::nullopt;
    if ((!add && !activation) || op.returns.size() != 1 || !op.returns[0].isTensor()) break;
    // The replaced value must be read by this op alone (or be overwritten by it).
    if (!in_place && (access.read_after(value, *next) || callbacks.is_output(value))) break;
    at::Tensor other;
    if (add) {
      const at::Tensor& a = op.args[0].toTensor();
      const at::Tensor& b = op.args[1].toTensor();
      if (same_values(a, value)) {
        other = b;
      } else if (same_values(b, value) && !in_place) {
        other = a;
      } else {
        break;
      }
      if (other.scalar_type() != at::kFloat || !other.device().is_cpu()) break;
      product.epilogue.residual = true;
      product.other = other;
    } else if (!same_values(op.args[0].toTensor(), value)) {
      break;
    } else {
      product.epilogue.activation = activation->activation;
      product.epilogue.lo = activation->lo;
      product.epilogue.hi = activation->hi;
    }
    product.fused.push_back(*next);
    views = 0;
    const at::Tensor& returned = op.returns[0].toTensor();
    if (in_place) {
      if (!returned.is_same(value)) product.aliases.push_back(returned);
    } else {
      value = returned;
      product.result = returned;
    }
  }
  // Views with nothing fused after them stay in the trace.
  for (; views > 0; --views) {
    product.fused.pop_back();
    product.result = before_views.back();
    before_views.pop_back();
  }
  for (size_t f : product.fused) taken[f] = true;
}

bool inputs_unchanged(const FusedProduct& product, const TraceAccess& access) {
  for (const at::Tensor& t : {product.input, product.other}) {
    if (t.defined() && access.written_between(t, product.product, product.last(), product.fused))
      return false;
  }
  return true;
}

}  // namespace nimble
