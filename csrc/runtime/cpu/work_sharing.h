#pragma once
// Work split between the calling thread and helper threads that claim pieces of it as they
// come, for nimble's channels-last kernels (runtime/cpu/intra_op_threads.h). An OpenMP region
// waits at its end for every thread of its team: when the second thread's core is busy with
// another program's threads, or idle and halted (a VM's idle vCPU takes milliseconds to wake),
// each forked op waited that long (googlenet at 64x64: 13 ms a call after a 0.2 s pause
// against 1.8 ms back to back; 6.9 ms alternating with ONNX Runtime and OpenVINO). Here the
// caller claims pieces too and waits only for pieces a helper has begun: a helper that is
// late finds the work done. Torch-free.
#include <cstdint>
#include <functional>

namespace nimble {

// body(begin, end) over pieces covering [0, units) once each, on the calling thread and up to
// `threads - 1` helpers. Runs it all on the calling thread when called from a helper or while
// another caller's work holds the helpers (a multi-stream replay's streams share the cores
// already). An exception from `body` is rethrown here once the pieces begun have finished;
// pieces not yet claimed by then do not run.
void share_work(int64_t units, int threads, const std::function<void(int64_t, int64_t)>& body);

// Whether the calling thread is one of the helpers.
bool in_shared_work();

// While one lives, the calling thread's kernels split their work through share_work; by
// default (and on every other thread) through an OpenMP region. The helpers and OpenMP's
// threads both wait for work by spinning: a replay turns this on only where its program runs
// no ATen op of its own between nimble's kernels, so that the two pools never take turns on
// the cores (runtime/cpu/cpu_executor.cpp).
class SharedWorkScope {
 public:
  SharedWorkScope();
  ~SharedWorkScope();
  SharedWorkScope(const SharedWorkScope&) = delete;
  SharedWorkScope& operator=(const SharedWorkScope&) = delete;

 private:
  bool previous_;
};

// Whether a SharedWorkScope lives on the calling thread.
bool shared_work_in_scope();

}  // namespace nimble
