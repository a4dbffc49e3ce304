#include "csrc/slot/context_measurer.h"

#include <ATen/Parallel.h>
#include <ATen/core/LegacyTypeDispatch.h>

#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "csrc/kernels/cpu/tuning_families/cpu_families.h"
#include "csrc/kernels/kernel_family.h"
#include "csrc/slot/lowering_choices.h"
#include "csrc/slot/program_tasks.h"
#include "csrc/threads/steady_ns.h"
#include "tuning/measure/adaptive_evaluator.h"

namespace nimble::slot {
namespace {

// The argument of `op` holding its lowered product, or -1.
int packed_argument(const OpNode& op) {
  for (size_t i = 0; i < op.args.size(); ++i) {
    const Arg& arg = op.args[i];
    if (arg.kind == Arg::Kind::kConstant && LoweredProduct::of(arg.constant))
      return static_cast<int>(i);
  }
  return -1;
}

at::Tensor run_on(const LoweredProduct& product, const std::vector<at::Tensor>& live) {
  // Copies: a kernel may write its result into the residual's memory.
  const std::optional<at::Tensor> other =
      live.size() > 1 ? std::optional<at::Tensor>(live[1].clone()) : std::nullopt;
  return product.run(live[0].clone(), other);
}

// Runs the lowered product and keeps its operands: the replay's kernel slot during
// capture_live.
class Capture : public KernelOverride {
 public:
  explicit Capture(std::shared_ptr<std::vector<at::Tensor>> live) : live_(std::move(live)) {}
  void call(std::vector<c10::IValue>& stack) const override {
    const at::Tensor input = stack.at(0).toTensor();
    std::optional<at::Tensor> other;
    if (!stack.at(1).isNone()) other = stack[1].toTensor();
    *live_ = {input.clone()};
    if (other) live_->push_back(other->clone());
    at::Tensor result = LoweredProduct::of(stack.at(2))->run(input, other);
    // An `.out` overload (a linear layer's where the program planned a buffer): the readers
    // of the result read the buffer, which must hold it.
    if (stack.size() > 3 && stack[3].isTensor()) {
      at::Tensor out = stack[3].toTensor();
      out.copy_(result.view(out.sizes()));
      result = std::move(out);
    }
    stack.clear();
    stack.emplace_back(std::move(result));
  }
  std::string describe() const override { return "capturing its operands for tuning"; }

 private:
  std::shared_ptr<std::vector<at::Tensor>> live_;
};

// The candidates in place of the task's ops for as long as it lives; the program's after.
class Swapped {
 public:
  Swapped(Replay& replay, const ContextTask& task, const std::vector<LoweredProduct>& candidates)
      : replay_(replay), task_(task) {
    for (size_t i = 0; i < task.sites.size(); ++i) {
      const ContextTask::Site& site = task.sites[i];
      std::optional<c10::IValue> before;
      for (const auto& [index, value] : replay.state().ops[site.op].args)
        if (index == site.arg) before = value;
      previous_.push_back(std::move(before));
      replay.set_op_argument(site.op, site.arg, candidates[i].value());
    }
  }
  ~Swapped() {
    for (size_t i = 0; i < previous_.size(); ++i)
      replay_.set_op_argument(task_.sites[i].op, task_.sites[i].arg, previous_[i]);
  }
  Swapped(const Swapped&) = delete;
  Swapped& operator=(const Swapped&) = delete;

 private:
  Replay& replay_;
  const ContextTask& task_;
  std::vector<std::optional<c10::IValue>> previous_;
};

}  // namespace

std::vector<ContextTask> context_tasks(const Replay& replay) {
  const Program& program = replay.program();
  std::vector<ContextTask> tasks;
  std::map<std::string, size_t> by_signature;
  for (int i = 0; i < static_cast<int>(program.ops.size()); ++i) {
    const int arg = packed_argument(program.ops[i]);
    if (arg < 0) continue;
    LoweredProduct packed = *LoweredProduct::of(program.ops[i].args[arg].constant);
    const std::string epilogue = packed.epilogue();
    const std::string signature = lowered_signature(packed.key(), epilogue);
    const auto found = by_signature.find(signature);
    if (found != by_signature.end()) {
      tasks[found->second].sites.push_back({i, arg, std::move(packed), {}, {}});
      continue;
    }
    const std::optional<kernels::TunableOp> op = lowered_op_of_shape_key(packed.key());
    if (!op) continue;  // not a 2-d convolution
    auto space = std::make_shared<const kernels::KernelSpace>(lowered_space(*op));
    if (space->empty() || space->default_config().empty()) continue;
    by_signature[signature] = tasks.size();
    tasks.push_back({std::move(space),
                     signature,
                     task_name(*op) + (epilogue == "none" ? "" : " +" + epilogue),
                     {{i, arg, packed, {}, {}}}});
  }
  return tasks;
}

void capture_live(Replay& replay, const std::vector<at::Tensor>& inputs,
                  std::vector<ContextTask>& tasks) {
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  const size_t ops = replay.program().ops.size();
  std::vector<std::shared_ptr<const KernelOverride>> before, capturing;
  for (const OpState& state : replay.state().ops) before.push_back(state.kernel);
  capturing = before;
  struct Kept {
    const ContextTask* task;
    ContextTask::Site* site;
    std::shared_ptr<std::vector<at::Tensor>> live;
  };
  std::vector<Kept> kept;
  for (ContextTask& task : tasks) {
    for (ContextTask::Site& site : task.sites) {
      if (before[site.op])
        throw std::invalid_argument("capture_live: op " + std::to_string(site.op) +
                                    " runs a bound kernel, not its lowered convolution");
      kept.push_back({&task, &site, std::make_shared<std::vector<at::Tensor>>()});
      capturing[site.op] = std::make_shared<Capture>(kept.back().live);
    }
  }
  capturing.resize(ops);
  replay.set_kernels(capturing);
  try {
    replay.run(inputs, /*copy_outputs=*/false);
  } catch (...) {
    replay.set_kernels(before);
    throw;
  }
  replay.set_kernels(before);
  for (const Kept& k : kept) {
    if (k.live->empty())
      throw std::runtime_error("capture_live: the replay did not run op " +
                               std::to_string(k.site->op));
    k.site->live = std::move(*k.live);
    const LoweredProduct rule =
        k.site->packed.with_config(*k.task->space, k.task->space->default_config());
    k.site->reference = run_on(rule, k.site->live);
  }
}

ContextMeasurer::ContextMeasurer(Replay& replay, const std::vector<at::Tensor>& inputs,
                                 ContextTask task, kernels::MeasureOptions options, int warm_ups)
    : replay_(replay),
      inputs_(inputs),
      task_(std::move(task)),
      options_(options),
      warm_ups_(warm_ups) {
  for (const ContextTask::Site& site : task_.sites)
    if (!site.reference.defined())
      throw std::invalid_argument("ContextMeasurer: " + task_.name +
                                  " has no live operands (capture_live)");
}

double ContextMeasurer::timed_replay() {
  const Replay::TimedRun run = replay_.run_timed(inputs_);
  double seconds = 0;
  int found = 0;
  for (const OpTiming& timing : run.ops) {
    for (const ContextTask::Site& site : task_.sites) {
      if (site.op != timing.op) continue;
      seconds += static_cast<double>(timing.end_ns - timing.start_ns) * 1e-9;
      ++found;
    }
  }
  if (found != static_cast<int>(task_.sites.size()))
    throw std::runtime_error("the executor timed " + std::to_string(found) + " of the " +
                             std::to_string(task_.sites.size()) + " ops of " + task_.name);
  return seconds / found;
}

tuning::MeasureResult ContextMeasurer::measure_one(const tuning::Config& config,
                                                   const tuning::RepeatPolicy& repeats) {
  tuning::MeasureResult result;
  std::vector<LoweredProduct> built;
  try {
    for (const ContextTask::Site& site : task_.sites)
      built.push_back(site.packed.with_config(*task_.space, config));
  } catch (const std::exception& e) {
    result.error = tuning::MeasureError::kCompile;
    result.message = e.what();
    return result;
  }
  try {
    for (size_t i = 0; i < built.size(); ++i) {
      const ContextTask::Site& site = task_.sites[i];
      const std::string wrong =
          kernels::compare_results(run_on(built[i], site.live), site.reference);
      if (wrong.empty()) continue;
      result.error = tuning::MeasureError::kRuntime;
      result.message = "op " + std::to_string(site.op) + ", against the rule's kernel on its " +
                       "inputs in the replay: " + wrong;
      return result;
    }
    const Swapped swapped(replay_, task_, built);
    for (int i = 0; i < warm_ups_; ++i) {
      const double first = timed_replay();
      if (i == 0 && first > options_.timeout_seconds) {
        result.error = tuning::MeasureError::kTimeout;
        std::ostringstream m;
        m << "first call in the replay took " << first << " s, over the "
          << options_.timeout_seconds << " s timeout";
        result.message = m.str();
        return result;
      }
      // Already far slower than the task's best on its first call: that call is its one sample,
      // measured-slow, and the other warm-ups and the timed repeats are not paid (a few such
      // candidates took seconds each on the lowered traces).
      if (i == 0 && repeats.slow_on_first_call(first)) {
        result.seconds = {first};
        result.cut_short = true;
        return result;
      }
    }
    tuning::time_with_policy(
        repeats, [&] { return timed_replay(); }, result, stalls_);
  } catch (const std::exception& e) {
    result.seconds.clear();
    result.error = tuning::MeasureError::kRuntime;
    result.message = e.what();
  }
  return result;
}

std::vector<tuning::MeasureResult> ContextMeasurer::measure(
    const std::vector<tuning::Config>& batch, const tuning::RepeatPolicy& repeats) {
  return kernels::measure_each(batch,
                               [&](const tuning::Config& c) { return measure_one(c, repeats); });
}

double ContextMeasurer::baseline_seconds(int repeats) {
  const tuning::FixedRepeats fixed(repeats);
  const tuning::MeasureResult result = measure({task_.space->default_config()}, fixed).at(0);
  if (!result.ok())
    throw std::runtime_error("the rule's kernel for " + task_.name +
                             " failed in its replay: " + result.message);
  return result.mean_seconds();
}

std::vector<tuning::Task> context_tuning_tasks(Replay& replay,
                                               const std::vector<at::Tensor>& inputs,
                                               std::vector<ContextTask> tasks,
                                               const kernels::MeasureOptions& options,
                                               const std::function<void(int)>& baseline) {
  capture_live(replay, inputs, tasks);
  std::vector<tuning::Task> out;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const ContextTask& task = tasks[i];
    auto measurer = std::make_shared<ContextMeasurer>(replay, inputs, task, options);
    const double seconds = measurer->baseline_seconds();
    out.push_back(task_over(*task.space, task.name, task.signature, task.sites.size(),
                            std::move(measurer), seconds));
    if (baseline) baseline(static_cast<int>(i));
  }
  return out;
}

}  // namespace nimble::slot
