#include "csrc/passes/slot_epilogues.h"

#include <optional>

#include "csrc/passes/op_patterns.h"
#include "csrc/passes/trace_access.h"

namespace nimble {
namespace {

// The ops kernels/tunable_op.h may replace (it checks their shapes, dtypes and layouts).
bool is_tunable(const RecordedOp& op) {
  return (is_plain_convolution(op) || is_plain_addmm(op)) && op.returns.size() == 1 &&
         op.returns[0].isTensor();
}

bool reads_first(const RecordedOp& op, const at::Tensor& value, const TraceAccess& access) {
  return !op.args.empty() && op.args[0].isTensor() &&
         access.same_in_replay(op.args[0].toTensor(), value);
}

// add_(value, other, alpha=1) with `other` of value's layout on a storage of its own.
bool is_residual_add(const RecordedOp& op, const at::Tensor& value, const TraceAccess& access) {
  if (!named(op, "aten::add_", "Tensor") || op.args.size() != 3 ||
      !reads_first(op, value, access) || !op.args[1].isTensor() || !is_one(op.args[2]))
    return false;
  const at::Tensor& other = op.args[1].toTensor();
  return other.defined() && storage_of(other) != nullptr &&
         access.storage_in_replay(other) != access.storage_in_replay(value) &&
         other.sizes() == value.sizes() && other.strides() == value.strides() &&
         other.scalar_type() == value.scalar_type();
}

// relu or hardtanh (scalar bounds) on `value` as the epilogue's activation.
std::optional<Epilogue> activation_on(const RecordedOp& op, const at::Tensor& value,
                                      const TraceAccess& access) {
  Epilogue epilogue;
  if ((named(op, "aten::relu_") || named(op, "aten::relu")) && op.args.size() == 1) {
    epilogue.activation = Activation::kRelu;
  } else if ((named(op, "aten::hardtanh_") || named(op, "aten::hardtanh")) && op.args.size() == 3 &&
             op.args[1].isScalar() && op.args[2].isScalar()) {
    epilogue.activation = Activation::kClamp;
    epilogue.lo = op.args[1].toScalar().toDouble();
    epilogue.hi = op.args[2].toScalar().toDouble();
  } else {
    return std::nullopt;
  }
  if (!reads_first(op, value, access)) return std::nullopt;
  return epilogue;
}

std::optional<TraceEpilogue> epilogue_after(
    const std::vector<RecordedOp>& ops, size_t index, const TraceAccess& access,
    const std::function<bool(const at::Tensor&)>& is_output) {
  const at::Tensor& result = ops[index].returns[0].toTensor();
  if (storage_of(result) == nullptr) return std::nullopt;
  TraceEpilogue found;
  found.op = static_cast<int>(index);
  std::optional<size_t> next = access.next_reader(result, index);
  if (next && is_residual_add(ops[*next], result, access)) {
    found.epilogue.residual = true;
    found.residual = ops[*next].args[1].toTensor();
    found.absorbed.push_back(static_cast<int>(*next));
    next = access.next_reader(result, *next);
  }
  if (next) {
    const RecordedOp& op = ops[*next];
    const std::optional<Epilogue> activation = activation_on(op, result, access);
    const bool in_place = writes_first_argument(op);
    // A functional activation's result replaces the product's: no other reader may see the
    // product, nor the caller.
    const bool takes_over = !in_place && !found.epilogue.residual &&
                            access.read_only_by(result, *next) && !is_output(result);
    if (activation && (in_place || takes_over)) {
      found.epilogue.activation = activation->activation;
      found.epilogue.lo = activation->lo;
      found.epilogue.hi = activation->hi;
      found.takes_over_result = !in_place;
      found.absorbed.push_back(static_cast<int>(*next));
    }
  }
  if (found.epilogue.empty()) return std::nullopt;
  return found;
}

}  // namespace

std::vector<TraceEpilogue> find_slot_epilogues(
    const std::vector<RecordedOp>& ops, const std::vector<NoopOp>& noops,
    const std::function<bool(const at::Tensor&)>& is_output) {
  const TraceAccess access(ops, noops);
  std::vector<TraceEpilogue> found;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!is_tunable(ops[i])) continue;
    if (auto epilogue = epilogue_after(ops, i, access, is_output))
      found.push_back(std::move(*epilogue));
  }
  return found;
}

}  // namespace nimble
