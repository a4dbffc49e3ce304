// threads/work_sharing.h: every unit runs exactly once whatever the split, with helpers or
// without, from several callers at once, nested, and with a failing piece; the caller never
// waits for helpers that do not come.
#include "csrc/threads/work_sharing.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace nimble {
namespace {

// Counts how often each unit ran; checks ranges are well formed.
struct Tally {
  explicit Tally(int64_t units) : counts(static_cast<size_t>(units)) {}
  std::vector<std::atomic<int>> counts;
  std::atomic<bool> bad_range{false};
  void operator()(int64_t begin, int64_t end) {
    if (begin < 0 || end > static_cast<int64_t>(counts.size()) || begin >= end) bad_range = true;
    for (int64_t i = begin; i < end; ++i) counts[static_cast<size_t>(i)].fetch_add(1);
  }
  bool each_once() const {
    for (const auto& c : counts)
      if (c.load() != 1) return false;
    return !bad_range.load();
  }
};

// Property: random unit counts and thread counts, with pieces of random cost.
TEST(WorkSharing, EveryUnitRunsOnceForRandomSplits) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t units = static_cast<int64_t>(rng() % 200);
    const int threads = 1 + static_cast<int>(rng() % 4);
    const bool slow = trial % 10 == 0;
    Tally tally(units);
    share_work(units, threads, [&](int64_t b, int64_t e) {
      if (slow) std::this_thread::sleep_for(std::chrono::microseconds(50));
      tally(b, e);
    });
    ASSERT_TRUE(tally.each_once()) << "trial " << trial << " units " << units;
  }
}

// One job slot serves every call: many tiny calls back to back, each with a body of its own
// (a helper late for one call finds the next one's range), run each call's units once, by
// that call's body only.
TEST(WorkSharing, BackToBackCallsRunOnlyTheirOwnBody) {
  for (int call = 0; call < 3000; ++call) {
    const int64_t units = 2 + call % 7;
    Tally tally(units);
    std::atomic<int> foreign{0};
    share_work(units, 2 + call % 3, [&, call](int64_t b, int64_t e) {
      if (b < 0 || e > units) foreign.fetch_add(1);
      tally(b, e);
      if (call % 5 == 0) std::this_thread::yield();
    });
    ASSERT_TRUE(tally.each_once()) << "call " << call;
    ASSERT_EQ(foreign.load(), 0) << "call " << call;
  }
}

TEST(WorkSharing, TheCallerFinishesAloneWhenTheHelpersAreLate) {
  // After a long pause the helpers sleep; the call still returns with every unit done.
  share_work(8, 2, [](int64_t, int64_t) {});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Tally tally(64);
  share_work(64, 2, [&](int64_t b, int64_t e) { tally(b, e); });
  EXPECT_TRUE(tally.each_once());
}

// While it lives the helpers take no piece, as when their cores are halted or held by another
// program.
class StalledHelpers {
 public:
  StalledHelpers() : previous_(stall_helpers_for_test(true)) {}
  ~StalledHelpers() { stall_helpers_for_test(previous_); }
  StalledHelpers(const StalledHelpers&) = delete;
  StalledHelpers& operator=(const StalledHelpers&) = delete;

 private:
  bool previous_;
};

TEST(WorkSharing, TheCallerFinishesInOneThreadsTimeWhenTheHelpersAreStalled) {
  // Helpers awake (a call just before), then held: the caller claims every piece itself and
  // never waits for them. A caller that waited for its helpers would hang here until the
  // stall ends; the call runs on another thread so that the test can tell.
  share_work(8, 2, [](int64_t, int64_t) {});
  const StalledHelpers stalled;
  for (const int threads : {2, 4}) {
    constexpr int64_t kUnits = 8;
    constexpr auto kUnitTime = std::chrono::milliseconds(2);
    Tally tally(kUnits);
    std::atomic<int> on_helpers{0};
    auto call = std::async(std::launch::async, [&] {
      const auto start = std::chrono::steady_clock::now();
      share_work(kUnits, threads, [&](int64_t b, int64_t e) {
        if (in_shared_work()) on_helpers.fetch_add(1);
        for (int64_t i = b; i < e; ++i) std::this_thread::sleep_for(kUnitTime);
        tally(b, e);
      });
      return std::chrono::steady_clock::now() - start;
    });
    if (call.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      stall_helpers_for_test(false);  // lets the call end, so that the test fails, not hangs
      call.wait();
      FAIL() << "the caller waited for stalled helpers (" << threads << " threads)";
    }
    const auto took = call.get();
    EXPECT_TRUE(tally.each_once());
    EXPECT_EQ(on_helpers.load(), 0);
    // One thread's time (8 x 2 ms), with room for a loaded machine's late wake-ups.
    EXPECT_GE(took, kUnits * kUnitTime);
    EXPECT_LT(took, std::chrono::milliseconds(500)) << threads << " threads";
  }
}

TEST(WorkSharing, StalledHelpersJoinTheNextCallsWhenReleased) {
  {
    const StalledHelpers stalled;
    Tally tally(16);
    share_work(16, 2, [&](int64_t b, int64_t e) { tally(b, e); });
    EXPECT_TRUE(tally.each_once());
  }
  // Released, the helpers serve calls again: with pieces that take a while, one of them runs
  // some. Several tries, since a helper asleep after the stall may come after the caller
  // has claimed both pieces.
  bool helped = false;
  for (int attempt = 0; attempt < 20 && !helped; ++attempt) {
    std::atomic<int> on_helpers{0};
    share_work(4, 2, [&](int64_t, int64_t) {
      if (in_shared_work()) on_helpers.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    });
    helped = on_helpers.load() > 0;
  }
  EXPECT_TRUE(helped);
}

TEST(WorkSharing, HelpersShareTheWorkWhenTheyAreThere) {
  // Pieces that take a while: with the helper polling (a call just before), both threads
  // run some; the caller alone would need every piece's time.
  share_work(8, 2, [](int64_t, int64_t) {});
  std::mutex mutex;
  std::set<std::thread::id> ran_on;
  share_work(8, 2, [&](int64_t, int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const std::lock_guard<std::mutex> lock(mutex);
    ran_on.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(ran_on.size(), 2u);
}

// A helper's pieces say whether units before them were left (its next claim): every one of its
// pieces but its last (later claims take units below it, so they were left); the caller's and
// any thread's outside a piece, never.
TEST(WorkSharing, AHelpersPiecesSayWhetherUnitsWereLeftBeforeThem) {
  for (int call = 0; call < 5; ++call) {
    std::mutex mutex;
    std::vector<std::pair<int64_t, bool>> helper;  // (begin, left before), in claim order
    bool caller_saw_left = false;
    share_work(64, 2, [&](int64_t begin, int64_t end) {
      const auto until =
          std::chrono::steady_clock::now() + std::chrono::microseconds(50) * (end - begin);
      while (std::chrono::steady_clock::now() < until) {
      }
      const std::lock_guard<std::mutex> lock(mutex);
      if (in_shared_work()) {
        helper.emplace_back(begin, shared_work_left_before());
      } else {
        caller_saw_left = caller_saw_left || shared_work_left_before();
      }
    });
    EXPECT_FALSE(caller_saw_left);
    for (size_t i = 0; i + 1 < helper.size(); ++i) {
      EXPECT_GT(helper[i].first, helper[i + 1].first);
      EXPECT_TRUE(helper[i].second) << "piece " << i << " of " << helper.size();
    }
  }
  EXPECT_FALSE(shared_work_left_before());
}

// The diagnostic trace: one record a traced job, its times in order, the helper's units those
// it ran; nothing recorded once tracing is off.
TEST(WorkSharing, TracedJobsRecordTheHelpersPartInOrder) {
  trace_helpers_for_test(true);
  share_work(8, 2, [](int64_t, int64_t) {});
  share_work(8, 2,
             [](int64_t, int64_t) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); });
  const std::vector<HelperTrace> jobs = trace_helpers_for_test(false);
  ASSERT_EQ(jobs.size(), 2u);
  for (const HelperTrace& t : jobs) {
    EXPECT_EQ(t.units, 8);
    EXPECT_LE(t.published_ns, t.caller_done_ns);
    EXPECT_LE(t.caller_done_ns, t.end_ns);
    EXPECT_GE(t.caller_cpu, 0);
    EXPECT_EQ(t.helper_claim_ns >= 0, t.helper_units > 0);
    if (t.helper_claim_ns >= 0) {
      EXPECT_LE(t.published_ns, t.helper_seen_ns);
      EXPECT_LE(t.helper_seen_ns, t.helper_claim_ns);
      EXPECT_LE(t.helper_end_ns, t.end_ns);
      EXPECT_GE(t.helper_cpu, 0);
    }
  }
  share_work(8, 2, [](int64_t, int64_t) {});
  EXPECT_TRUE(trace_helpers_for_test(false).empty());
}

// The pieces the calling thread runs while the helpers are stalled: its first is the first
// unit in `threads` (the GEMM's large contiguous piece, as OpenMP's static split gives it),
// then shares of the rest in order, never smaller than one unit in 8 x threads but for the
// last, and few.
TEST(WorkSharing, TheCallersPiecesAreLargeFirstThenShrinkInOrder) {
  share_work(8, 2, [](int64_t, int64_t) {});
  const StalledHelpers stalled;
  for (const int threads : {2, 3, 4}) {
    for (const int64_t units : {2, 7, 64, 1000}) {
      std::vector<std::pair<int64_t, int64_t>> pieces;
      share_work(units, threads, [&](int64_t b, int64_t e) { pieces.emplace_back(b, e); });
      ASSERT_FALSE(pieces.empty());
      EXPECT_EQ(pieces.front(), std::make_pair(int64_t{0}, (units + threads - 1) / threads));
      const int64_t smallest = (units + 8 * threads - 1) / (8 * threads);
      for (size_t i = 1; i < pieces.size(); ++i) {
        EXPECT_EQ(pieces[i].first, pieces[i - 1].second) << units << " units";
        EXPECT_LE(pieces[i].second - pieces[i].first, pieces[i - 1].second - pieces[i - 1].first);
        if (i + 1 < pieces.size()) EXPECT_GE(pieces[i].second - pieces[i].first, smallest);
      }
      EXPECT_EQ(pieces.back().second, units);
      EXPECT_LE(pieces.size(), static_cast<size_t>(8 * threads)) << units << " units";
    }
  }
}

// A helper preempted in the middle of its piece (its core taken by another program's spinning
// thread) holds at most half a thread's share, from the back of the range: the caller runs
// every other unit meanwhile, and waits only for that piece.
TEST(WorkSharing, AHelperHeldInItsPieceLeavesTheRestToTheCaller) {
  constexpr int64_t kUnits = 64;
  bool held_one = false;
  for (int attempt = 0; attempt < 20 && !held_one; ++attempt) {
    share_work(8, 2, [](int64_t, int64_t) {});  // the helper polls
    Tally tally(kUnits);
    std::atomic<int64_t> run_by_caller{0};
    std::atomic<bool> helper_held{false};
    std::atomic<int64_t> held_begin{-1}, held_end{-1};
    std::atomic<bool> rest_done_while_held{false};
    share_work(kUnits, 2, [&](int64_t b, int64_t e) {
      if (!in_shared_work()) {
        for (int64_t i = b; i < e; ++i) std::this_thread::sleep_for(std::chrono::microseconds(100));
        run_by_caller.fetch_add(e - b);
      } else if (!helper_held.exchange(true)) {
        held_begin = b;
        held_end = e;
        // Held until the caller has run every unit but this piece's (or long past it).
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (run_by_caller.load() < kUnits - (e - b) &&
               std::chrono::steady_clock::now() < give_up)
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        rest_done_while_held = run_by_caller.load() == kUnits - (e - b);
      }
      tally(b, e);
    });
    ASSERT_TRUE(tally.each_once()) << "attempt " << attempt;
    if (!helper_held.load()) continue;  // the helper came after the caller had claimed all
    held_one = true;
    EXPECT_TRUE(rest_done_while_held.load()) << "the caller left units to the held helper";
    EXPECT_EQ(held_end.load(), kUnits) << "a helper's first piece is the back of the range";
    EXPECT_LE(held_end.load() - held_begin.load(), kUnits / 4) << "the held piece is too large";
  }
  EXPECT_TRUE(held_one) << "no helper joined in 20 calls";
}

TEST(WorkSharing, CallersOnSeveralThreadsAtOnceEachGetTheirWorkDone) {
  std::vector<std::thread> callers;
  std::atomic<int> failures{0};
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&failures, c] {
      for (int round = 0; round < 50; ++round) {
        Tally tally(17 + c);
        share_work(17 + c, 3, [&](int64_t b, int64_t e) { tally(b, e); });
        if (!tally.each_once()) failures.fetch_add(1);
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(WorkSharing, NestedWorkRunsOnTheThreadThatAsks) {
  // Outer pieces that take a while, with the helper polling (a call just before), so that
  // the helper runs some of them (as in HelpersShareTheWorkWhenTheyAreThere) and asks for
  // nested work from there.
  share_work(8, 2, [](int64_t, int64_t) {});
  Tally outer(6);
  std::atomic<int> nested_in_helper{0}, inner_elsewhere{0};
  share_work(6, 2, [&](int64_t b, int64_t e) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const bool helper = in_shared_work();
    if (helper) nested_in_helper.fetch_add(1);
    const std::thread::id asking = std::this_thread::get_id();
    Tally inner(5);
    share_work(5, 2, [&](int64_t ib, int64_t ie) {
      if (helper && std::this_thread::get_id() != asking) inner_elsewhere.fetch_add(1);
      inner(ib, ie);
    });
    EXPECT_TRUE(inner.each_once());
    outer(b, e);
  });
  EXPECT_TRUE(outer.each_once());
  EXPECT_GE(nested_in_helper.load(), 1) << "no outer piece ran on a helper";
  EXPECT_EQ(inner_elsewhere.load(), 0) << "a helper's nested work left its thread";
  EXPECT_FALSE(in_shared_work());
}

TEST(WorkSharing, AFailingPieceIsRethrownToTheCaller) {
  std::atomic<int> ran{0};
  EXPECT_THROW(share_work(40, 2,
                          [&](int64_t b, int64_t) {
                            ran.fetch_add(1);
                            if (b == 0) throw std::runtime_error("piece 0 failed");
                          }),
               std::runtime_error);
  EXPECT_GE(ran.load(), 1);
  // The helpers serve the next call as before.
  Tally tally(30);
  share_work(30, 2, [&](int64_t b, int64_t e) { tally(b, e); });
  EXPECT_TRUE(tally.each_once());
}

}  // namespace
}  // namespace nimble
