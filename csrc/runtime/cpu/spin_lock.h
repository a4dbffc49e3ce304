#pragma once
// A lock for state that one thread takes almost always and others seldom: a replay's private
// pool (replay_arena.cpp), locked by the replay's thread at each allocation and free, by
// another thread only when memory of the pool outlives its replay and is freed there. Taken
// and given back with one atomic exchange and one store, without the calls into pthreads of
// std::mutex; a thread that finds it held yields until it is free (the holder may be
// preempted: spinning would keep it off its core). Meets Lockable (std::lock_guard,
// std::unique_lock).
#include <atomic>
#include <thread>

namespace nimble {

class SpinLock {
 public:
  void lock() {
    while (held_.exchange(true, std::memory_order_acquire)) {
      while (held_.load(std::memory_order_relaxed)) std::this_thread::yield();
    }
  }
  bool try_lock() {
    return !held_.load(std::memory_order_relaxed) &&
           !held_.exchange(true, std::memory_order_acquire);
  }
  void unlock() { held_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> held_{false};
};

}  // namespace nimble
