#include "tuning/survey/survey_stop.h"

#include <gtest/gtest.h>

namespace nimble::tuning {
namespace {

TEST(SurveyStop, StopsAtTheGoal) {
  SurveyStopOptions o;
  o.goal_seconds = 0.010;
  SurveyStop s(o);
  EXPECT_FALSE(s.after_epoch(0.020, 10));
  EXPECT_EQ(s.after_epoch(0.010, 20), "goal");
}

TEST(SurveyStop, CriterionIsTheRelativeChangeOfTheImprovementRate) {
  // Both epochs improve (negative rates): the sign weights are +1.
  EXPECT_DOUBLE_EQ(SurveyStop::criterion(-1.0, -2.0), -0.5);  // rate halved
  EXPECT_DOUBLE_EQ(SurveyStop::criterion(-2.0, -2.0), 0.0);   // steady
  EXPECT_DOUBLE_EQ(SurveyStop::criterion(-3.0, -2.0), 0.5);   // accelerating
  EXPECT_DOUBLE_EQ(SurveyStop::criterion(0.0, -2.0), -1.0);   // stalled
  // Faster now after slower before: w1 = -1 turns the recovery into a positive value.
  EXPECT_GT(SurveyStop::criterion(-1.0, 1.0), 0.0);
  EXPECT_DOUBLE_EQ(SurveyStop::rate(-0.002, 10), -0.0002);
  EXPECT_DOUBLE_EQ(SurveyStop::rate(-0.002, -10), -0.0002);  // w2 = -1 when both are negative
}

TEST(SurveyStop, StopsWhenTheRateFallsBelowPhiForPatienceEpochs) {
  SurveyStopOptions o;
  o.patience = 2;
  SurveyStop s(o);
  // Latency per epoch of 10 s: improvements 10, 9, 8.5 (steady enough), then 2 and 0.5.
  const double latencies[] = {100, 90, 81, 72.5, 70.5, 70};
  std::optional<std::string> stop;
  int epoch = 0;
  for (const double l : latencies) {
    stop = s.after_epoch(l, 10.0 * ++epoch);
    if (stop) break;
  }
  ASSERT_TRUE(stop.has_value());
  EXPECT_EQ(*stop, "improvement-rate");
  EXPECT_EQ(epoch, 6);
}

TEST(SurveyStop, SteadyImprovementNeverStops) {
  SurveyStop s;
  double latency = 100;
  for (int epoch = 1; epoch < 50; ++epoch) {
    latency -= 1.0;
    EXPECT_FALSE(s.after_epoch(latency, 10.0 * epoch)) << epoch;
  }
  SurveyStopOptions off;
  off.stop_on_rate = false;
  SurveyStop never(off);
  for (int epoch = 1; epoch < 10; ++epoch) EXPECT_FALSE(never.after_epoch(1.0, epoch));
}

}  // namespace
}  // namespace nimble::tuning
