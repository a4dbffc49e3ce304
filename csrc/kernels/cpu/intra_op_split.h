#pragma once
// Work of `units` independent pieces run over the calling thread's intra-op threads, as
// nimble's channels-last kernels split it (nhwc_convolution.h, nhwc_tensor_ops.h).
#include <ATen/Parallel.h>

#include <cstdint>

#include "csrc/kernels/cpu/nhwc/work_sharing.h"

namespace nimble::kernels {

// body(begin, end) over [0, units): on the calling thread alone unless `worth_forking` (the
// caller's measure of whether waking and joining a second thread pays for the work) and the
// calling thread has intra-op threads to share it with. Inside a SharedWorkScope (a replay)
// through nhwc/work_sharing.h over the scope's threads, where a helper thread slow to come
// never holds the caller up; elsewhere (a kernel called from eager code, the tuner) through
// an OpenMP region over at::get_num_threads(), whose end waits for every thread of its team.
// One thread is asked for by not forking, never by resizing OpenMP's team (rebuilt when
// resized).
template <typename F>
void split_work(int64_t units, bool worth_forking, const F& body) {
  const int shared = nhwc::shared_work_threads();
  const int threads = shared > 0 ? shared : at::get_num_threads();
  if (!worth_forking || units < 2 || threads < 2 || at::in_parallel_region() ||
      nhwc::in_shared_work()) {
    body(0, units);
    return;
  }
  if (shared > 0) {
    nhwc::share_work(units, threads, body);
  } else {
    at::parallel_for(0, units, 1, body);
  }
}

}  // namespace nimble::kernels
