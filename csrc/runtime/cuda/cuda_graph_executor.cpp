#include "csrc/runtime/cuda/cuda_graph_executor.h"

#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>

#include "csrc/runtime/host_device_copies.h"
#include "csrc/runtime/op_call.h"
#include "csrc/runtime/state_snapshot.h"

namespace nimble {

namespace {

c10::Device cuda_device_of(const Program& program) {
  const c10::Device device = program_device(program);
  if (!device.is_cuda())
    throw std::invalid_argument("the CUDA graph backend needs a program with CUDA tensors");
  return device;
}

void for_each_tensor_of(const c10::IValue& value, const std::function<void(const at::Tensor&)>& f) {
  if (value.isTensor()) {
    if (value.toTensor().defined()) f(value.toTensor());
  } else if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorList().vec()) f(t);
  }
}

}  // namespace

CudaGraphExecutor::CudaGraphExecutor(const Program& program, ProgramState& state, StreamPlan plan,
                                     c10::MempoolId_t pool, std::vector<int> stress_delays_us)
    : program_(program), state_(state), device_(cuda_device_of(program)), plan_(std::move(plan)) {
  check_plan_covers(plan_, program);
  refuse_host_device_copies(program);
  const c10::cuda::CUDAGuard device_guard(device_);
  if (!stress_delays_us.empty()) {
    int khz = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device_.index()));
    for (int us : stress_delays_us) stress_delay_cycles_.push_back(int64_t{us} * khz / 1000);
  }
  streams_ = cuda::pool_streams(plan_.num_streams(), device_.index());
  for (int e = 0; e < plan_.issue.num_events; ++e) events_.emplace_back();
  for (int s = 0; s < plan_.num_streams(); ++s) joins_.emplace_back();
  if (plan_.num_streams() > 1) {
    const auto readers = readers_of_slots(program);
    transient_reads_.resize(program.ops.size());
    for (int slot : plan_.transients) {
      for (int op : readers[slot]) transient_reads_[op].push_back(slot);
    }
  }

  find_host_ops();

  // Warm-up on the caller's stream's timeline, on the streams the capture will use. What
  // it writes (an optimizer step, running statistics, mutated inputs, the generators'
  // offsets) is put back before the capture, which runs nothing.
  const cudaStream_t caller = c10::cuda::getCurrentCUDAStream(device_.index()).stream();
  StateSnapshot before(program_, state_);
  try {
    issue(caller, nullptr);
  } catch (...) {
    drop_transients();
    before.restore();
    throw;
  }
  C10_CUDA_CHECK(cudaStreamSynchronize(caller));
  before.restore();
  C10_CUDA_CHECK(cudaStreamSynchronize(caller));

  // The capture runs on stream 0 of the plan; nothing else is pending (synchronized).
  // Random ops draw from generators registered with the graph (the device's default one
  // always is): each replay advances their offsets, as torch.cuda.graph does.
  graph_ = std::make_unique<at::cuda::CUDAGraph>();
  for (const at::Generator& generator : explicit_generators(program_)) {
    if (generator.device().is_cuda()) graph_->register_generator_state(generator);
  }
  {
    const c10::cuda::CUDAStreamGuard on_capture(streams_[0]);
    // Thread-local: the capture runs with the GIL released, and another thread's CUDA call
    // (a data loader's pinned copy, a cudaMalloc) must neither break it nor be refused.
    graph_->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
    try {
      issue(streams_[0].stream(), nullptr);
    } catch (...) {
      // End the capture so that the device is usable after the error; the half-captured
      // graph is dropped.
      try {
        graph_->capture_end();
      } catch (...) {
      }
      graph_.reset();
      drop_transients();
      before.restore();
      throw;
    }
    graph_->capture_end();
  }
  C10_CUDA_CHECK(cudaStreamSynchronize(streams_[0].stream()));
  // The capture ran the host ops once (their CPU tensors are written for real).
  before.restore();
  C10_CUDA_CHECK(cudaStreamSynchronize(caller));
}

CudaGraphExecutor::~CudaGraphExecutor() {
  // The graph's launches may still run on the caller's stream: its pool and our events go
  // only after they finished.
  C10_CUDA_IGNORE_ERROR(cudaDeviceSynchronize());
}

void CudaGraphExecutor::find_host_ops() {
  // Values that may differ from one replay to the next: inputs, state, whatever an op
  // writes in place, and what host ops compute from those.
  std::vector<bool> varying(program_.slots.size(), false);
  std::vector<bool> host_computed(program_.slots.size(), false);
  for (size_t s = 0; s < program_.slots.size(); ++s) {
    const SlotInfo& slot = program_.slots[s];
    varying[s] = slot.role == SlotRole::kInput || slot.role == SlotRole::kState || slot.mutated;
  }
  for (size_t i = 0; i < program_.ops.size(); ++i) {
    const OpNode& op = program_.ops[i];
    bool host = !op.reads.empty() || !op.writes.empty();
    for (const auto* slots : {&op.reads, &op.writes}) {
      for (int slot : *slots) host = host && program_.slots[slot].device.is_cpu();
    }
    if (host) {
      host_ops_.push_back(static_cast<int>(i));
      bool reads_varying = false;
      for (int slot : op.reads) reads_varying = reads_varying || varying[slot];
      for (int slot : op.writes) {
        varying[slot] = varying[slot] || reads_varying;
        host_computed[slot] = host_computed[slot] || reads_varying;
      }
      continue;
    }
    for (int slot : op.reads) {
      if (!host_computed[slot]) continue;
      throw std::invalid_argument(
          "op " + std::to_string(i) + " (" + op.name +
          ") runs on CUDA but reads a CPU tensor that an earlier op of the program computes "
          "from values that change between calls: a CUDA graph would keep its value of "
          "capture time. Keep that tensor on the device (e.g. an optimizer with "
          "capturable=True)");
    }
  }
}

void CudaGraphExecutor::run_host_ops() {
  for (int i : host_ops_) {
    const OpNode& op = program_.ops[i];
    push_args(op, state_.ops[i], state_.values, stack_);
    invoke(op, state_.ops[i], stack_);
    keep_results(op, state_.values, stack_, plan_.release[i]);
    stack_.clear();
  }
}

void CudaGraphExecutor::issue(cudaStream_t origin, std::vector<OpEvents>* timing) {
  const int num_streams = plan_.num_streams();
  fork_.record(origin);
  for (int s = 0; s < num_streams; ++s) {
    if (streams_[s].stream() != origin) fork_.block(streams_[s].stream());
  }
  // One host thread issues the ops in the plan's issue order (critical path first where
  // branches are independent): each stream gets its ops in its plan order, and every event
  // is recorded before a stream waits for it (syncs point back in that order).
  for (const int i : plan_.issue.order) {
    const int s = plan_.issue.stream[i];
    const scheduling::IssueStep& step = plan_.issue.streams[s][plan_.issue.position[i]];
    const c10::cuda::CUDAStream& stream = streams_[s];
    const c10::cuda::CUDAStreamGuard on_stream(stream);
    for (int e : step.waits) events_[e].block(stream.stream());
    if (!stress_delay_cycles_.empty() && stress_delay_cycles_[i] > 0)
      at::cuda::sleep(stress_delay_cycles_[i]);
    if (timing) (*timing)[i].start.record(stream.stream());
    const OpNode& op = program_.ops[i];
    const OpState& op_state = state_.ops[i];
    if (!transient_reads_.empty()) {
      // The caching allocator hands a freed block to the next request of the stream that
      // allocated it; a read on another stream must hold the block until it has run
      // (inside a capture: until the capture ends). Reads on the allocating stream are
      // ignored by the allocator, and are ordered by that stream anyway.
      for (int slot : transient_reads_[i]) {
        for_each_tensor_of(state_.values[slot], [&](const at::Tensor& t) {
          c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream);
        });
      }
    }
    push_args(op, op_state, state_.values, stack_);
    invoke(op, op_state, stack_);
    keep_results(op, state_.values, stack_, plan_.release[i]);
    stack_.clear();  // returned values the program does not keep go now, on this stream
    if (timing) (*timing)[i].end.record(stream.stream());
    if (step.signal >= 0) events_[step.signal].record(stream.stream());
  }
  for (int s = 0; s < num_streams; ++s) {
    if (streams_[s].stream() == origin) continue;
    joins_[s].record(streams_[s].stream());
    joins_[s].block(origin);
  }
  for (int slot : plan_.end_release) state_.values[slot] = c10::IValue();
}

void CudaGraphExecutor::drop_transients() {
  for (int slot : plan_.transients) state_.values[slot] = c10::IValue();
  stack_.clear();
}

void CudaGraphExecutor::run() {
  const c10::cuda::CUDAGuard device_guard(device_);
  run_host_ops();
  graph_->replay();
}

std::vector<OpTiming> CudaGraphExecutor::run_timed() {
  const c10::cuda::CUDAGuard device_guard(device_);
  // The graph's outputs stay the state's values: the ops issued here make new ones.
  std::vector<c10::IValue> graph_outputs;
  for (int slot : program_.outputs) graph_outputs.push_back(state_.values[slot]);
  const cudaStream_t caller = c10::cuda::getCurrentCUDAStream(device_.index()).stream();
  std::vector<OpEvents> timing(program_.ops.size());
  const cuda::OwnedEvent origin(true);
  origin.record(caller);
  try {
    issue(caller, &timing);
  } catch (...) {
    drop_transients();
    for (size_t i = 0; i < graph_outputs.size(); ++i)
      state_.values[program_.outputs[i]] = graph_outputs[i];
    throw;
  }
  C10_CUDA_CHECK(cudaStreamSynchronize(caller));
  for (size_t i = 0; i < graph_outputs.size(); ++i)
    state_.values[program_.outputs[i]] = graph_outputs[i];
  std::vector<OpTiming> timings;
  timings.reserve(program_.ops.size());
  auto ns = [&](const cuda::OwnedEvent& e) { return static_cast<int64_t>(e.since(origin) * 1e6); };
  for (size_t i = 0; i < program_.ops.size(); ++i) {
    timings.push_back(
        {static_cast<int>(i), plan_.issue.stream[i], ns(timing[i].start), ns(timing[i].end), 0});
  }
  return timings;
}

}  // namespace nimble
