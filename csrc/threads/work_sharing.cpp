#include "csrc/threads/work_sharing.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "csrc/threads/steady_ns.h"

namespace nimble {

namespace {

// How a job's units are claimed. The caller claims from the front of the range, the helpers
// from the back, so that each side's pieces stay contiguous; each claim takes a share of
// what is left (OpenMP's guided schedule), the caller's first one unit in `threads`, as
// OpenMP's static split gives it (finer pieces cost the GEMM its reuse of a row block across
// column blocks: densenet121 1.15x, googlenet 1.07x slower with four a thread). A helper
// claims half that share at a time: a helper preempted in the middle of a piece (its core
// taken by another program's spinning thread for a scheduler slice, milliseconds) holds the
// caller up only for the piece it runs, and the caller takes the rest. No claim is smaller
// than one unit in kMinSplit x threads, so that small pieces do not multiply the calls.
constexpr int64_t kHelperSplit = 2;
constexpr int64_t kMinSplit = 8;
// How long an idle helper polls for the next work before it sleeps: the ops a replay forks
// come microseconds apart; a sleeping helper costs the caller a futex wake and comes late.
// While a replay is in flight it polls with the CPU's pause instruction for kKeepCore and
// keeps its core: a helper that yields it to another program's spinning thread (libgomp's
// after an eager op, ONNX Runtime's after its run) gets it back a scheduler slice later,
// after the replay's kernels are done. Past kKeepCore, between replays, and on the caller's
// own core, it yields, so that the caller and the threads of ATen, oneDNN and other
// programs keep their cores (a helper that kept its core for all of kPoll made back-to-back
// replays slower on a machine loaded by other programs).
constexpr std::chrono::microseconds kPoll{200};
constexpr std::chrono::microseconds kKeepCore{50};
constexpr int kPausesPerCheck = 64;
// How long a caller whose units are all claimed waits with the pause before it yields.
constexpr std::chrono::microseconds kCallerSpin{20};
// The most jobs a trace holds until it is read (trace_helpers_for_test).
constexpr size_t kMaxTraced = size_t{1} << 20;

inline void cpu_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#else
  std::this_thread::yield();
#endif
}

thread_local bool t_helper = false;
thread_local bool t_left_before = false;  // shared_work_left_before()
thread_local int t_shared_threads = 0;

using Body = std::function<void(int64_t, int64_t)>;

// One call's work: the units not yet claimed are [front, back), packed in one word so that
// both ends move by one compare-and-swap. One Job serves every call, one after another (no
// allocation and no shared_ptr, whose atomic loads and stores take a lock, per call): a
// helper late for a call finds its range empty, or finds the next call's, which it may
// claim from. Only a successful claim reads `body` (the caller's), and the claim's
// compare-and-swap reads the range the caller stored after setting up that call (or a later
// claim's), so it sees that call's `body`; the caller waits for the end of every claimed
// piece (`done`) before it sets up the next call. The fields a late helper may read while the
// caller sets them are atomic.
struct Job {
  std::atomic<const Body*> body{nullptr};
  std::atomic<int64_t> units{0};
  std::atomic<int64_t> threads{0};
  std::atomic<int> helpers{0};          // helpers that may join
  std::atomic<uint64_t> generation{0};  // the helpers' generation that announces the call
  std::atomic<uint64_t> range{0};       // front << 32 | back
  std::atomic<int64_t> done{0};         // units run, or skipped after a failure
  std::mutex error_mutex;
  std::exception_ptr error;
  // Traced jobs only (trace_helpers_for_test): when a helper saw the job, claimed its first
  // piece and finished its last, and on which CPU; -1 where none did.
  std::atomic<int64_t> helper_seen_ns{-1}, helper_claim_ns{-1}, helper_end_ns{-1};
  std::atomic<int> helper_cpu{-1};
  std::atomic<int64_t> helper_units{0};

  static uint64_t pack(int64_t front, int64_t back) {
    return static_cast<uint64_t>(front) << 32 | static_cast<uint64_t>(back);
  }
  // Sets up a call; its range last, which publishes it to the claims.
  void start(const Body& f, int64_t n, int64_t team, uint64_t announced) {
    body.store(&f, std::memory_order_relaxed);
    generation.store(announced, std::memory_order_relaxed);
    units.store(n, std::memory_order_relaxed);
    threads.store(team, std::memory_order_relaxed);
    helpers.store(static_cast<int>(team) - 1, std::memory_order_relaxed);
    done.store(0, std::memory_order_relaxed);
    error = nullptr;
    for (auto* stamp : {&helper_seen_ns, &helper_claim_ns, &helper_end_ns})
      stamp->store(-1, std::memory_order_relaxed);
    helper_cpu.store(-1, std::memory_order_relaxed);
    helper_units.store(0, std::memory_order_relaxed);
    range.store(pack(0, n));
  }

  // Claims up to a share of what is left from the front (the caller) or the back (a helper);
  // false when nothing is left. `left_before`: units before `begin` are still unclaimed.
  bool claim(bool front, int64_t& begin, int64_t& end, bool& left_before) {
    uint64_t packed = range.load();
    for (;;) {
      // The call's whose range `packed` is, or (a helper late for it) the next call's: the
      // pieces' sizes may be the other call's, never their units.
      const int64_t threads = this->threads.load(std::memory_order_relaxed);
      const int64_t units = this->units.load(std::memory_order_relaxed);
      const int64_t lo = static_cast<int64_t>(packed >> 32);
      const int64_t hi = static_cast<int64_t>(packed & 0xffffffffu);
      if (lo >= hi) return false;
      const int64_t left = hi - lo;
      const bool first = front && lo == 0;
      int64_t take = (left + threads - 1) / threads;
      if (!front) take = (take + kHelperSplit - 1) / kHelperSplit;
      if (!first) take = std::max(take, (units + kMinSplit * threads - 1) / (kMinSplit * threads));
      take = std::min(take, left);
      begin = front ? lo : hi - take;
      end = begin + take;
      left_before = begin > lo;
      if (range.compare_exchange_weak(packed, front ? pack(end, hi) : pack(lo, begin))) return true;
    }
  }

  // Claims and runs units until none is left (or one failed); returns how many pieces it ran.
  int64_t work(bool front, bool traced = false) {
    int64_t pieces = 0;
    bool left_before = false;
    for (int64_t begin, end; claim(front, begin, end, left_before); ++pieces) {
      t_left_before = !front && left_before;
      if (traced && !front) {
        int64_t none = -1;
        helper_claim_ns.compare_exchange_strong(none, steady_ns());
        helper_cpu.store(sched_getcpu());
        helper_units.fetch_add(end - begin);
      }
      try {
        (*body.load(std::memory_order_relaxed))(begin, end);
      } catch (...) {
        fail();
      }
      if (traced && !front) helper_end_ns.store(steady_ns());
      done.fetch_add(end - begin);
    }
    t_left_before = false;
    return pieces;
  }

  // The units not yet claimed are not run; the caller stops waiting for them.
  void fail() {
    {
      const std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
    uint64_t packed = range.load();
    for (;;) {
      const int64_t lo = static_cast<int64_t>(packed >> 32);
      const int64_t hi = static_cast<int64_t>(packed & 0xffffffffu);
      if (lo >= hi) return;
      if (range.compare_exchange_weak(packed, pack(hi, hi))) {
        done.fetch_add(hi - lo);
        return;
      }
    }
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
    Job* const job = &job_;
    const bool traced = tracing_.load();
    const int64_t published = traced ? steady_ns() : 0;
    caller_cpu_.store(sched_getcpu());
    job->start(body, units, threads, generation_.load() + 1);  // only this caller adds to it
    generation_.fetch_add(1);
    if (sleeping_.load() > 0) {
      const std::lock_guard<std::mutex> lock(sleep_mutex_);
      wake_.notify_all();
    }
    job->work(/*front=*/true);
    const int64_t caller_done = traced ? steady_ns() : 0;
    // Every unit is claimed: wait for the pieces the helpers run. Briefly with the CPU's
    // pause (yielding hands the core to whatever else waits for it, for a scheduler slice),
    // then yielding, for a helper that runs on this core.
    const auto polite = std::chrono::steady_clock::now() + kCallerSpin;
    for (int spins = 1; job->done.load() < units; ++spins) {
      if (spins % kPausesPerCheck != 0) {
        cpu_pause();
      } else if (std::chrono::steady_clock::now() >= polite) {
        std::this_thread::yield();
        spins = 0;
      }
    }
    if (traced) {
      // A helper late for the call before may stamp this call's `helper_seen_ns` out of
      // turn (the one Job): kept between this call's publication and its first claim.
      int64_t seen = job->helper_seen_ns.load();
      const int64_t claimed = job->helper_claim_ns.load();
      if (claimed >= 0) {
        seen = std::clamp(seen, published, claimed);
      } else if (seen >= 0) {
        seen = std::max(seen, published);
      }
      const std::lock_guard<std::mutex> lock(trace_mutex_);
      if (trace_.size() < kMaxTraced)
        trace_.push_back({units, published, caller_done, steady_ns(), caller_cpu_.load(), seen,
                          claimed, job->helper_end_ns.load(), job->helper_cpu.load(),
                          job->helper_units.load()});
    }
    if (job->error) std::rethrow_exception(job->error);
    return true;
  }

  void replay(int change) { replays_.fetch_add(change); }

  Helpers() {
    // A child process forked from this one (a data loader's worker, say) runs its kernels on
    // the calling thread: its copy of the helpers has no threads behind it.
    pthread_atfork(nullptr, nullptr, [] { instance().forked_.store(true); });
  }

  int64_t helper_pieces() const { return helper_pieces_.load(); }

  std::vector<HelperTrace> trace(bool on) {
    const std::lock_guard<std::mutex> lock(trace_mutex_);
    tracing_.store(on);
    std::vector<HelperTrace> taken;
    taken.swap(trace_);
    return taken;
  }

  bool stall(bool stalled) {
    const std::lock_guard<std::mutex> lock(stall_mutex_);
    const bool previous = stalled_.exchange(stalled);
    if (!stalled) unstalled_.notify_all();
    return previous;
  }

 private:
  void serve(int index, uint64_t seen) {
    t_helper = true;
    // Named so that top, perf and a debugger tell nimble's helpers from ATen's threads.
    pthread_setname_np(pthread_self(), "nimble-helper");
    for (;;) {
      await_work(seen);
      await_unstalled();
      seen = generation_.load();
      // The call its generation announced, else (a later call's already) round again.
      Job* const job = &job_;
      if (job->generation.load(std::memory_order_relaxed) != seen ||
          index >= job->helpers.load(std::memory_order_relaxed))
        continue;
      const bool traced = tracing_.load();
      if (traced) {
        int64_t none = -1;
        job->helper_seen_ns.compare_exchange_strong(none, steady_ns());
      }
      helper_pieces_.fetch_add(job->work(/*front=*/false, traced));
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
    const auto start = std::chrono::steady_clock::now();
    for (int spins = 1;; ++spins) {
      if (generation_.load() != seen) return;
      if (spins % kPausesPerCheck != 0) {
        cpu_pause();
        continue;
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= start + kPoll) break;
      if (now >= start + kKeepCore || replays_.load() == 0 || sched_getcpu() == caller_cpu_.load())
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
  Job job_;                          // every call's, one after another (see Job)
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> caller_cpu_{-1};  // where the last job's caller ran
  std::atomic<int> replays_{0};      // SharedWorkScopes of two threads or more alive
  std::atomic<int> sleeping_{0};
  std::mutex sleep_mutex_;
  std::condition_variable wake_;
  std::atomic<int64_t> helper_pieces_{0};  // pieces the helpers claimed, for tests
  std::mutex stall_mutex_;
  std::atomic<bool> stalled_{false};  // written under stall_mutex_
  std::condition_variable unstalled_;
  std::atomic<bool> tracing_{false};
  std::mutex trace_mutex_;
  std::vector<HelperTrace> trace_;  // under trace_mutex_
};

}  // namespace

void share_work(int64_t units, int threads, const Body& body) {
  if (units <= 0) return;
  // Units past 2^31 (never a kernel's rows or tiles) do not fit the packed range.
  if (threads < 2 || units < 2 || units > INT32_MAX || t_helper ||
      !Helpers::instance().run(units, threads, body))
    body(0, units);
}

bool in_shared_work() { return t_helper; }

bool shared_work_left_before() { return t_left_before; }

SharedWorkScope::SharedWorkScope(int threads) : previous_(t_shared_threads) {
  t_shared_threads = std::max(1, threads);
}

SharedWorkScope::~SharedWorkScope() { t_shared_threads = previous_; }

ReplayInFlight::ReplayInFlight() { Helpers::instance().replay(1); }

ReplayInFlight::~ReplayInFlight() { Helpers::instance().replay(-1); }

int shared_work_threads() { return t_shared_threads; }

bool stall_helpers_for_test(bool stalled) { return Helpers::instance().stall(stalled); }

int64_t helper_pieces_for_test() { return Helpers::instance().helper_pieces(); }

std::vector<HelperTrace> trace_helpers_for_test(bool on) { return Helpers::instance().trace(on); }

}  // namespace nimble
