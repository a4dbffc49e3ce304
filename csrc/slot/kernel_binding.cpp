#include "csrc/slot/kernel_binding.h"

#include <ATen/core/LegacyTypeDispatch.h>

#include <algorithm>
#include <sstream>

#include "csrc/kernels/kernel_family.h"
#include "csrc/slot/program_tasks.h"
#include "tuning/measure/adaptive_evaluator.h"
#include "tuning/measure/measure_result.h"

namespace nimble::slot {
namespace {

// The slot's adapter: the op's boxed stack in, the kernel's result as the op's return.
// The residual its epilogue adds, when there is one, comes after the op's own arguments.
class SlotKernel : public KernelOverride {
 public:
  SlotKernel(const kernels::TunableSite& site, std::unique_ptr<kernels::TunedKernel> kernel,
             std::string description)
      : KernelOverride(site.residual_slot >= 0 ? std::vector<int>{site.residual_slot}
                                               : std::vector<int>{}),
        op_(site.op),
        kernel_(std::move(kernel)),
        description_(std::move(description)) {}
  void call(std::vector<c10::IValue>& stack) const override {
    kernels::return_on_stack(op_, kernel_->run(kernels::operands_from_stack(op_, stack)), stack);
  }
  std::string describe() const override { return description_; }

 private:
  kernels::TunableOp op_;
  std::unique_ptr<kernels::TunedKernel> kernel_;
  std::string description_;
};

// An in-place op whose work a bound kernel's epilogue did: returns its first argument (the
// result it would have written in place), touching nothing.
class AbsorbedOp : public KernelOverride {
 public:
  explicit AbsorbedOp(int into) : into_(into) {}
  void call(std::vector<c10::IValue>& stack) const override { stack.resize(1); }
  std::string describe() const override {
    return "done by the epilogue of op " + std::to_string(into_);
  }

 private:
  int into_;
};

// The best record for the task: this device's, or with `any_device` the fastest of any.
std::optional<tuning::DatabaseRecord> best_record(const tuning::TuningDatabase& database,
                                                  const std::string& signature,
                                                  const BindOptions& options) {
  auto best = database.best(signature, options.device);
  if (best || !options.any_device) return best;
  for (const std::string& device : database.devices()) {
    auto r = database.best(signature, device);
    if (r && (!best || r->result.mean_seconds() < best->result.mean_seconds())) best = r;
  }
  return best;
}

}  // namespace

std::vector<BoundOp> bind_tuned_kernels(Replay& replay, const tuning::TuningDatabase& database,
                                        const BindOptions& options) {
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  const Program& program = replay.program();
  std::vector<std::shared_ptr<const KernelOverride>> kernels(program.ops.size());
  std::vector<BoundOp> report;
  const auto flusher = kernels::make_flusher(options.measure);
  for (const ProgramTask& task :
       program_tasks(program, kernels::all_families(options.cubin_directory))) {
    const kernels::KernelSpace& space = *task.space;
    BoundOp first;
    first.task = task.name;
    first.signature = space.op().signature();
    const auto record = best_record(database, first.signature, options);
    std::vector<std::unique_ptr<kernels::TunedKernel>> built;  // one per op: caches differ
    if (!record) {
      first.reason = "no successful record for this op on " + options.device;
    } else {
      first.record_device = record->device;
      if (!space.knobs().valid(record->config)) {
        first.reason = "the record's config " + tuning::config_to_json(record->config) +
                       " does not fit this op's kernel space (recorded by another version?)";
      } else {
        first.kernel = space.describe(record->config);
        if (record->device != options.device)
          first.reason = "record from another device: " + record->device;
        try {
          for (size_t i = 0; i < task.sites.size(); ++i)
            built.push_back(space.build(record->config));
          const auto operands = space.op().random_operands(options.measure.seed + 1);
          kernels::MeasureOptions measure = options.measure;
          measure.device = space.op().device;
          const std::string wrong =
              kernels::compare_results(built[0]->run(operands), space.op().aten(operands));
          if (!wrong.empty()) throw std::runtime_error(wrong);
          const tuning::FixedRepeats three(3);
          const auto cold = kernels::cold_start(*flusher, operands, measure);
          std::vector<double> aten, tuned;
          for (int round = 0; round < options.rounds; ++round) {
            tuning::MeasureResult a, t;
            aten.push_back(
                kernels::time_calls([&] { space.op().aten(operands); }, three, measure, a, cold));
            tuned.push_back(
                kernels::time_calls([&] { built[0]->run(operands); }, three, measure, t, cold));
          }
          first.aten_seconds = tuning::median_seconds(aten);
          first.tuned_seconds = tuning::median_seconds(tuned);
          first.bound = first.aten_seconds >= options.min_speedup * first.tuned_seconds;
          if (!first.bound) first.reason = "not faster than ATen when timed side by side";
        } catch (const std::exception& e) {
          first.reason = std::string("failed its check: ") + e.what();
          first.bound = false;
        }
      }
    }
    for (size_t i = 0; i < task.sites.size(); ++i) {
      const kernels::TunableSite& site = task.sites[i];
      BoundOp b = first;
      b.op = site.index;
      b.absorbed = site.absorbed;
      if (b.bound) {
        kernels[b.op] = std::make_shared<SlotKernel>(site, std::move(built[i]), b.kernel);
        for (int absorbed : site.absorbed) kernels[absorbed] = std::make_shared<AbsorbedOp>(b.op);
      }
      report.push_back(std::move(b));
    }
  }
  replay.set_kernels(std::move(kernels));
  std::sort(report.begin(), report.end(),
            [](const BoundOp& a, const BoundOp& b) { return a.op < b.op; });
  return report;
}

}  // namespace nimble::slot
