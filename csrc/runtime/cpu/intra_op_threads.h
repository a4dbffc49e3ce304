#pragma once
// The intra-op thread count of the calling thread's kernels. OpenMP's team size (ATen,
// oneDNN) is per thread; MKL (torch's matrix products) keeps a count of its own, which
// torch.set_num_threads sets process-wide. CPU streams size each stream's teams, and a tuned
// kernel its own, so both are set here for the calling thread only.
#include <omp.h>

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

}  // namespace nimble
