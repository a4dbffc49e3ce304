#pragma once
// Work split between the calling thread and helper threads that claim pieces of it as they
// come, for nimble's channels-last kernels (threads/intra_op_threads.h). An OpenMP region
// waits at its end for every thread of its team: when the second thread's core is busy with
// another program's threads, or idle and halted (a VM's idle vCPU takes milliseconds to wake),
// each forked op waited that long (googlenet at 64x64: 13 ms a call after a 0.2 s pause
// against 1.8 ms back to back; 6.9 ms alternating with ONNX Runtime and OpenVINO). Here the
// units are claimed from one range: the caller from its front until none is left, a helper
// from its back, in smaller pieces, when it wakes; the caller waits only for the piece a
// helper is running, so a helper that is late finds the work done and one preempted in its
// piece leaves the rest to the caller. Torch-free.
#include <cstdint>
#include <functional>
#include <vector>

namespace nimble {

// body(begin, end) over pieces covering [0, units) once each, on the calling thread and up to
// `threads - 1` helpers. Runs it all on the calling thread when called from a helper or while
// another caller's work holds the helpers (a multi-stream replay's streams share the cores
// already). An exception from `body` is rethrown here once the pieces begun have finished;
// pieces not yet claimed by then do not run.
void share_work(int64_t units, int threads, const std::function<void(int64_t, int64_t)>& body);

// Whether the calling thread is one of the helpers.
bool in_shared_work();

// In a helper's piece: whether units before it were left unclaimed when the helper claimed it,
// so that the helper's next claim is likely the units just before (unless the caller takes
// them first). False in its last piece, and on any other thread.
bool shared_work_left_before();

// While one lives, the calling thread's kernels split their work through share_work over
// `threads` threads (the caller among them); elsewhere through an OpenMP region. A replay opens
// one on each of its stream threads and runs ATen's ops there on one OpenMP thread, so that no
// op of the replay waits at an OpenMP barrier for a thread that is not there
// (runtime/cpu/cpu_executor.cpp; docs/cpu.md).
class SharedWorkScope {
 public:
  explicit SharedWorkScope(int threads);
  ~SharedWorkScope();
  SharedWorkScope(const SharedWorkScope&) = delete;
  SharedWorkScope& operator=(const SharedWorkScope&) = delete;

 private:
  int previous_;
};

// While one lives (a replay that shares its kernels' work, from its start to its end), idle
// helpers keep their cores between the replay's jobs rather than yield them: another
// runtime's spinning thread that took one would hold it for a scheduler slice.
class ReplayInFlight {
 public:
  ReplayInFlight();
  ~ReplayInFlight();
  ReplayInFlight(const ReplayInFlight&) = delete;
  ReplayInFlight& operator=(const ReplayInFlight&) = delete;
};

// The threads of the SharedWorkScope living on the calling thread; 0 outside one.
int shared_work_threads();

// Tests: while stalled, the helpers take no piece (as when their cores are held by another
// program or halted), so that the callers run every piece themselves. Returns the previous
// setting.
bool stall_helpers_for_test(bool stalled);

// Tests: how many pieces the helper threads have run since the process started.
int64_t helper_pieces_for_test();

// Diagnostics: one shared job's timeline, steady-clock nanoseconds (-1: no helper did it).
struct HelperTrace {
  int64_t units, published_ns, caller_done_ns, end_ns;
  int caller_cpu;
  int64_t helper_seen_ns, helper_claim_ns, helper_end_ns;
  int helper_cpu;
  int64_t helper_units;
};
// Turns tracing of every shared job on or off and returns the jobs traced since last asked.
std::vector<HelperTrace> trace_helpers_for_test(bool on);

}  // namespace nimble
