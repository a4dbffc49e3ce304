#include "csrc/passes/channels_last_ops.h"

#include <ATen/ATen.h>

#include <optional>

#include "csrc/kernels/cpu/torch_ops/nhwc_convolution.h"
#include "csrc/kernels/cpu/torch_ops/nhwc_tensor_ops.h"
#include "csrc/passes/epilogue_fusion.h"
#include "csrc/passes/op_patterns.h"
#include "csrc/passes/trace_access.h"

namespace nimble {

namespace {

bool channels_last_float(const c10::IValue& v) {
  if (!v.isTensor()) return false;
  const at::Tensor& t = v.toTensor();
  return t.dim() == 4 && t.device().is_cpu() && t.scalar_type() == at::kFloat &&
         t.layout() == at::kStrided && t.is_contiguous(at::MemoryFormat::ChannelsLast);
}

// A result the kernels may replace: channels_last float with channels_last's own strides. A
// value laid out both ways (1x1 pixels, or one channel) that kept the model's strides (the
// plan left it to ATen's op: its input was converted back) must keep them: a kernel's result
// has channels_last strides, a 1x1 map of which ATen's ops take for channels_last, and a
// transposed convolution after it then returns channels_last where the model's view needs
// NCHW (layout fuzz program 100140).
bool planned_channels_last(const c10::IValue& v) {
  return channels_last_float(v) &&
         v.toTensor().strides() ==
             at::IntArrayRef(c10::get_channels_last_strides_2d(v.toTensor().sizes()));
}

// A float [n, c, 1, 1] of x's n and c (dense either way), on the CPU.
bool is_channel_scale(const at::Tensor& s, const c10::IValue& x) {
  const at::Tensor& t = x.toTensor();
  return s.dim() == 4 && s.device().is_cpu() && s.scalar_type() == at::kFloat &&
         s.layout() == at::kStrided && s.is_contiguous() && s.size(0) == t.size(0) &&
         s.size(1) == t.size(1) && s.size(2) == 1 && s.size(3) == 1;
}

class ChannelsLastLowering {
 public:
  ChannelsLastLowering(std::vector<RecordedOp>& ops, const CpuLoweringCallbacks& callbacks)
      : ops_(ops), access_(ops), callbacks_(callbacks), drop_(ops.size(), false) {}

  int run() {
    int replaced = 0;
    for (size_t i = 0; i < ops_.size(); ++i) {
      if (drop_[i] || callbacks_.keeps_aten(ops_[i])) continue;
      std::optional<RecordedOp> lowered = lower(i);
      if (!lowered) continue;
      ops_[i] = std::move(*lowered);
      ++replaced;
    }
    std::vector<RecordedOp> kept;
    for (size_t i = 0; i < ops_.size(); ++i)
      if (!drop_[i]) kept.push_back(std::move(ops_[i]));
    ops_ = std::move(kept);
    return replaced;
  }

 private:
  bool unread(const c10::IValue& v, size_t after) const {
    return !v.isTensor() || !v.toTensor().defined() ||
           (!access_.read_after(v.toTensor(), after) && !callbacks_.is_output(v.toTensor()));
  }

  std::optional<RecordedOp> lower(size_t i) {
    const RecordedOp& op = ops_[i];
    const std::vector<c10::IValue>& a = op.args;
    if (is_spatial_mean(op) && channels_last_float(a[0]))
      return RecordedOp{kernels::mean_hw_nhwc_op(), {a[0], a[2]}, op.returns};
    if (op.returns.empty() || !planned_channels_last(op.returns[0])) return std::nullopt;
    if (named(op, "aten::max_pool2d_with_indices") && a.size() == 6 && channels_last_float(a[0]) &&
        op.returns.size() == 2 && unread(op.returns[1], i)) {
      return RecordedOp{kernels::max_pool2d_nhwc_op(), a, {op.returns[0]}};
    }
    if (named(op, "aten::avg_pool2d") && a.size() == 7 && channels_last_float(a[0])) {
      return RecordedOp{kernels::avg_pool2d_nhwc_op(), a, op.returns};
    }
    if (is_channel_cat(op)) {
      // Dense channels_last inputs or pieces of a split of one: cat_nhwc takes both.
      for (const c10::IValue& t : a[0].toListRef())
        if (!kernels::channel_rows(t.toTensor())) return std::nullopt;
      return RecordedOp{kernels::cat_nhwc_op(), {a[0]}, op.returns};
    }
    if (named(op, "aten::mul", "Tensor") && a.size() == 2) {
      // Squeeze-excitation's scale * x (or x * scale), scale of sizes [n, c, 1, 1]: 1 ms of
      // efficientnet_b0's replay at 224 pixels through ATen, on one thread.
      for (const size_t x : {0, 1}) {
        const c10::IValue& s = a[1 - x];
        if (channels_last_float(a[x]) && s.isTensor() && is_channel_scale(s.toTensor(), a[x]))
          return RecordedOp{kernels::scale_channels_nhwc_op(), {a[x], s}, op.returns};
      }
    }
    // Planned channels_last: its kernel then takes any input (converting what is not).
    if (named(op, "nimble::channel_shuffle"))
      return RecordedOp{kernels::channel_shuffle_nhwc_op(), a, op.returns};
    if (named(op, "aten::native_batch_norm") ||
        named(op, "aten::_native_batch_norm_legit_no_training"))
      return batch_norm(i);
    return std::nullopt;
  }

  // Whether `op` (the first reader of a batch norm's `result`, at `index`) is an activation
  // the batch norm can apply as it stores: in place on the result, or reading it and nothing
  // else reading it after, its own result channels_last.
  bool fuses_activation(const RecordedOp& op, const at::Tensor& result, size_t index) const {
    if (op.args.empty() || !op.args[0].isTensor() || !same_values(op.args[0].toTensor(), result) ||
        op.returns.size() != 1 || !op.returns[0].isTensor() || callbacks_.keeps_aten(op))
      return false;
    // Gelu stays ATen's (the batch norm's op takes its activation by name, without gelu's
    // approximation).
    const std::optional<Epilogue> fused = activation_of(op);
    if (!fused || fused->activation == Activation::kGeluErf ||
        fused->activation == Activation::kGeluTanh)
      return false;
    if (writes_first_argument(op)) return true;
    return planned_channels_last(op.returns[0]) && !access_.read_after(result, index) &&
           !callbacks_.is_output(result);
  }

  // native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum,
  // eps) in inference, or _native_batch_norm_legit_no_training(input, weight, bias,
  // running_mean, running_var, momentum, eps) (what torch.compile's graphs hold), and the
  // in-place activation right after it if there is one.
  std::optional<RecordedOp> batch_norm(size_t i) {
    const RecordedOp& op = ops_[i];
    const std::vector<c10::IValue>& a = op.args;
    const bool no_training = named(op, "aten::_native_batch_norm_legit_no_training");
    const size_t eps = no_training ? 6 : 7;
    const bool inference =
        no_training ? a.size() == 7 : a.size() == 8 && a[5].isBool() && !a[5].toBool();
    if (!inference || !channels_last_float(a[0]) || !a[3].isTensor() || !a[4].isTensor() ||
        !a[eps].isDouble() || op.returns.size() != 3 || !unread(op.returns[1], i) ||
        !unread(op.returns[2], i))
      return std::nullopt;
    const at::Tensor& result = op.returns[0].toTensor();
    c10::IValue returned = op.returns[0];
    std::string activation = "none";
    double lo = 0.0, hi = 0.0;
    const std::optional<size_t> next = access_.next_reader(result, i);
    if (next && !drop_[*next] && fuses_activation(ops_[*next], result, *next)) {
      const RecordedOp& activate = ops_[*next];
      const Epilogue fused = *activation_of(activate);
      activation = activation_name(fused.activation);
      lo = fused.lo;
      hi = fused.hi;
      if (!writes_first_argument(activate)) {
        returned = activate.returns[0];
      } else if (!activate.returns[0].toTensor().is_same(result)) {
        callbacks_.redirect(activate.returns[0].toTensor(), result);
      }
      drop_[*next] = true;
    }
    return RecordedOp{kernels::batch_norm_nhwc_op(),
                      {a[0], a[1], a[2], a[3], a[4], a[eps], c10::IValue(activation),
                       c10::IValue(lo), c10::IValue(hi)},
                      {returned}};
  }

  std::vector<RecordedOp>& ops_;
  const TraceAccess access_;
  const CpuLoweringCallbacks& callbacks_;
  std::vector<bool> drop_;  // activations fused into the batch norm before them
};

}  // namespace

bool has_channels_last_kernel(const RecordedOp& op) {
  const auto& name = op.handle.operator_name();
  if (is_spatial_mean(op)) return true;
  if (!name.overload_name.empty()) return false;
  return name.name == "aten::max_pool2d_with_indices" || name.name == "aten::avg_pool2d" ||
         name.name == "aten::cat" || name.name == "aten::native_batch_norm" ||
         name.name == "aten::_native_batch_norm_legit_no_training" ||
         name.name == "nimble::channel_shuffle";
}

int lower_channels_last_ops(std::vector<RecordedOp>& ops, const CpuLoweringCallbacks& callbacks) {
  return ChannelsLastLowering(ops, callbacks).run();
}

}  // namespace nimble
