#pragma once
// The calling thread's intra-op threads: how many its kernels use, and how nimble's
// channels-last kernels split their work over them (torch_ops/nhwc_convolution.h,
// torch_ops/nhwc_tensor_ops.h). OpenMP's team size (ATen, oneDNN) is per thread; MKL (torch's
// matrix products) keeps a count of its own, which torch.set_num_threads sets process-wide.
// CPU streams size each stream's teams, and a tuned kernel its own, so both are set here for
// the calling thread only.
#include <ATen/Parallel.h>
#include <omp.h>

#include <cstdint>

#include "csrc/threads/work_sharing.h"

// Weak: torch builds without MKL lack it. (The lower-case names are the Fortran interface,
// taking pointers.)
extern "C" int MKL_Set_Num_Threads_Local(int threads) __attribute__((weak));

namespace nimble {

// Returns MKL's previous thread-local setting (0: the global one).
inline int set_intra_op_threads(int threads) {
  omp_set_num_threads(threads);
  return MKL_Set_Num_Threads_Local != nullptr ? MKL_Set_Num_Threads_Local(threads) : 0;
}

// Restores the calling thread's settings when it goes out of scope.
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
  int saved() const { return saved_omp_; }

 private:
  int saved_omp_;
  int saved_mkl_ = 0;
  bool changed_ = false;
};

// body(begin, end) over [0, units): on the calling thread alone unless `worth_forking` (the
// caller's measure of whether waking and joining a second thread pays for the work) and the
// calling thread has intra-op threads to share it with. Inside a SharedWorkScope (a replay)
// through work_sharing.h over the scope's threads, where a helper thread slow to come never
// holds the caller up; elsewhere (a kernel called from eager code, the tuner) through an
// OpenMP region over at::get_num_threads(), whose end waits for every thread of its team.
// One thread is asked for by not forking, never by resizing OpenMP's team (rebuilt when
// resized).
template <typename F>
void split_work(int64_t units, bool worth_forking, const F& body) {
  const int shared = shared_work_threads();
  const int threads = shared > 0 ? shared : at::get_num_threads();
  if (!worth_forking || units < 2 || threads < 2 || at::in_parallel_region() || in_shared_work()) {
    body(0, units);
    return;
  }
  if (shared > 0) {
    share_work(units, threads, body);
  } else {
    at::parallel_for(0, units, 1, body);
  }
}

}  // namespace nimble
