#include "csrc/runtime/cpu/work_sharing.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace nimble {

namespace {

// One piece a thread, as OpenMP's static schedule splits: finer pieces cost the GEMM its
// reuse of a row block across column blocks (densenet121 1.15x, googlenet 1.07x slower with
// four a thread). A helper that is late leaves its piece to the caller.
constexpr int64_t kPiecesPerThread = 1;
// How long an idle helper polls for the next work before it sleeps: the ops a replay forks
// come microseconds apart; a sleeping helper costs the caller a futex wake and comes late.
// It yields while it polls, so the threads of ATen and oneDNN keep its core when they need it.
constexpr std::chrono::microseconds kPoll{200};

thread_local bool t_helper = false;
thread_local int t_shared_threads = 0;

using Body = std::function<void(int64_t, int64_t)>;

// One call's work. Helpers hold it by shared_ptr, so it outlives a late helper's look at it;
// `body` (the caller's) is touched only by a thread that claimed a piece, which the caller
// waits for.
struct Job {
  const Body* body = nullptr;
  int64_t units = 0, pieces = 0;
  int helpers = 0;                // helpers that may join
  std::atomic<int64_t> next{0};   // the next piece to claim
  std::atomic<int> in_flight{0};  // helpers between joining and leaving
  std::mutex error_mutex;
  std::exception_ptr error;

  // Claims and runs pieces until none is left (or one failed); returns how many it claimed.
  int64_t work() {
    int64_t claimed = 0;
    for (int64_t p; (p = next.fetch_add(1)) < pieces; ++claimed) {
      try {
        (*body)(units * p / pieces, units * (p + 1) / pieces);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        next.store(pieces);  // the rest is not run
      }
    }
    return claimed;
  }
};

class Helpers {
 public:
  // Never destroyed: the helpers are detached and wait on its members until the process
  // ends, and a child process forked from this one holds a copy whose threads do not exist
  // (fork copies only the forking thread), which no destructor could join or wait for.
  static Helpers& instance() {
    alignas(Helpers) static unsigned char storage[sizeof(Helpers)];
    static Helpers* const helpers = ::new (static_cast<void*>(storage)) Helpers();
    return *helpers;
  }

  // False (nothing run) when another caller holds the helpers.
  bool run(int64_t units, int threads, const Body& body) {
    if (forked_.load()) return false;
    const std::unique_lock<std::mutex> owner(owner_, std::try_to_lock);
    if (!owner.owns_lock()) return false;
    while (started_ < threads - 1) {
      // From the generation before this call's: a helper that starts after the call is
      // published still sees it as new.
      const int index = started_++;
      const uint64_t seen = generation_.load();
      std::thread([this, index, seen] { serve(index, seen); }).detach();
    }
    auto job = std::make_shared<Job>();
    job->body = &body;
    job->units = units;
    job->pieces = std::min(units, int64_t{threads} * kPiecesPerThread);
    job->helpers = threads - 1;
    std::atomic_store(&job_, job);
    generation_.fetch_add(1);
    if (sleeping_.load() > 0) {
      const std::lock_guard<std::mutex> lock(sleep_mutex_);
      wake_.notify_all();
    }
    job->work();
    // Every piece is claimed: wait for the helpers that joined (a helper joins before it
    // claims, so one that claimed a piece is counted here).
    while (job->in_flight.load() > 0) std::this_thread::yield();
    std::atomic_store(&job_, std::shared_ptr<Job>());
    if (job->error) std::rethrow_exception(job->error);
    return true;
  }

  Helpers() {
    // A child process forked from this one (a data loader's worker, say) runs its kernels on
    // the calling thread: its copy of the helpers has no threads behind it.
    pthread_atfork(nullptr, nullptr, [] { instance().forked_.store(true); });
  }

  int64_t helper_pieces() const { return helper_pieces_.load(); }

  bool stall(bool stalled) {
    const std::lock_guard<std::mutex> lock(stall_mutex_);
    const bool previous = stalled_.exchange(stalled);
    if (!stalled) unstalled_.notify_all();
    return previous;
  }

 private:
  void serve(int index, uint64_t seen) {
    t_helper = true;
    for (;;) {
      await_work(seen);
      await_unstalled();
      seen = generation_.load();
      const std::shared_ptr<Job> job = std::atomic_load(&job_);
      if (!job || index >= job->helpers) continue;
      job->in_flight.fetch_add(1);
      helper_pieces_.fetch_add(job->work());
      job->in_flight.fetch_sub(1);
    }
  }

  // A stalled helper stops before it joins a job: the caller never waits for it.
  void await_unstalled() {
    if (!stalled_.load()) return;
    std::unique_lock<std::mutex> lock(stall_mutex_);
    unstalled_.wait(lock, [&] { return !stalled_; });
  }

  // Polls, then sleeps, until the generation moves past `seen`.
  void await_work(uint64_t seen) {
    const auto until = std::chrono::steady_clock::now() + kPoll;
    while (std::chrono::steady_clock::now() < until) {
      if (generation_.load() != seen) return;
      std::this_thread::yield();
    }
    sleeping_.fetch_add(1);
    std::unique_lock<std::mutex> lock(sleep_mutex_);
    wake_.wait(lock, [&] { return generation_.load() != seen; });
    sleeping_.fetch_sub(1);
  }

  std::mutex owner_;                 // held by the caller whose work the helpers serve
  int started_ = 0;                  // helpers started, under owner_
  std::atomic<bool> forked_{false};  // this is a child process forked from the one that ran us
  std::shared_ptr<Job> job_;         // accessed through std::atomic_load / atomic_store
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> sleeping_{0};
  std::mutex sleep_mutex_;
  std::condition_variable wake_;
  std::atomic<int64_t> helper_pieces_{0};  // pieces the helpers claimed, for tests
  std::mutex stall_mutex_;
  std::atomic<bool> stalled_{false};  // written under stall_mutex_
  std::condition_variable unstalled_;
};

}  // namespace

void share_work(int64_t units, int threads, const Body& body) {
  if (units <= 0) return;
  if (threads < 2 || units < 2 || t_helper || !Helpers::instance().run(units, threads, body))
    body(0, units);
}

bool in_shared_work() { return t_helper; }

SharedWorkScope::SharedWorkScope(int threads) : previous_(t_shared_threads) {
  t_shared_threads = std::max(1, threads);
}

SharedWorkScope::~SharedWorkScope() { t_shared_threads = previous_; }

int shared_work_threads() { return t_shared_threads; }

bool stall_helpers_for_test(bool stalled) { return Helpers::instance().stall(stalled); }

int64_t helper_pieces_for_test() { return Helpers::instance().helper_pieces(); }

}  // namespace nimble
