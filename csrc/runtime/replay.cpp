#include "csrc/runtime/replay.h"

#include <ATen/ATen.h>
#include <ATen/core/LegacyTypeDispatch.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <unordered_set>

#include "csrc/errors.h"
#include "csrc/runtime/tensor_description.h"

namespace nimble {

namespace {

// TensorIterator's set-up costs more than the copy itself for the small inputs of a
// low-latency replay; plain memcpy serves the common dense CPU case.
void copy_into(at::Tensor& dst, const at::Tensor& src) {
  if (dst.is_cpu() && src.is_cpu() && dst.scalar_type() == src.scalar_type() &&
      dst.is_contiguous() && src.is_contiguous() && dst.sizes() == src.sizes() && !src.is_conj() &&
      !src.is_neg()) {
    std::memcpy(dst.data_ptr(), src.const_data_ptr(), src.nbytes());
  } else {
    dst.copy_(src);
  }
}

at::Tensor copy_of(const at::Tensor& src) {
  // An output may be an expanded or otherwise overlapping view (`x.expand(...)`): its
  // strides cannot be given to a tensor of its own; clone makes those dense.
  if (!src.is_non_overlapping_and_dense() || !src.is_cpu()) return src.clone();
  at::Tensor dst = at::empty_strided(src.sizes(), src.strides(), src.options());
  std::memcpy(dst.data_ptr(), src.const_data_ptr(), src.nbytes());
  return dst;
}

}  // namespace

Replay::Replay(BuiltProgram built, const ExecutorOptions& options, ExecutorFactory make)
    : program_(std::move(built.program)),
      state_(std::move(built.state)),
      options_(options),
      make_executor_(std::move(make)),
      aliasing_(program_),
      state_watch_(program_, state_),
      graph_pool_(new_graph_pool(program_)) {
  rebuild_executor();
}

void Replay::set_state_names(const std::vector<std::pair<at::Tensor, std::string>>& names) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_watch_.set_names(names);
}

void Replay::rebuild_executor() {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  ExecutorOptions options = options_;
  options.graph_pool = graph_pool_;
  // Built beside the old executor, which stays when the build fails. A failed build may
  // have written the slots the old one uses (a graph's warm-up makes new outputs, then
  // drops its transients): they are put back as the old one left them.
  std::vector<c10::IValue> values = state_.values;
  std::unique_ptr<Executor> built;
  try {
    built = make_executor_(program_, state_, options);
  } catch (...) {
    state_.values = std::move(values);
    throw;
  }
  executor_ = std::move(built);
  addresses_recorded_ = executor_->reuses_outputs();
  // An executor that reuses its outputs has its input addresses baked in too (a graph):
  // inputs are copied there instead of bound.
  binding_ = executor_->reuses_outputs() ? nullptr
                                         : std::make_unique<InputBinding>(program_, state_, true);
}

void Replay::check_inputs(const std::vector<at::Tensor>& inputs) const {
  if (inputs.size() != program_.inputs.size()) {
    std::ostringstream msg;
    msg << "expected " << program_.inputs.size() << " input tensors (as at prepare), got "
        << inputs.size();
    throw BadInput(msg.str());
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& expected = state_.values[program_.inputs[i]].toTensor();
    const at::Tensor& got = inputs[i];
    if (!got.defined()) {
      throw BadInput("input " + std::to_string(i) + ": expected " + describe(expected) +
                     ", got None");
    }
    if (got.sizes() != expected.sizes() || got.scalar_type() != expected.scalar_type() ||
        got.device() != expected.device()) {
      throw BadInput("input " + std::to_string(i) + ": expected " + describe(expected) +
                     " (as at prepare), got " + describe(got));
    }
  }
  aliasing_.check(program_, state_, inputs);
}

InputBinding::Scope Replay::bind_inputs(const std::vector<at::Tensor>& inputs) const {
  return binding_ ? binding_->bind(program_, state_, inputs) : InputBinding::Scope();
}

void Replay::check_state() {
  std::lock_guard<std::mutex> lock(mutex_);
  follow_state();
}

void Replay::follow_state() {
  // An executor may hold the old addresses (a CUDA graph records them): it is built anew.
  // When that fails, the old one would read memory the model no longer uses: it goes, and
  // the next call builds again (or raises again).
  if (state_watch_.follow(state_, addresses_recorded_, pre_check_.get())) {
    try {
      rebuild_executor();
    } catch (...) {
      executor_.reset();
      throw;
    }
  }
}

const Executor& Replay::executor() const {
  if (!executor_) {
    throw std::runtime_error(
        "this replay has no executor: building it again after the model changed failed (see "
        "the error of that call); the next call builds it again");
  }
  return *executor_;
}

Executor& Replay::ready_executor() {
  if (!executor_) rebuild_executor();
  return *executor_;
}

void Replay::copy_in(const std::vector<at::Tensor>& inputs, const InputBinding::Scope& bound) {
  // A caller may hand back memory of this replay's input buffers: an output given out
  // with copy_outputs=False that views an input (`x.t()`). Copied in one by one, it would
  // be overwritten before it is read, or copied onto itself; such inputs are copied
  // aside first.
  std::vector<at::Tensor> aside(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].has_storage()) continue;
    for (size_t k = 0; k < inputs.size(); ++k) {
      const at::Tensor& buffer = state_.values[program_.inputs[k]].toTensor();
      if (!bound.bound(k) && !(k == i && buffer.is_same(inputs[i])) &&
          buffer.storage().is_alias_of(inputs[i].storage())) {
        aside[i] = inputs[i].clone();
        break;
      }
    }
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (bound.bound(i)) continue;
    at::Tensor& buffer = state_.values[program_.inputs[i]].toTensor();
    const at::Tensor& source = aside[i].defined() ? aside[i] : inputs[i];
    if (!buffer.is_same(source)) copy_into(buffer, source);
  }
}

void Replay::copy_back(const std::vector<at::Tensor>& inputs, const InputBinding::Scope& bound) {
  for (int i : program_.mutated_inputs) {
    if (bound.bound(i)) continue;
    const at::Tensor& buffer = state_.values[program_.inputs[i]].toTensor();
    at::Tensor target = inputs[i];
    if (!buffer.is_same(target)) copy_into(target, buffer);
  }
}

std::vector<at::Tensor> Replay::run(const std::vector<at::Tensor>& inputs, bool copy_outputs,
                                    int copy_first) {
  check_inputs(inputs);
  std::lock_guard<std::mutex> lock(mutex_);
  follow_state();
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  for (FoldedBatchNorm& fold : state_.folds) fold.refresh_if_stale();
  Executor& executor = ready_executor();
  {
    const InputBinding::Scope bound = bind_inputs(inputs);
    copy_in(inputs, bound);
    executor.run();
    copy_back(inputs, bound);
  }
  std::vector<at::Tensor> outputs;
  outputs.reserve(program_.outputs.size());
  for (size_t i = 0; i < program_.outputs.size(); ++i) {
    const at::Tensor& value = state_.values[program_.outputs[i]].toTensor();
    const bool reused = program_.output_reuses_storage[i] || executor.reuses_outputs();
    const bool copy = copy_outputs && (copy_first < 0 || static_cast<int>(i) < copy_first);
    outputs.push_back(copy && reused ? copy_of(value) : value);
  }
  // Outputs made fresh by their op belong to the caller now: the program keeping them
  // until the next replay overwrites them would hold two generations at once. An
  // executor that reuses its outputs (a CUDA graph) writes into the same tensors on every
  // replay and never makes them again: those stay.
  if (!executor.reuses_outputs()) {
    for (int slot : program_.outputs) {
      if (!program_.slots[slot].is_stable()) state_.values[slot] = c10::IValue();
    }
  }
  return outputs;
}

void Replay::register_scalars(const std::vector<ScalarPlace>& places) {
  std::vector<ScalarPlace> mapped;
  mapped.reserve(places.size());
  for (const ScalarPlace& place : places) {
    const int traced_ops = static_cast<int>(program_.op_of_traced.size());
    const int op = place.traced_op >= 0 && place.traced_op < traced_ops
                       ? program_.op_of_traced[place.traced_op]
                       : -1;
    if (op < 0) {
      throw BadInput("traced op " + std::to_string(place.traced_op) +
                     " is not an op of the replay (computed once at prepare, or "
                     "out of range)");
    }
    const auto& args = program_.ops[op].args;
    if (place.arg < 0 || place.arg >= static_cast<int>(args.size()) ||
        args[place.arg].kind != Arg::Kind::kConstant) {
      throw BadInput("op " + program_.ops[op].name + ": argument " + std::to_string(place.arg) +
                     " is not a constant");
    }
    const c10::IValue& value = args[place.arg].constant;
    const bool number =
        place.elem < 0 && (value.isDouble() || (value.isTensor() && value.toTensor().dim() == 0 &&
                                                value.toTensor().scalar_type() == at::kDouble));
    const bool element = place.elem >= 0 && value.isList() &&
                         place.elem < static_cast<int>(value.toListRef().size()) &&
                         value.toListRef()[place.elem].isDouble();
    if (!number && !element) {
      throw BadInput("op " + program_.ops[op].name + ": argument " + std::to_string(place.arg) +
                     " holds no double scalar there");
    }
    mapped.push_back({op, place.arg, place.elem});
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (OpState& op : state_.ops) op.args.clear();
  // Each replaced argument starts as a copy of the program's constant (lists and tensors
  // too: the program's own stay as captured).
  for (ScalarPlace& place : mapped) {
    auto& replaced = state_.ops[place.traced_op].args;
    const auto same_arg = [&](const auto& entry) { return entry.first == place.arg; };
    auto entry = std::find_if(replaced.begin(), replaced.end(), same_arg);
    if (entry == replaced.end()) {
      const c10::IValue& constant = program_.ops[place.traced_op].args[place.arg].constant;
      c10::IValue copy = constant.isList()     ? c10::IValue(constant.toList().copy())
                         : constant.isTensor() ? c10::IValue(constant.toTensor().clone())
                                               : constant;
      replaced.emplace_back(place.arg, std::move(copy));
      entry = replaced.end() - 1;
    }
    place.arg = static_cast<int>(entry - replaced.begin());
  }
  scalar_places_ = std::move(mapped);
}

void Replay::set_scalars(const std::vector<double>& values) {
  if (values.size() != scalar_places_.size()) {
    throw BadInput("expected " + std::to_string(scalar_places_.size()) + " scalar values, got " +
                   std::to_string(values.size()));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<double> previous;
  previous.reserve(values.size());
  for (const ScalarPlace& place : scalar_places_) {
    const c10::IValue& arg = state_.ops[place.traced_op].args[place.arg].second;
    const c10::IValue& old = place.elem >= 0 ? arg.toListRef()[place.elem] : arg;
    previous.push_back(old.isTensor() ? old.toTensor().item<double>() : old.toDouble());
  }
  write_scalars(values);
  // A graph keeps the numbers it was built with: new ones need it built again. When that
  // fails, the old graph stays with the numbers it has.
  if (previous == values || !executor_ || !executor_->bakes_scalars()) return;
  try {
    rebuild_executor();
  } catch (...) {
    write_scalars(previous);
    throw;
  }
}

void Replay::set_op_argument(int op, int arg, const std::optional<c10::IValue>& value) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (op < 0 || op >= static_cast<int>(program_.ops.size()) || arg < 0 ||
      arg >= static_cast<int>(program_.ops[op].args.size()))
    throw BadInput("set_op_argument: no argument " + std::to_string(arg) + " of op " +
                   std::to_string(op));
  if (ready_executor().bakes_scalars())
    throw BadInput("set_op_argument: this replay's executor bakes its arguments");
  std::vector<std::pair<int, c10::IValue>>& args = state_.ops[op].args;
  const auto found = std::find_if(args.begin(), args.end(),
                                  [arg](const auto& entry) { return entry.first == arg; });
  if (found == args.end()) {
    if (value) args.emplace_back(arg, *value);
  } else if (value) {
    found->second = *value;
  } else if (found + 1 == args.end()) {  // registered scalar places index the others
    args.pop_back();
  }
}

void Replay::write_scalars(const std::vector<double>& values) {
  for (size_t i = 0; i < values.size(); ++i) {
    const ScalarPlace& place = scalar_places_[i];
    c10::IValue& arg = state_.ops[place.traced_op].args[place.arg].second;
    if (place.elem >= 0) {
      arg.toList().set(place.elem, c10::IValue(values[i]));
    } else if (arg.isTensor()) {
      *arg.toTensor().data_ptr<double>() = values[i];
    } else {
      arg = c10::IValue(values[i]);
    }
  }
}

void Replay::set_executor_options(const ExecutorOptions& options) {
  std::lock_guard<std::mutex> lock(mutex_);
  const ExecutorOptions previous = options_;
  options_ = options;
  try {
    rebuild_executor();
  } catch (...) {
    // The replay keeps working as it did (e.g. a capture the device refused).
    options_ = previous;
    throw;
  }
}

void Replay::set_kernels(std::vector<std::shared_ptr<const KernelOverride>> kernels) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!kernels.empty() && kernels.size() != program_.ops.size()) {
    std::ostringstream msg;
    msg << "set_kernels: expected one kernel (or none) per op, " << program_.ops.size()
        << " ops, got " << kernels.size();
    throw BadInput(msg.str());
  }
  kernels.resize(program_.ops.size());
  std::vector<std::shared_ptr<const KernelOverride>> previous;
  for (size_t i = 0; i < program_.ops.size(); ++i) {
    previous.push_back(state_.ops[i].kernel);
    state_.ops[i].kernel = kernels[i];
  }
  try {
    rebuild_executor();
  } catch (...) {
    for (size_t i = 0; i < program_.ops.size(); ++i) state_.ops[i].kernel = previous[i];
    throw;
  }
}

Replay::Memory Replay::memory() {
  std::lock_guard<std::mutex> lock(mutex_);
  Memory m;
  const Executor& executor = ready_executor();
  m.pool = executor.pool_stats();
  // Buffers share storages (planned, or in the pool's block): count each once.
  std::unordered_set<const c10::StorageImpl*> seen;
  for (size_t s = 0; s < program_.slots.size(); ++s) {
    if (program_.slots[s].role != SlotRole::kBuffer) continue;
    const c10::Storage& storage = state_.values[s].toTensor().storage();
    if (!seen.insert(storage.unsafeGetStorageImpl()).second) continue;
    if (executor.pool_owns(storage.data())) continue;
    m.resident_bytes += static_cast<int64_t>(storage.nbytes());
  }
  if (m.pool) m.resident_bytes += m.pool->block_bytes;
  return m;
}

Replay::TimedRun Replay::run_timed(const std::vector<at::Tensor>& inputs) {
  check_inputs(inputs);
  std::lock_guard<std::mutex> lock(mutex_);
  follow_state();
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  const auto start = std::chrono::steady_clock::now();
  for (FoldedBatchNorm& fold : state_.folds) fold.refresh_if_stale();
  TimedRun run;
  Executor& executor = ready_executor();
  {
    const InputBinding::Scope bound = bind_inputs(inputs);
    copy_in(inputs, bound);
    run.ops = executor.run_timed();
    copy_back(inputs, bound);
  }
  run.total_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  std::sort(run.ops.begin(), run.ops.end(),
            [](const OpTiming& a, const OpTiming& b) { return a.start_ns < b.start_ns; });
  return run;
}

}  // namespace nimble
