#include "csrc/passes/linear_lowering.h"

#include <ATen/ATen.h>

#include "csrc/kernels/cpu/torch_ops/prepacked_linear.h"
#include "csrc/kernels/cpu/torch_ops/tuned_convolution.h"
#include "csrc/passes/epilogue_fusion.h"
#include "csrc/passes/op_patterns.h"

namespace nimble {

namespace {

bool float_on_cpu(const at::Tensor& t, int64_t dim) {
  return t.defined() && t.dim() == dim && t.device().is_cpu() && t.scalar_type() == at::kFloat &&
         t.layout() == at::kStrided;
}

// Whether the trace neither computes nor writes `t` and it is no input: its values at
// prepare stay its values until a source changes (which the kernel sees).
bool constant_in_trace(const at::Tensor& t, const TraceAccess& access,
                       const CpuLoweringCallbacks& callbacks) {
  if (callbacks.is_input(t)) return false;
  const auto writers = access.writers.find(storage_of(t));
  return !access.producer.count(t.unsafeGetTensorImpl()) &&
         (writers == access.writers.end() || writers->second.empty());
}

// The transpose of a 2-d tensor: t, transpose(0, 1), permute([1, 0]).
bool is_transpose(const RecordedOp& op) {
  const auto& name = op.handle.operator_name();
  if (op.args.empty() || !op.args[0].isTensor() || op.args[0].toTensor().dim() != 2) return false;
  if (name.name == "aten::t" && name.overload_name.empty()) return true;
  if (name.name == "aten::transpose" && name.overload_name == "int") {
    const int64_t a = op.args[1].toInt(), b = op.args[2].toInt();
    return (a + 2) % 2 != (b + 2) % 2;
  }
  if (name.name == "aten::permute" && name.overload_name.empty()) {
    const std::vector<int64_t> dims = op.args[1].toIntVector();
    return dims.size() == 2 && (dims[0] + 2) % 2 == 1 && (dims[1] + 2) % 2 == 0;
  }
  return false;
}

// Whether `a` is `b.t()`, read from their metadata (a view made here would ask autograd
// about `b`, which a model may have made a view modified in place).
bool transposes(const at::Tensor& a, const at::Tensor& b) {
  return storage_of(a) == storage_of(b) && a.storage_offset() == b.storage_offset() &&
         a.size(0) == b.size(1) && a.size(1) == b.size(0) && a.stride(0) == b.stride(1) &&
         a.stride(1) == b.stride(0);
}

// The weight the right operand `mat2` reads, and whether it is its transpose.
std::optional<std::pair<at::Tensor, bool>> weight_source(const std::vector<RecordedOp>& ops,
                                                         const at::Tensor& mat2,
                                                         const TraceAccess& access,
                                                         const CpuLoweringCallbacks& callbacks) {
  auto made = access.producer.find(mat2.unsafeGetTensorImpl());
  if (made == access.producer.end())
    return constant_in_trace(mat2, access, callbacks) ? std::optional(std::pair(mat2, false))
                                                      : std::nullopt;
  const RecordedOp& op = ops[made->second];
  if (!is_transpose(op)) return std::nullopt;
  const at::Tensor& source = op.args[0].toTensor();
  if (!constant_in_trace(source, access, callbacks) || !transposes(mat2, source))
    return std::nullopt;
  return std::pair(source, true);
}

}  // namespace

std::optional<FusedLinear> lower_linear(const std::vector<RecordedOp>& ops, size_t index,
                                        const TraceAccess& access,
                                        const CpuLoweringCallbacks& callbacks,
                                        std::vector<bool>& taken) {
  const RecordedOp& op = ops[index];
  const auto& name = op.handle.operator_name();
  if (!name.overload_name.empty() || op.returns.size() != 1 || !op.returns[0].isTensor())
    return std::nullopt;
  FusedLinear linear;
  at::Tensor mat2;
  if (is_plain_addmm(op)) {
    linear.bias = op.args[0].toTensor();
    linear.input = op.args[1].toTensor();
    mat2 = op.args[2].toTensor();
  } else if (name.name == "aten::mm" && op.args.size() == 2) {
    linear.input = op.args[0].toTensor();
    mat2 = op.args[1].toTensor();
  } else {
    return std::nullopt;
  }
  if (!float_on_cpu(linear.input, 2) || !float_on_cpu(mat2, 2)) return std::nullopt;
  if (linear.bias.defined() &&
      (!float_on_cpu(linear.bias, 1) || linear.bias.size(0) != mat2.size(1) ||
       !constant_in_trace(linear.bias, access, callbacks)))
    return std::nullopt;
  const auto source = weight_source(ops, mat2, access, callbacks);
  if (!source) return std::nullopt;
  std::tie(linear.source, linear.transposed) = *source;
  linear.kernel =
      kernels::PrepackedLinear::choose(linear.input.size(0), mat2.size(0), mat2.size(1));
  if (!linear.kernel) return std::nullopt;
  if (callbacks.tuned) {
    const auto found = callbacks.tuned->find(
        kernels::PrepackedLinear::shape_key(linear.input.size(0), mat2.size(0), mat2.size(1)));
    if (found != callbacks.tuned->end()) {
      const kernels::TunedLinear tuned = kernels::TunedLinear::parse(found->second);
      linear.kernel = tuned.kernel;
      linear.threads = tuned.threads;
      linear.parameters = tuned.parameters;
    }
  }
  linear.product = index;
  linear.result = op.returns[0].toTensor();
  std::vector<bool> tentative = taken;
  fuse_epilogue(linear, ops, access, callbacks, tentative, /*through_views=*/true);
  // The kernels give a contiguous result: an add whose other operand was laid out
  // otherwise gave its layout to the add's result, which readers may rely on.
  if (inputs_unchanged(linear, access) && linear.result.is_contiguous()) {
    taken = std::move(tentative);
  } else {  // lowered alone, with nothing fused
    linear.fused.clear();
    linear.aliases.clear();
    linear.other = at::Tensor();
    linear.epilogue = Epilogue();
    linear.result = op.returns[0].toTensor();
  }
  taken[index] = true;
  return linear;
}

RecordedOp make_fused_linear_op(const FusedLinear& linear,
                                const std::shared_ptr<kernels::NonFiniteWeights>& non_finite) {
  auto packed = c10::make_intrusive<kernels::PrepackedLinear>(
      linear.source, linear.transposed, linear.bias, linear.epilogue, linear.input.size(0),
      linear.result.sizes().vec(), *linear.kernel, non_finite, linear.threads, linear.parameters);
  RecordedOp op{kernels::linear_prepacked_op(), {}, {}};
  op.args = {linear.input, linear.other.defined() ? c10::IValue(linear.other) : c10::IValue(),
             c10::IValue(std::move(packed))};
  op.returns = {linear.result};
  return op;
}

}  // namespace nimble
