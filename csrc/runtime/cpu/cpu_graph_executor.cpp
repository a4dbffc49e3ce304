#include "csrc/runtime/cpu/cpu_graph_executor.h"

#include <ATen/core/LegacyTypeDispatch.h>

#include <sstream>
#include <stdexcept>

#include "csrc/runtime/op_call.h"
#include "csrc/runtime/state_snapshot.h"
#include "csrc/threads/steady_ns.h"

namespace nimble {

namespace {

const void* address_of(const at::Tensor& t) {
  return t.has_storage() ? t.storage().data() : nullptr;
}

void add_addresses(const c10::IValue& value,
                   std::vector<std::pair<at::Tensor, const void*>>& addresses) {
  const auto add = [&](const at::Tensor& t) {
    if (t.defined()) addresses.emplace_back(t, address_of(t));
  };
  if (value.isTensor()) {
    add(value.toTensor());
  } else if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorList().vec()) add(t);
  } else if (value.isList()) {
    for (const c10::IValue& item : value.toListRef()) {
      if (item.isTensor()) add(item.toTensor());
    }
  }
}

std::string describe_layout(const at::Tensor& t) {
  std::ostringstream out;
  if (!t.defined()) return "no tensor";
  out << c10::getDtypeNames(t.scalar_type()).first << " " << t.sizes();
  return out.str();
}

}  // namespace

CpuGraphExecutor::CpuGraphExecutor(const Program& program, ProgramState& state, StreamPlan plan)
    : program_(program), state_(state), plan_(std::move(plan)) {
  check_plan_covers(plan_, program);
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  StateSnapshot before(program_, state_);
  try {
    run_once(nullptr);  // the warm-up a graph backend runs before its capture
    before.restore();
    run_once(&calls_);
    before.restore();
  } catch (...) {
    before.restore();
    for (int slot : plan_.transients) state_.values[slot] = c10::IValue();
    stack_.clear();
    throw;
  }
}

void CpuGraphExecutor::run_once(std::vector<RecordedCall>* recording) {
  if (recording) recording->resize(program_.ops.size());
  for (const int i : plan_.issue.order) {
    const OpNode& op = program_.ops[i];
    const OpState& op_state = state_.ops[i];
    push_args(op, op_state, state_.values, stack_);
    if (recording) {
      RecordedCall& call = (*recording)[i];
      call.arguments = stack_;
      for (const c10::IValue& value : stack_) add_addresses(value, call.addresses);
    }
    invoke(op, op_state, stack_);
    keep_results(op, state_.values, stack_, plan_.release[i]);
    stack_.clear();
    if (recording) {
      for (const OpNode::Output& out : op.outputs)
        (*recording)[i].results.push_back(state_.values[out.slot].toTensor());
    }
  }
  for (int slot : plan_.end_release) state_.values[slot] = c10::IValue();
}

void CpuGraphExecutor::check_addresses(size_t i) const {
  for (const auto& [tensor, address] : calls_[i].addresses) {
    if (address_of(tensor) == address) continue;
    throw std::runtime_error(
        "op " + std::to_string(i) + " (" + program_.ops[i].name +
        ") reads a tensor whose memory moved since the graph was recorded: a CUDA graph "
        "would still read the old address. Tensors a replay uses in place must keep their "
        "storage (copy into them instead of replacing them), or the replay must be prepared "
        "again");
  }
}

void CpuGraphExecutor::write_results(size_t i) {
  const OpNode& op = program_.ops[i];
  const RecordedCall& call = calls_[i];
  for (size_t k = 0; k < op.outputs.size(); ++k) {
    const OpNode::Output& out = op.outputs[k];
    const c10::IValue& value = stack_[out.ret];
    const at::Tensor fresh = out.elem < 0 ? (value.isTensor() ? value.toTensor() : at::Tensor())
                                          : value.toTensorList().get(out.elem);
    const at::Tensor& recorded = call.results[k];
    // A graph's kernel writes where it wrote at capture: in place, or the same view.
    if (fresh.is_same(recorded) ||
        (fresh.defined() && address_of(fresh) == address_of(recorded) &&
         fresh.storage_offset() == recorded.storage_offset() && fresh.sizes() == recorded.sizes() &&
         fresh.strides() == recorded.strides())) {
      continue;
    }
    if (!fresh.defined() || fresh.sizes() != recorded.sizes() ||
        fresh.scalar_type() != recorded.scalar_type()) {
      throw std::runtime_error("op " + std::to_string(i) + " (" + op.name + ") returned " +
                               describe_layout(fresh) + " where the recording has " +
                               describe_layout(recorded) +
                               ": a CUDA graph cannot change what an op produces");
    }
    recorded.copy_(fresh);
  }
}

void CpuGraphExecutor::replay_op(size_t i) {
  check_addresses(i);
  stack_ = calls_[i].arguments;
  invoke(program_.ops[i], state_.ops[i], stack_);
  write_results(i);
  stack_.clear();
}

void CpuGraphExecutor::run() {
  for (const int i : plan_.issue.order) replay_op(i);
}

std::vector<OpTiming> CpuGraphExecutor::run_timed() {
  std::vector<OpTiming> timings;
  timings.reserve(program_.ops.size());
  const int64_t origin = steady_ns();
  for (const int i : plan_.issue.order) {
    const int64_t start = steady_ns();
    replay_op(i);
    timings.push_back({i, plan_.issue.stream[i], start - origin, steady_ns() - origin, 0});
  }
  return timings;
}

}  // namespace nimble
