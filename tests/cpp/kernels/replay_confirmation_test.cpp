// The whole-replay confirmation's test (slot/replay_confirmation.h): a pick is kept where the
// runs with it were faster in significantly more pairs than not, by a one-sided sign test,
// and its median ratio is below 1 - min_gain; a load spike in one pair counts as one pair.
#include "csrc/slot/replay_confirmation.h"

#include <gtest/gtest.h>

#include <vector>

namespace nimble::slot {
namespace {

std::vector<double> scaled(const std::vector<double>& a, const std::vector<double>& factors) {
  std::vector<double> out;
  for (size_t i = 0; i < a.size(); ++i) out.push_back(a[i] * factors[i % factors.size()]);
  return out;
}

std::vector<double> noisy_runs(int n) {
  std::vector<double> out;
  for (int i = 0; i < n; ++i) out.push_back(1e-3 * (1 + 0.37 * ((i * 7919) % 101) / 100.0));
  return out;
}

TEST(WholeReplayConfirmation, APickFasterInEveryPairWins) {
  const std::vector<double> a = noisy_runs(100);
  const PairedComparison c = compare_pairs(a, scaled(a, {0.98}));
  EXPECT_TRUE(c.b_wins);
  EXPECT_FALSE(c.b_loses);
  EXPECT_EQ(c.faster, 100);
  EXPECT_NEAR(c.median_ratio, 0.98, 1e-12);
  EXPECT_FALSE(compare_pairs(a, scaled(a, {0.98}), 1.645, /*min_gain=*/0.03).b_wins);
  EXPECT_TRUE(compare_pairs(a, scaled(a, {1.02})).b_loses);
}

TEST(WholeReplayConfirmation, TheSignTestNeedsMoreThanHalfThePairsByItsMargin) {
  const std::vector<double> a = noisy_runs(100);
  // 58 of 100 faster: not above 50 + 1.645 * 10 / 2 = 58.2; 59 is.
  for (const auto& [faster, wins] : {std::pair{58, false}, std::pair{59, true}}) {
    std::vector<double> b;
    for (int i = 0; i < 100; ++i) b.push_back(a[i] * (i < faster ? 0.99 : 1.01));
    EXPECT_EQ(compare_pairs(a, b).b_wins, wins) << faster;
  }
}

TEST(WholeReplayConfirmation, ALoadSpikeCountsAsOnePair) {
  std::vector<double> a = noisy_runs(60);
  std::vector<double> b = scaled(a, {0.97});
  b[3] = 1.0;  // one run thrown a second late
  const PairedComparison c = compare_pairs(a, b);
  EXPECT_TRUE(c.b_wins);
  EXPECT_EQ(c.faster, 59);
  EXPECT_EQ(c.slower, 1);
}

TEST(WholeReplayConfirmation, TiesAndNoPairsDecideNothing) {
  const std::vector<double> a = noisy_runs(40);
  const PairedComparison same = compare_pairs(a, a);
  EXPECT_FALSE(same.b_wins || same.b_loses);
  EXPECT_EQ(same.faster + same.slower, 0);
  const PairedComparison none = compare_pairs({}, {});
  EXPECT_EQ(none.pairs, 0);
  EXPECT_FALSE(none.b_wins || none.b_loses);
}

}  // namespace
}  // namespace nimble::slot
