#pragma once
// Work of `units` independent pieces run over the calling thread's intra-op threads, as
// nimble's channels-last kernels split it (nhwc_convolution.h, nhwc_tensor_ops.h).
#include <ATen/Parallel.h>

#include <cstdint>

namespace nimble::kernels {

// body(begin, end) over [0, units): on the calling thread alone unless `worth_forking` (the
// caller's measure of whether waking and joining a second thread pays for the work) and there
// are threads to fork. One thread is asked for by not forking, never by changing OpenMP's
// thread count: a team resized between two calls is rebuilt, which costs more than most of
// these kernels.
template <typename F>
void split_work(int64_t units, bool worth_forking, const F& body) {
  if (!worth_forking || units < 2 || at::get_num_threads() < 2 || at::in_parallel_region()) {
    body(0, units);
    return;
  }
  at::parallel_for(0, units, 1, body);
}

}  // namespace nimble::kernels
