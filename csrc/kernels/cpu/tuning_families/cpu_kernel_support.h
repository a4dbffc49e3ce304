#pragma once
// What every CPU kernel family needs: a thread-count knob, running under that many intra-op
// threads, handing back the layout ATen gives, and weights transformed once and kept until
// the weight changes.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "csrc/kernels/tunable_op.h"
#include "csrc/program/source_version.h"
#include "csrc/threads/intra_op_threads.h"
#include "tuning/space/knob.h"

namespace nimble::kernels {

// Intra-op threads: powers of two up to torch's thread count when the task is made.
inline tuning::Knob threads_knob() {
  int most = 1;
  while (most * 2 <= at::get_num_threads()) most *= 2;
  return tuning::Knob::power_of_two_range("threads", 1, most);
}

// Runs the calling thread's kernels with `threads` intra-op threads, never more than it
// has now (a CPU stream of a multi-stream replay owns a share of the cores).
class ThreadsScope {
 public:
  explicit ThreadsScope(int64_t threads) {
    const int now = keep_.saved();
    if (threads < now) keep_.set(static_cast<int>(std::max<int64_t>(1, threads)));
  }

 private:
  KeepIntraOpThreads keep_;
};

// `result` as the op's output layout (a copy only when the strides differ).
inline at::Tensor in_output_layout(const TunableOp& op, at::Tensor result) {
  if (result.strides() == c10::IntArrayRef(op.out_strides)) return result;
  return op.empty_output().copy_(result);
}

// A tensor derived from an operand (a packed or re-laid-out weight), recomputed when the
// operand is another tensor, has moved, or was written since (program/source_version.h:
// its version counter and its storage). The operand may be a fresh view on every call (a
// linear layer's weight seen as [k, c, 1, 1]): its identity is its storage, and the view
// must share its base's version counter (`view_sharing_version` in tunable_op.h).
class DerivedTensor {
 public:
  const at::Tensor& get(const at::Tensor& source,
                        const std::function<at::Tensor(const at::Tensor&)>& derive) const {
    // The data pointer too: one kernel may serve views at other offsets of one storage.
    if (!derived_.defined() || !version_.matches(source) || source.data_ptr() != data_) {
      derived_ = derive(source);
      version_ = SourceVersion::of(source);
      data_ = source.data_ptr();
    }
    return derived_;
  }

 private:
  mutable at::Tensor derived_;
  mutable SourceVersion version_;
  mutable const void* data_ = nullptr;
};

}  // namespace nimble::kernels
