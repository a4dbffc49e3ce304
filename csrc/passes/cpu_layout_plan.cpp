#include "csrc/passes/cpu_layout_plan.h"

#include <ATen/ATen.h>

#include "csrc/passes/op_patterns.h"

namespace nimble {

namespace {

// Whether the op is a pooling that computes the same in channels_last.
bool is_layout_free_pooling(const RecordedOp& op) {
  const auto& name = op.handle.operator_name();
  return (name.name == "aten::max_pool2d_with_indices" || name.name == "aten::avg_pool2d") &&
         name.overload_name.empty() && op.args[0].isTensor() && op.args[0].toTensor().dim() == 4 &&
         !op.returns.empty() && op.returns[0].isTensor();
}

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

  bool layout_free_reader(size_t r, const at::Tensor& value) const {
    if (reader_of_.count(r)) return true;
    return is_layout_free_pooling(ops_[r]) && same_values(ops_[r].args[0].toTensor(), value) &&
           !writes_first_argument(ops_[r]);
  }

  // Planned only where some reader gains from it and no reader writes it in place (readers
  // after that write would otherwise see the planned copy, not the written one).
  bool worth_planning(const at::Tensor& value, size_t position) const {
    bool gains = false;
    for (size_t r : readers_after(value, position)) {
      auto writers = access_.writers.find(storage_of(value));
      if (writers != access_.writers.end() &&
          std::find(writers->second.begin(), writers->second.end(), r) != writers->second.end())
        return false;
      gains = gains || layout_free_reader(r, value);
    }
    return gains;
  }

  // Readers of `original` after `position` read `planned` where they can; the rest read
  // `original`, converted from `planned` right after `position`.
  void route(const at::Tensor& original, const at::Tensor& planned, size_t position) {
    bool convert = callbacks_.is_output(original);
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
        convert = convert || !replaced;
      } else if (layout_free_reader(r, original)) {
        route_pooling(r, planned);
      } else {
        convert = true;
      }
    }
    if (convert) {
      RecordedOp to_model_layout{clone_, {planned, c10::MemoryFormat::Contiguous}, {original}};
      conversions[position].push_back(std::move(to_model_layout));
    }
  }

  // A pooling reading a planned value runs in channels_last: its results are planned too.
  void route_pooling(size_t r, const at::Tensor& planned_input) {
    RecordedOp& pool = ops_[r];
    pool.args[0] = planned_input;
    for (c10::IValue& ret : pool.returns) {
      if (!ret.isTensor() || !ret.toTensor().defined()) continue;
      const at::Tensor original = ret.toTensor();
      at::Tensor planned = channels_last_like(original);
      ret = planned;
      route(original, planned, r);
    }
  }

  std::vector<RecordedOp>& ops_;
  const TraceAccess& access_;
  const CpuLoweringCallbacks& callbacks_;
  std::unordered_map<size_t, FusedConvolution*> reader_of_;
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
