#include "csrc/runtime/cpu/cpu_executor.h"

#include <ATen/Parallel.h>
#include <ATen/core/LegacyTypeDispatch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

#include "csrc/runtime/cpu/direct_calls.h"
#include "csrc/runtime/op_call.h"
#include "csrc/threads/intra_op_threads.h"
#include "csrc/threads/steady_ns.h"
#include "csrc/threads/work_sharing.h"

namespace nimble {

namespace {

// Whether the program runs any of nimble's kernels (its ops named nimble::).
bool runs_nimble_kernels(const Program& program) {
  return std::any_of(program.ops.begin(), program.ops.end(),
                     [](const OpNode& op) { return op.name.rfind("nimble::", 0) == 0; });
}

// NIMBLE_KERNEL_HELPERS=0 keeps OpenMP for every replay (to compare, or where the helpers
// misbehave); anything else, or unset, lets a replay use them where its program has kernels
// of nimble's.
bool helpers_allowed() {
  const char* setting = std::getenv("NIMBLE_KERNEL_HELPERS");
  return setting == nullptr || std::string(setting) != "0";
}

}  // namespace

CpuExecutor::CpuExecutor(const Program& program, ProgramState& state, StreamPlan plan, int cores,
                         bool memory_pool, std::vector<int> stress_delays_us)
    : program_(program),
      state_(state),
      plan_(std::move(plan)),
      stress_delays_us_(std::move(stress_delays_us)),
      cores_(std::max(1, cores)) {
  check_plan_covers(plan_, program);
  const int streams = plan_.num_streams();
  shared_work_ = helpers_allowed() && runs_nimble_kernels(program);
  streams_.resize(streams);
  events_.resize(plan_.issue.num_events);
  // Several streams allocate concurrently, in an order that changes between replays:
  // the pool's plan needs one order.
  if (memory_pool && streams == 1) arena_ = std::make_unique<ReplayArena>(program, state);
  stream_done_.resize(streams);
  errors_.resize(streams);
  direct_.reserve(program.ops.size());
  for (const OpNode& op : program.ops) direct_.push_back(direct_call_for(op));
  for (int s = 1; s < streams; ++s) workers_.emplace_back([this, s] { worker(s); });
}

std::optional<PoolStats> CpuExecutor::pool_stats() const {
  if (!arena_) return std::nullopt;
  return arena_->stats();
}

CpuExecutor::~CpuExecutor() {
  stopping_ = true;
  start_.signal(++epoch_, queue_);
  for (std::thread& t : workers_) t.join();
}

void CpuExecutor::run_stream(int stream, uint64_t epoch) {
  Stream& s = streams_[stream];
  for (const scheduling::IssueStep& step : plan_.issue.streams[stream]) {
    const std::vector<int>& release = plan_.release[step.op];
    for (int e : step.waits) events_[e].wait(epoch, queue_);
    if (!stress_delays_us_.empty() && stress_delays_us_[step.op] > 0)
      std::this_thread::sleep_for(std::chrono::microseconds(stress_delays_us_[step.op]));
    if (!errors_[stream]) {
      try {
        const OpNode& op = program_.ops[step.op];
        const OpState& op_state = state_.ops[step.op];
        if (arena_) arena_->op_begins(step.op);
        const DirectCall* direct = direct_call_allowed(op_state) ? direct_[step.op].get() : nullptr;
        if (direct != nullptr) {
          call_direct(*direct, step.op, stream, release);
        } else {
          call_boxed(op, op_state, step.op, stream, release);
        }
        // Returned values the program does not keep go now, inside the op (for the pool's
        // lifetimes), not at the next op.
        s.stack.clear();
        if (arena_) arena_->op_ends();
      } catch (...) {
        if (arena_) arena_->op_ends();
        errors_[stream] = std::current_exception();
      }
    }
    // Signal even after a failure, so that no other stream waits forever.
    if (step.signal >= 0) events_[step.signal].signal(epoch, queue_);
  }
}

void CpuExecutor::call_direct(const DirectCall& direct, int op, int stream,
                              const std::vector<int>& release) {
  const int64_t start = timed_ ? steady_ns() : 0;
  at::Tensor result = direct.call(state_.values);
  const int64_t end = timed_ ? steady_ns() : 0;
  state_.values[direct.out_slot()] = std::move(result);
  for (int slot : release) state_.values[slot] = c10::IValue();
  if (timed_)
    streams_[stream].timings->push_back(
        {op, stream, start - origin_ns_, end - origin_ns_, steady_ns() - end});
}

void CpuExecutor::call_boxed(const OpNode& op, const OpState& op_state, int index, int stream,
                             const std::vector<int>& release) {
  Stream& s = streams_[stream];
  push_args(op, op_state, state_.values, s.stack);
  if (!timed_) {
    invoke(op, op_state, s.stack);
    keep_results(op, state_.values, s.stack, release);
    return;
  }
  const int64_t start = steady_ns();
  invoke(op, op_state, s.stack);
  const int64_t end = steady_ns();
  keep_results(op, state_.values, s.stack, {});
  // Dropping the values this op read last frees tensors: timed on its own, so that reports
  // can tell memory release from dispatch overhead.
  for (int slot : release) state_.values[slot] = c10::IValue();
  const int64_t released = steady_ns();
  s.timings->push_back({index, stream, start - origin_ns_, end - origin_ns_, released - end});
}

void CpuExecutor::worker(int stream) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  // ATen sizes a thread's teams lazily, at its first parallel kernel, to the process-wide
  // count: have that happen now (get_num_threads runs torch's own lazy initialisation),
  // or it would undo the stream's share below.
  at::get_num_threads();
  set_intra_op_threads(shared_work_ ? 1 : threads_per_stream());
  std::optional<SharedWorkScope> shared;
  if (shared_work_) shared.emplace(threads_per_stream());
  // Every replay (and the shutdown) advances the epoch by one, and this worker takes
  // part in each, so the next epoch is always seen + 1.
  for (uint64_t seen = 0;;) {
    start_.wait(++seen, queue_);
    if (stopping_) return;
    run_stream(stream, seen);
    stream_done_[stream].signal(seen, queue_);
  }
}

void CpuExecutor::replay(bool timed, std::vector<OpTiming>* timings) {
  std::vector<std::vector<OpTiming>> per_stream(streams_.size());
  timed_ = timed;
  origin_ns_ = steady_ns();
  for (size_t s = 0; s < streams_.size(); ++s) {
    // Reserved up front: a reallocation inside the replay would be timed as overhead.
    if (timed) per_stream[s].reserve(plan_.issue.streams[s].size());
    streams_[s].timings = &per_stream[s];
    errors_[s] = nullptr;
  }
  const uint64_t epoch = ++epoch_;
  if (!workers_.empty()) start_.signal(epoch, queue_);
  {
    std::optional<ReplayArena::Scope> pool;
    if (arena_) pool.emplace(*arena_);
    // Runs torch's lazy initialisation of the thread count first (see worker).
    const int threads = workers_.empty() ? at::get_num_threads() : threads_per_stream();
    KeepIntraOpThreads keep;
    std::optional<SharedWorkScope> shared;
    std::optional<ReplayInFlight> in_flight;
    if (shared_work_) {
      // ATen's ops on the calling thread alone: see shared_work_ in the header.
      keep.set(1);
      shared.emplace(threads);
      if (threads > 1) in_flight.emplace();
    } else if (!workers_.empty()) {
      keep.set(threads);
    }
    run_stream(0, epoch);
  }
  for (size_t s = 1; s < streams_.size(); ++s) stream_done_[s].wait(epoch, queue_);
  for (int slot : plan_.end_release) state_.values[slot] = c10::IValue();
  for (const std::exception_ptr& error : errors_) {
    if (!error) continue;
    // Values of the failed replay would otherwise live on into the next one.
    for (int slot : plan_.transients) state_.values[slot] = c10::IValue();
    for (Stream& s : streams_) s.stack.clear();
    if (arena_ && arena_->recording()) arena_->discard_recording();
    std::rethrow_exception(error);
  }
  if (arena_ && arena_->recording()) arena_->plan();
  if (timings) {
    timings->reserve(program_.ops.size());
    for (auto& list : per_stream) timings->insert(timings->end(), list.begin(), list.end());
  }
}

void CpuExecutor::run() { replay(false, nullptr); }

std::vector<OpTiming> CpuExecutor::run_timed() {
  std::vector<OpTiming> timings;
  replay(true, &timings);
  return timings;
}

}  // namespace nimble
