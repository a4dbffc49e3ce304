#include "csrc/passes/channel_shuffle_fusion.h"

#include <ATen/ATen.h>

#include <optional>

#include "csrc/kernels/cpu/torch_ops/nhwc_tensor_ops.h"
#include "csrc/passes/op_patterns.h"
#include "csrc/passes/trace_access.h"

namespace nimble {

namespace {

at::Tensor first_return(const RecordedOp& op) {
  return op.returns.size() == 1 && op.returns[0].isTensor() ? op.returns[0].toTensor()
                                                            : at::Tensor();
}

// The ops of one shuffle: [cat ->] view -> transpose -> clone -> view.
struct Shuffle {
  std::optional<size_t> cat;
  size_t view = 0, transpose = 0, clone = 0, unview = 0;
  int64_t groups = 0;
};

class ShuffleFinder {
 public:
  ShuffleFinder(const std::vector<RecordedOp>& ops, const CpuLoweringCallbacks& callbacks)
      : ops_(ops), access_(ops), callbacks_(callbacks) {}

  // The shuffle whose transpose is op `j`, if the four ops are one and nothing else reads
  // what lies between them.
  std::optional<Shuffle> at(size_t j) const {
    const RecordedOp& t_op = ops_[j];
    if (!named(t_op, "aten::transpose", "int") || t_op.args.size() != 3 ||
        !t_op.args[0].isTensor() || !t_op.args[1].isInt() || !t_op.args[2].isInt())
      return std::nullopt;
    const at::Tensor grouped = t_op.args[0].toTensor();  // [n, groups, c / groups, h, w]
    if (grouped.dim() != 5 || dim5(t_op.args[1].toInt()) + dim5(t_op.args[2].toInt()) != 3 ||
        dim5(t_op.args[1].toInt()) * dim5(t_op.args[2].toInt()) != 2)
      return std::nullopt;
    Shuffle s;
    s.transpose = j;
    const auto made = access_.producer.find(grouped.unsafeGetTensorImpl());
    if (made == access_.producer.end() || !named(ops_[made->second], "aten::view"))
      return std::nullopt;
    s.view = made->second;
    const at::Tensor input = ops_[s.view].args[0].toTensor();  // [n, c, h, w]
    if (input.dim() != 4 || !input.is_contiguous() || input.scalar_type() != at::kFloat ||
        !input.device().is_cpu() || grouped.size(0) != input.size(0) ||
        grouped.size(1) * grouped.size(2) != input.size(1) || grouped.size(3) != input.size(2) ||
        grouped.size(4) != input.size(3))
      return std::nullopt;
    s.groups = grouped.size(1);
    const at::Tensor transposed = first_return(t_op);
    const std::optional<size_t> k = access_.next_reader(transposed, j);
    if (!k || !named(ops_[*k], "aten::clone") || ops_[*k].args.size() != 2 ||
        !ops_[*k].args[0].isTensor() || !same_values(ops_[*k].args[0].toTensor(), transposed))
      return std::nullopt;
    s.clone = *k;
    const at::Tensor copied = first_return(ops_[s.clone]);
    if (!copied.defined() || !copied.is_contiguous() || callbacks_.is_output(copied))
      return std::nullopt;
    const std::optional<size_t> l = access_.next_reader(copied, s.clone);
    if (!l || !named(ops_[*l], "aten::view") || !same_values(ops_[*l].args[0].toTensor(), copied))
      return std::nullopt;
    s.unview = *l;
    for (size_t part : {s.view, s.transpose, s.clone, s.unview})
      if (callbacks_.keeps_aten(ops_[part])) return std::nullopt;
    const at::Tensor shuffled = first_return(ops_[s.unview]);
    if (!shuffled.defined() || shuffled.sizes() != input.sizes()) return std::nullopt;
    // Nothing else uses what lies between them (the result, and views of it, may be read).
    if (!used_only_by(grouped, s.transpose) || !used_only_by(transposed, s.clone) ||
        !used_only_by(copied, s.unview) || access_.written_between(input, s.view, s.clone, {}))
      return std::nullopt;
    // The concatenation that made the input, when nothing else reads it.
    const auto cat = access_.producer.find(input.unsafeGetTensorImpl());
    if (cat != access_.producer.end() && is_channel_cat(ops_[cat->second]) &&
        !callbacks_.is_output(input) && used_only_by(input, s.view) &&
        access_.readers.at(storage_of(input)).back() == s.clone &&
        !callbacks_.keeps_aten(ops_[cat->second]))
      s.cat = cat->second;
    return s;
  }

 private:
  static int64_t dim5(int64_t d) { return d < 0 ? d + 5 : d; }

  // Whether op `user` is the only one with `t` itself (not another view of its storage)
  // among its arguments.
  bool used_only_by(const at::Tensor& t, size_t user) const {
    const auto it = access_.readers.find(storage_of(t));
    if (it == access_.readers.end()) return false;
    for (size_t r : it->second) {
      if (r == user) continue;
      bool uses = false;
      for_each_tensor_arg(ops_[r], [&](const at::Tensor& arg, bool) {
        uses = uses || arg.unsafeGetTensorImpl() == t.unsafeGetTensorImpl();
      });
      if (uses) return false;
    }
    return true;
  }

  const std::vector<RecordedOp>& ops_;
  const TraceAccess access_;
  const CpuLoweringCallbacks& callbacks_;
};

}  // namespace

int fuse_channel_shuffles(std::vector<RecordedOp>& ops, const CpuLoweringCallbacks& callbacks) {
  std::vector<Shuffle> shuffles;
  {
    const ShuffleFinder finder(ops, callbacks);
    for (size_t j = 0; j < ops.size(); ++j)
      if (std::optional<Shuffle> s = finder.at(j)) shuffles.push_back(*s);
  }
  if (shuffles.empty()) return 0;
  std::vector<bool> drop(ops.size(), false);
  for (const Shuffle& s : shuffles) {
    c10::List<at::Tensor> inputs;
    if (s.cat) {
      for (const c10::IValue& t : ops[*s.cat].args[0].toListRef()) inputs.push_back(t.toTensor());
      drop[*s.cat] = true;
    } else {
      inputs.push_back(ops[s.view].args[0].toTensor());
    }
    drop[s.view] = drop[s.transpose] = drop[s.clone] = true;
    ops[s.unview] = RecordedOp{kernels::channel_shuffle_op(),
                               {c10::IValue(inputs), c10::IValue(s.groups)},
                               {ops[s.unview].returns[0]},
                               ops[s.unview].trace_position};
  }
  std::vector<RecordedOp> kept;
  for (size_t i = 0; i < ops.size(); ++i)
    if (!drop[i]) kept.push_back(std::move(ops[i]));
  ops = std::move(kept);
  return static_cast<int>(shuffles.size());
}

}  // namespace nimble
