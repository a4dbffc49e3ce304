// plan_offsets: items whose lifetimes overlap never share a byte, on random lifetimes,
// and the block is never below the live-bytes bound (and meets it on simple cases).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "csrc/program/memory_plan.h"

namespace nimble {
namespace {

int64_t aligned(int64_t bytes) { return (bytes + 63) / 64 * 64; }

// The most bytes alive at one tick: no plan can use less.
int64_t live_bound(const std::vector<Lifetime>& items) {
  std::map<int64_t, int64_t> delta;
  for (const Lifetime& item : items) {
    delta[item.first] += aligned(item.bytes);
    delta[item.last + 1] -= aligned(item.bytes);
  }
  int64_t current = 0, peak = 0;
  for (const auto& [tick, change] : delta) {
    current += change;
    peak = std::max(peak, current);
  }
  return peak;
}

TEST(OffsetPlan, OverlappingLifetimesNeverShareBytes) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 40);
    std::vector<Lifetime> items(n);
    for (Lifetime& item : items) {
      item.bytes = 1 + static_cast<int64_t>(rng() % 5000);
      item.first = static_cast<int64_t>(rng() % 100);
      item.last = item.first + static_cast<int64_t>(rng() % 30);
    }
    const OffsetPlan plan = plan_offsets(items);
    ASSERT_EQ(plan.offsets.size(), items.size());
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(plan.offsets[i] % 64, 0);
      EXPECT_LE(plan.offsets[i] + items[i].bytes, plan.total_bytes);
      for (int j = i + 1; j < n; ++j) {
        const bool together = items[i].first <= items[j].last && items[j].first <= items[i].last;
        const bool apart = plan.offsets[i] + items[i].bytes <= plan.offsets[j] ||
                           plan.offsets[j] + items[j].bytes <= plan.offsets[i];
        ASSERT_TRUE(!together || apart) << "trial " << trial << ": items " << i << " and " << j;
      }
    }
    const int64_t bound = live_bound(items);
    EXPECT_GE(plan.total_bytes, bound);
    int64_t sum = 0;
    for (const Lifetime& item : items) sum += aligned(item.bytes);
    EXPECT_LE(plan.total_bytes, sum);
  }
}

TEST(OffsetPlan, ChainOfTemporariesNeedsTwoAtATime) {
  // Layer by layer: each output lives until the next layer's output is made.
  std::vector<Lifetime> items;
  for (int i = 0; i < 10; ++i) items.push_back({4096 + 64 * (i % 2), 2 * i, 2 * i + 2});
  const OffsetPlan plan = plan_offsets(items);
  EXPECT_EQ(plan.total_bytes, live_bound(items));
  EXPECT_EQ(plan.total_bytes, 4096 + 4160);
}

TEST(OffsetPlan, DisjointLifetimesReuseOneRegion) {
  const std::vector<Lifetime> items = {{4096, 0, 1}, {4096, 2, 3}, {100, 4, 5}};
  const OffsetPlan plan = plan_offsets(items);
  EXPECT_EQ(plan.total_bytes, 4096);
  EXPECT_EQ(plan.offsets, (std::vector<int64_t>{0, 0, 0}));
}

TEST(OffsetPlan, Empty) {
  const OffsetPlan plan = plan_offsets({});
  EXPECT_EQ(plan.total_bytes, 0);
  EXPECT_TRUE(plan.offsets.empty());
}

}  // namespace
}  // namespace nimble
