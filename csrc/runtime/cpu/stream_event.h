#pragma once
// A cross-stream event for CPU worker threads. Signalling publishes the replay epoch;
// waiting costs one atomic load when the event is already signalled, spins briefly when
// it is about to be, and then sleeps on a condition variable so that a long wait does
// not burn a core another stream needs.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace nimble {

// Shared by the events of one executor: sleepers block here.
class EventWaitQueue {
 public:
  template <typename Ready>
  void wait(Ready ready) {
    std::unique_lock<std::mutex> lock(mutex_);
    ++sleepers_;
    cv_.wait(lock, ready);
    --sleepers_;
  }
  void notify() {
    // The store a sleeper waits for happened before this call; taking the lock orders it
    // with the sleeper's predicate check, so no wake-up is lost.
    if (sleepers_.load(std::memory_order_seq_cst) == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<int> sleepers_{0};
};

class StreamEvent {
 public:
  static constexpr int kSpins = 256;  // a few microseconds of pause instructions

  void signal(uint64_t epoch, EventWaitQueue& queue) {
    epoch_.store(epoch, std::memory_order_seq_cst);
    queue.notify();
  }
  bool is_signalled(uint64_t epoch) const {
    return epoch_.load(std::memory_order_seq_cst) >= epoch;
  }
  void wait(uint64_t epoch, EventWaitQueue& queue) const {
    for (int i = 0; i < kSpins; ++i) {
      if (is_signalled(epoch)) return;
#if defined(__x86_64__) || defined(_M_X64)
      _mm_pause();
#endif
    }
    queue.wait([&] { return is_signalled(epoch); });
  }

 private:
  std::atomic<uint64_t> epoch_{0};
};

}  // namespace nimble
