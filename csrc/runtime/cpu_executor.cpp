#include "runtime/cpu_executor.h"

#include <ATen/Parallel.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>

#include "runtime/op_call.h"

namespace nimble {

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace
}  // namespace nimble

// MKL (torch's matrix products) keeps a thread count of its own, which torch.set_num_threads
// sets process-wide: a stream limits it for its thread as well, or two streams' GEMMs each
// take every core (and results depend on how many streams there are). Weak: torch builds
// without MKL lack it. (The lower-case names are the Fortran interface, taking pointers.)
extern "C" int MKL_Set_Num_Threads_Local(int threads) __attribute__((weak));

namespace nimble {
namespace {

// The intra-op thread count of the calling thread's kernels: OpenMP's team (ATen, oneDNN)
// and MKL's. Returns MKL's previous thread-local setting (0: the global one).
int set_intra_op_threads(int threads) {
  omp_set_num_threads(threads);
  return MKL_Set_Num_Threads_Local != nullptr ? MKL_Set_Num_Threads_Local(threads) : 0;
}

// Streams size the kernels' thread teams; this restores the caller's settings afterwards.
class KeepIntraOpThreads {
 public:
  KeepIntraOpThreads() : saved_omp_(omp_get_max_threads()) {}
  ~KeepIntraOpThreads() {
    omp_set_num_threads(saved_omp_);
    if (changed_ && MKL_Set_Num_Threads_Local != nullptr) MKL_Set_Num_Threads_Local(saved_mkl_);
  }
  KeepIntraOpThreads(const KeepIntraOpThreads&) = delete;
  KeepIntraOpThreads& operator=(const KeepIntraOpThreads&) = delete;
  void set(int threads) {
    const int previous = set_intra_op_threads(threads);
    if (!changed_) saved_mkl_ = previous;
    changed_ = true;
  }

 private:
  int saved_omp_;
  int saved_mkl_ = 0;
  bool changed_ = false;
};

std::vector<std::vector<int>> readers_of_slots(const Program& program) {
  std::vector<std::vector<int>> readers(program.slots.size());
  for (size_t i = 0; i < program.ops.size(); ++i) {
    for (const Arg& arg : program.ops[i].args) {
      if (arg.kind == Arg::Kind::kSlot) readers[arg.slot].push_back(static_cast<int>(i));
      for (int slot : arg.slots) {
        if (slot >= 0) readers[slot].push_back(static_cast<int>(i));
      }
    }
  }
  return readers;
}

}  // namespace

CpuExecutor::CpuExecutor(Program& program, scheduling::PhysicalSchedule schedule, ScheduleInfo info,
                         int cores, bool memory_pool)
    : schedule_(std::move(schedule)), info_(std::move(info)), cores_(std::max(1, cores)) {
  const int n = static_cast<int>(program.ops.size());
  if (schedule_.num_streams < 1 || static_cast<int>(schedule_.stream.size()) != n ||
      static_cast<int>(schedule_.ops.size()) != schedule_.num_streams) {
    throw std::invalid_argument("the stream schedule does not match the program (" +
                                std::to_string(schedule_.stream.size()) + " ops scheduled, " +
                                std::to_string(n) + " in the program)");
  }
  streams_.resize(schedule_.num_streams);
  std::vector<int> step_of(n, -1);
  for (int s = 0; s < schedule_.num_streams; ++s) {
    for (int op : schedule_.ops[s]) {
      step_of[op] = static_cast<int>(streams_[s].steps.size());
      streams_[s].steps.push_back(Step{op, {}, -1, {}});
    }
  }
  std::vector<int> event_of(n, -1);
  for (auto [from, to] : schedule_.syncs) {
    if (event_of[from] < 0) {
      event_of[from] = static_cast<int>(events_.size());
      events_.emplace_back();
      streams_[schedule_.stream[from]].steps[step_of[from]].signal = event_of[from];
    }
    streams_[schedule_.stream[to]].steps[step_of[to]].waits.push_back(event_of[from]);
  }

  // A transient value may be dropped after the op that every other reader of it is
  // known to precede; otherwise it is dropped once the whole replay is done.
  std::vector<std::vector<int>> successors(n);
  for (auto [from, to] : program.dependencies) successors[from].push_back(to);
  auto precedes = [&](int a, int b) {
    if (a == b) return true;
    if (schedule_.stream[a] == schedule_.stream[b]) return step_of[a] < step_of[b];
    std::vector<int> todo = {a};
    std::vector<char> seen(n, 0);
    while (!todo.empty()) {
      const int v = todo.back();
      todo.pop_back();
      for (int w : successors[v]) {
        if (w == b) return true;
        if (w < b && !seen[w]) {
          seen[w] = 1;
          todo.push_back(w);
        }
      }
    }
    return false;
  };
  const auto readers = readers_of_slots(program);
  for (int op = 0; op < n; ++op) {
    for (int slot : program.ops[op].release) {
      const bool last = std::all_of(readers[slot].begin(), readers[slot].end(),
                                    [&](int r) { return precedes(r, op); });
      if (last) {
        streams_[schedule_.stream[op]].steps[step_of[op]].release.push_back(slot);
      } else {
        end_release_.push_back(slot);
      }
    }
  }

  for (size_t slot = 0; slot < program.slots.size(); ++slot) {
    if (!program.slots[slot].is_stable()) transients_.push_back(static_cast<int>(slot));
  }
  // Several streams allocate concurrently, in an order that changes between replays:
  // the pool's plan needs one order.
  if (memory_pool && schedule_.num_streams == 1) arena_ = std::make_unique<ReplayArena>(program);
  stream_done_.resize(schedule_.num_streams);
  errors_.resize(schedule_.num_streams);
  for (int s = 1; s < schedule_.num_streams; ++s) workers_.emplace_back([this, s] { worker(s); });
}

CpuExecutor::~CpuExecutor() {
  stopping_ = true;
  start_.signal(++epoch_, queue_);
  for (std::thread& t : workers_) t.join();
}

void CpuExecutor::run_stream(int stream, Program& program, uint64_t epoch) {
  Stream& s = streams_[stream];
  for (const Step& step : s.steps) {
    for (int e : step.waits) events_[e].wait(epoch, queue_);
    if (!errors_[stream]) {
      try {
        const OpNode& op = program.ops[step.op];
        if (arena_) arena_->op_begins(step.op);
        push_args(op, program.values, s.stack);
        if (!timed_) {
          op.handle.redispatchBoxed(op.keys, &s.stack);
          keep_results(op, program.values, s.stack, step.release);
        } else {
          const int64_t start = now_ns();
          op.handle.redispatchBoxed(op.keys, &s.stack);
          const int64_t end = now_ns();
          keep_results(op, program.values, s.stack, {});
          // Dropping the values this op read last frees tensors: timed on its own, so
          // that reports can tell memory release from dispatch overhead.
          for (int slot : step.release) program.values[slot] = c10::IValue();
          const int64_t released = now_ns();
          s.timings->push_back(
              {step.op, stream, start - origin_ns_, end - origin_ns_, released - end});
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

void CpuExecutor::worker(int stream) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  // ATen sizes a thread's teams lazily, at its first parallel kernel, to the process-wide
  // count: have that happen now (get_num_threads runs torch's own lazy initialisation),
  // or it would undo the stream's share below.
  at::get_num_threads();
  set_intra_op_threads(threads_per_stream());
  // Every replay (and the shutdown) advances the epoch by one, and this worker takes
  // part in each, so the next epoch is always seen + 1.
  for (uint64_t seen = 0;;) {
    start_.wait(++seen, queue_);
    if (stopping_) return;
    run_stream(stream, *program_, seen);
    stream_done_[stream].signal(seen, queue_);
  }
}

void CpuExecutor::replay(Program& program, bool timed, std::vector<OpTiming>* timings) {
  std::vector<std::vector<OpTiming>> per_stream(streams_.size());
  timed_ = timed;
  origin_ns_ = now_ns();
  for (size_t s = 0; s < streams_.size(); ++s) {
    // Reserved up front: a reallocation inside the replay would be timed as overhead.
    if (timed) per_stream[s].reserve(streams_[s].steps.size());
    streams_[s].timings = &per_stream[s];
    errors_[s] = nullptr;
  }
  program_ = &program;
  const uint64_t epoch = ++epoch_;
  if (!workers_.empty()) start_.signal(epoch, queue_);
  {
    std::optional<ReplayArena::Scope> pool;
    if (arena_) pool.emplace(*arena_);
    KeepIntraOpThreads keep;
    if (!workers_.empty()) keep.set(threads_per_stream());
    run_stream(0, program, epoch);
  }
  for (size_t s = 1; s < streams_.size(); ++s) stream_done_[s].wait(epoch, queue_);
  for (int slot : end_release_) program.values[slot] = c10::IValue();
  for (const std::exception_ptr& error : errors_) {
    if (!error) continue;
    // Values of the failed replay would otherwise live on into the next one.
    for (int slot : transients_) program.values[slot] = c10::IValue();
    for (Stream& s : streams_) s.stack.clear();
    if (arena_ && arena_->recording()) arena_->discard_recording();
    std::rethrow_exception(error);
  }
  if (arena_ && arena_->recording()) arena_->plan();
  if (timings) {
    timings->reserve(program.ops.size());
    for (auto& list : per_stream) timings->insert(timings->end(), list.begin(), list.end());
  }
}

void CpuExecutor::run(Program& program) { replay(program, false, nullptr); }

std::vector<OpTiming> CpuExecutor::run_timed(Program& program) {
  std::vector<OpTiming> timings;
  replay(program, true, &timings);
  return timings;
}

}  // namespace nimble
