#include "csrc/passes/cpu_layout_plan.h"

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <unordered_set>
#include <utility>

#include "csrc/passes/channels_last_ops.h"
#include "csrc/passes/op_patterns.h"

namespace nimble {

namespace {

bool is_four_d_tensor(const c10::IValue& v) { return v.isTensor() && v.toTensor().dim() == 4; }

// Ops whose results hold the same values whatever the memory layout of their tensor
// arguments (elementwise ops, inference batch norm, concatenation, pooling), so that they
// can read and return channels_last where the model had contiguous tensors.
bool is_layout_free(const RecordedOp& op) {
  static const std::unordered_set<std::string> kElementwise = {
      "aten::relu",        "aten::relu_",        "aten::hardtanh",  "aten::hardtanh_",
      "aten::silu",        "aten::silu_",        "aten::sigmoid",   "aten::sigmoid_",
      "aten::tanh",        "aten::tanh_",        "aten::hardswish", "aten::hardswish_",
      "aten::hardsigmoid", "aten::hardsigmoid_", "aten::gelu",      "aten::gelu_",
      "aten::leaky_relu",  "aten::leaky_relu_",  "aten::elu",       "aten::elu_",
      "aten::clamp",       "aten::clamp_",       "aten::clamp_min", "aten::clamp_min_",
      "aten::mish",        "aten::mish_",        "aten::add",       "aten::add_",
      "aten::sub",         "aten::sub_",         "aten::mul",       "aten::mul_",
      "aten::div",         "aten::div_",         "aten::maximum",   "aten::minimum"};
  static const std::unordered_set<std::string> kPooling = {
      "aten::max_pool2d_with_indices", "aten::avg_pool2d", "aten::adaptive_avg_pool2d",
      "aten::_adaptive_avg_pool2d", "aten::adaptive_max_pool2d"};
  const auto& name = op.handle.operator_name();
  if (op.returns.empty() || !op.returns[0].isTensor()) return false;
  if (kElementwise.count(name.name)) {
    // .Tensor and .Scalar overloads and the plain ones; not .out and the like.
    return name.overload_name.empty() || name.overload_name == "Tensor" ||
           name.overload_name == "Scalar";
  }
  if (is_spatial_mean(op)) return true;
  if (!name.overload_name.empty()) return false;
  if (name.name == "nimble::channel_shuffle") return true;
  if (kPooling.count(name.name)) return is_four_d_tensor(op.args[0]);
  if (name.name == "aten::cat") return true;
  // native_batch_norm(input, weight, bias, running_mean, running_var, training, ...): only
  // inference, where the running statistics are read and not updated.
  if (name.name == "aten::native_batch_norm")
    return op.args.size() > 5 && op.args[5].isBool() && !op.args[5].toBool() &&
           is_four_d_tensor(op.args[0]);
  return name.name == "aten::_native_batch_norm_legit_no_training" && is_four_d_tensor(op.args[0]);
}

// Ops whose channels-last kernels read slices of a wider tensor's channels as they are
// (nhwc_tensor_ops.h): their list of tensors may hold pieces of a planned value's split.
bool reads_channel_slices(const RecordedOp& op) {
  const std::string& name = op.handle.operator_name().name;
  return name == "aten::cat" || name == "nimble::channel_shuffle";
}

// split(value, size, 1) or split_with_sizes(value, sizes, 1) of a 4-d value: its pieces are
// views of slices of the value's channels (ShuffleNet's halves).
bool is_channel_split(const RecordedOp& op) {
  const auto& name = op.handle.operator_name();
  const bool split = (name.name == "aten::split" && name.overload_name == "Tensor") ||
                     (name.name == "aten::split_with_sizes" && name.overload_name.empty());
  return split && op.args.size() == 3 && is_four_d_tensor(op.args[0]) && op.args[2].isInt() &&
         (op.args[2].toInt() == 1 || op.args[2].toInt() == -3) && op.returns.size() == 1 &&
         op.returns[0].isTensorList();
}

// How many elementwise ops in a row may stand between a planned value and the reader that
// gains from it.
constexpr int kMaxElementwiseChain = 4;

class LayoutPlanner {
 public:
  LayoutPlanner(std::vector<RecordedOp>& ops, std::vector<FusedConvolution>& convs,
                const TraceAccess& access, const CpuLoweringCallbacks& callbacks)
      : ops_(ops), access_(access), callbacks_(callbacks) {
    for (FusedConvolution& conv : convs) {
      reader_of_[conv.product] = &conv;
      for (size_t f : conv.fused) reader_of_[f] = &conv;
    }
  }

  void plan(std::vector<FusedConvolution>& convs) {
    for (FusedConvolution& conv : convs) {
      if (!conv.aliases.empty() || !worth_planning(conv.result, conv.last())) continue;
      at::Tensor planned = channels_last_like(conv.result);
      route(conv.result, planned, conv.last());
      conv.result = planned;
      conv.keep_kernel_layout = true;
    }
  }

  // Conversions to insert, by the index of the op they follow.
  std::unordered_map<size_t, std::vector<RecordedOp>> conversions;

 private:
  static at::Tensor channels_last_like(const at::Tensor& t) {
    return at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::ChannelsLast));
  }

  std::vector<size_t> readers_after(const at::Tensor& value, size_t position) const {
    std::vector<size_t> out;
    const auto it = access_.readers.find(storage_of(value));
    if (it == access_.readers.end()) return out;
    for (size_t r : it->second)
      if (r > position) out.push_back(r);
    return out;
  }

  // Whether op `r` reads `value` itself (not a view of it) and can take it channels_last.
  bool layout_free_reader(size_t r, const at::Tensor& value) const {
    if (reader_of_.count(r)) return true;
    if (callbacks_.keeps_aten(ops_[r])) return false;
    if (routable_split(r, value)) return true;
    if (!is_layout_free(ops_[r]) || !reads_itself_or_pieces(r, value)) return false;
    // ATen gives a channels_last result for channels_last inputs: each such new result must
    // be plannable, or a reader that needs the model's layout (a view) would get the other.
    if (writes_first_argument(ops_[r]) || routed_.count(r)) return true;
    for (const c10::IValue& ret : ops_[r].returns) {
      if (needs_planning(ops_[r], ret) && !plannable(ret.toTensor(), r)) return false;
    }
    return true;
  }

  // Whether op `r` is a split of `value`'s channels whose every piece is read only by ops
  // that take a piece as it is: a lowered convolution as its input, or a concatenation or
  // channel shuffle. Routed, it splits the planned value instead.
  bool routable_split(size_t r, const at::Tensor& value) const {
    if (routed_splits_.count(r)) return true;  // its recorded value and pieces are replaced
    const RecordedOp& split = ops_[r];
    if (!is_channel_split(split) || callbacks_.keeps_aten(split) ||
        !same_values(split.args[0].toTensor(), value))
      return false;
    for (const at::Tensor& piece : split.returns[0].toTensorList()) {
      for (size_t reader : readers_after(value, r)) {
        bool reads_piece = false, as_is = false;
        for_each_tensor_arg(ops_[reader], [&](const at::Tensor& t, bool written) {
          if (!same_values(t, piece)) return;
          reads_piece = true;
          as_is = !written;
        });
        if (!reads_piece) continue;
        const auto lowered = reader_of_.find(reader);
        if (lowered != reader_of_.end()) {
          // The convolution itself (not an op fused into it), reading the piece as its input
          // (the recorded op's: routing replaces the FusedConvolution's).
          as_is = as_is && reader == lowered->second->product &&
                  same_values(ops_[reader].args[0].toTensor(), piece);
        } else {
          as_is = as_is && reads_channel_slices(ops_[reader]);
        }
        if (!as_is) return false;
      }
    }
    return true;
  }

  // Whether `t` is a piece of a routable split of `value` (before `position`).
  bool is_routable_piece(const at::Tensor& t, const at::Tensor& value, size_t position) const {
    if (storage_of(t) != storage_of(value)) return false;
    if (planned_piece(t)) return true;
    for (size_t r : readers_after(value, 0)) {
      if (r >= position || !is_channel_split(ops_[r])) continue;
      for (const at::Tensor& piece : ops_[r].returns[0].toTensorList())
        if (same_values(piece, t)) return routable_split(r, value);
    }
    return false;
  }

  // The planned value's piece that replaces `t`, if `t` is a piece of a routed split.
  std::optional<at::Tensor> planned_piece(const at::Tensor& t) const {
    for (const auto& [piece, planned] : planned_pieces_)
      if (same_values(piece, t)) return planned;
    return std::nullopt;
  }

  // reads_only_itself, or for an op that takes channel slices as they are, the value and
  // pieces of its routable splits.
  bool reads_itself_or_pieces(size_t r, const at::Tensor& value) const {
    if (!reads_channel_slices(ops_[r])) return reads_only_itself(r, value);
    bool reads_it = false, other = false;
    for_each_tensor_arg(ops_[r], [&](const at::Tensor& t, bool) {
      if (storage_of(t) != storage_of(value)) return;
      reads_it = true;
      other = other || !(same_values(t, value) || is_routable_piece(t, value, r));
    });
    return reads_it && !other;
  }

  bool reads_only_itself(size_t r, const at::Tensor& value) const {
    bool reads_it = false;
    bool reads_a_view = false;
    for_each_tensor_arg(ops_[r], [&](const at::Tensor& t, bool) {
      if (storage_of(t) != storage_of(value)) return;
      (same_values(t, value) ? reads_it : reads_a_view) = true;
    });
    return reads_it && !reads_a_view;
  }

  // Whether result `ret` of layout-free op `op`, reading a planned value, is replayed with
  // other strides than recorded: a 4-d result not laid out both ways, and one laid out both
  // ways (1x1 pixels, one channel) too, since ATen takes a 1x1 map of channels_last strides
  // for channels_last and an adaptive pooling after it returns channels_last where the
  // model's view needs NCHW (alexnet at 64x64). The spatial mean's kernel returns NCHW.
  static bool needs_planning(const RecordedOp& op, const c10::IValue& ret) {
    if (!is_four_d_tensor(ret)) return false;
    const at::Tensor& t = ret.toTensor();
    if (!t.is_contiguous(at::MemoryFormat::ChannelsLast)) return true;
    return !is_spatial_mean(op) &&
           t.strides() != at::IntArrayRef(c10::get_channels_last_strides_2d(t.sizes()));
  }

  bool writes(size_t r, const at::Tensor& value) const {
    auto writers = access_.writers.find(storage_of(value));
    return writers != access_.writers.end() &&
           std::find(writers->second.begin(), writers->second.end(), r) != writers->second.end();
  }

  // A value some reader writes in place can be planned only if no reader needs the model's
  // layout: a conversion right after the producer would not see that write.
  bool plannable(const at::Tensor& value, size_t position) const {
    bool written = false, all_free = !callbacks_.is_output(value);
    for (size_t r : readers_after(value, position)) {
      written = written || writes(r, value);
      all_free = all_free && (reader_of_.count(r) ||
                              (is_layout_free(ops_[r]) && !callbacks_.keeps_aten(ops_[r]) &&
                               reads_only_itself(r, value)));
    }
    return !written || all_free;
  }

  // Whether reading `value` channels_last pays in reader `r`: a lowered convolution, or a
  // pooling, concatenation or batch norm (nimble's channels-last kernels run those), or an
  // elementwise op whose result goes on to one of them. An elementwise op alone does not:
  // its result would need converting back instead of its input.
  bool reader_gains(size_t r, const at::Tensor& value, int depth = 0) const {
    if (reader_of_.count(r)) return true;
    if (is_channel_split(ops_[r]) || callbacks_.keeps_aten(ops_[r])) return false;
    if (!layout_free_reader(r, value) || writes_first_argument(ops_[r])) return false;
    if (has_channels_last_kernel(ops_[r])) return true;
    if (depth >= kMaxElementwiseChain) return false;
    for (const c10::IValue& ret : ops_[r].returns) {
      if (!needs_planning(ops_[r], ret)) continue;
      for (size_t next : readers_after(ret.toTensor(), r))
        if (reader_gains(next, ret.toTensor(), depth + 1)) return true;
    }
    return false;
  }

  // A convolution's result is planned where some reader gains from it.
  bool worth_planning(const at::Tensor& value, size_t position) const {
    bool gains = false;
    for (size_t r : readers_after(value, position)) gains = gains || reader_gains(r, value);
    return gains && plannable(value, position);
  }

  // Readers of `original` after `position` read `planned` where they can; the rest read
  // `original`, converted from `planned` right after `position`.
  void route(const at::Tensor& original, const at::Tensor& planned, size_t position) {
    bool convert = callbacks_.is_output(original);
    // Written in place: every reader must read the planned value (plannable() made sure each
    // can), since a conversion right after `position` would not see the write.
    bool written = false;
    for (size_t r : readers_after(original, position)) written = written || writes(r, original);
    for (size_t r : readers_after(original, position)) {
      auto lowered = reader_of_.find(r);
      if (lowered != reader_of_.end()) {
        bool replaced = false;
        for (at::Tensor* t : {&lowered->second->input, &lowered->second->other}) {
          if (t->defined() && same_values(*t, original)) {
            *t = planned;
            replaced = true;
          }
        }
        at::Tensor& input = lowered->second->input;
        const std::optional<at::Tensor> piece = replaced ? std::nullopt : planned_piece(input);
        if (piece) {
          input = *piece;
          replaced = true;
        }
        convert = convert || !replaced;
      } else if (routable_split(r, original)) {
        route_split(r, planned);
      } else if (layout_free_reader(r, original) &&
                 (written || writes_first_argument(ops_[r]) || reader_gains(r, original))) {
        route_layout_free(r, original, planned);
      } else {
        convert = true;
      }
    }
    if (convert) {
      RecordedOp to_model_layout{clone_, {planned, c10::MemoryFormat::Contiguous}, {original}};
      conversions[position].push_back(std::move(to_model_layout));
    }
  }

  // A layout-free op reading a planned value reads it channels_last; its new 4-d results are
  // planned too (an in-place op's result is the planned value itself).
  void route_layout_free(size_t r, const at::Tensor& original, const at::Tensor& planned) {
    RecordedOp& op = ops_[r];
    const bool in_place = writes_first_argument(op);
    const bool writes_planned =
        in_place && op.args[0].isTensor() && same_values(op.args[0].toTensor(), original);
    for (c10::IValue& arg : op.args) {
      if (arg.isTensor() && same_values(arg.toTensor(), original)) arg = planned;
      if (!arg.isList()) continue;
      c10::impl::GenericList list = arg.toList();
      for (size_t i = 0; i < list.size(); ++i) {
        const c10::IValue item = list.get(i);
        if (!item.isTensor()) continue;
        if (same_values(item.toTensor(), original)) {
          list.set(i, planned);
        } else if (const std::optional<at::Tensor> piece = planned_piece(item.toTensor())) {
          list.set(i, *piece);
        }
      }
    }
    if (in_place) {
      if (writes_planned) op.returns[0] = planned;
      return;
    }
    if (!routed_.insert(r).second) return;  // its results were planned by an earlier input
    for (c10::IValue& ret : op.returns) {
      if (!needs_planning(op, ret)) continue;
      const at::Tensor result = ret.toTensor();
      at::Tensor planned_result = channels_last_like(result);
      ret = planned_result;
      route(result, planned_result, r);
    }
  }

  // A routable split splits the planned value; each piece its readers read becomes the
  // planned value's piece (same channels, channels_last strides).
  void route_split(size_t r, const at::Tensor& planned) {
    routed_splits_.insert(r);
    RecordedOp& split = ops_[r];
    const c10::List<at::Tensor> pieces = split.returns[0].toTensorList();
    std::vector<int64_t> sizes;
    for (const at::Tensor& piece : pieces) sizes.push_back(piece.size(1));
    const std::vector<at::Tensor> planned_pieces = at::split_with_sizes(planned, sizes, 1);
    c10::List<at::Tensor> returned;
    for (size_t i = 0; i < planned_pieces.size(); ++i) {
      planned_pieces_.emplace_back(pieces.get(i), planned_pieces[i]);
      returned.push_back(planned_pieces[i]);
    }
    split.args[0] = planned;
    split.returns[0] = returned;
  }

  std::vector<RecordedOp>& ops_;
  const TraceAccess& access_;
  const CpuLoweringCallbacks& callbacks_;
  std::unordered_map<size_t, FusedConvolution*> reader_of_;
  std::unordered_set<size_t> routed_, routed_splits_;
  std::vector<std::pair<at::Tensor, at::Tensor>> planned_pieces_;  // (piece, planned piece)
  const c10::OperatorHandle clone_ =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::clone", "");
};

}  // namespace

std::unordered_map<size_t, std::vector<RecordedOp>> plan_cpu_layouts(
    std::vector<RecordedOp>& ops, std::vector<FusedConvolution>& convs, const TraceAccess& access,
    const CpuLoweringCallbacks& callbacks) {
  LayoutPlanner planner(ops, convs, access, callbacks);
  planner.plan(convs);
  return std::move(planner.conversions);
}

}  // namespace nimble
