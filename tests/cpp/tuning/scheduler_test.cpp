#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>

#include "tuning/scheduler/dynatune_scheduler.h"
#include "tuning/scheduler/gradient_scheduler.h"
#include "tuning/scheduler/scheduler_factory.h"

namespace nimble::tuning {
namespace {

// A hand-made tuning state that the tests change between calls.
struct State {
  std::vector<TaskProgress> tasks;
  std::vector<std::vector<double>> gflops;
  std::vector<std::vector<double>> per_slot;
  long slot = 0;

  explicit State(size_t n) : tasks(n), gflops(n), per_slot(n) {
    for (size_t i = 0; i < n; ++i) {
      tasks[i].name = "t" + std::to_string(i);
      tasks[i].flops = 1e9;
      tasks[i].best_seconds = 1e-3;
      tasks[i].best_gflops_history = &gflops[i];
      tasks[i].best_seconds_per_slot = &per_slot[i];
    }
  }
  SchedulerView view(double model_seconds = 0.01) const {
    return SchedulerView{tasks, slot, 1000.0, model_seconds, model_seconds};
  }
  // What the tuner does after a slot: bookkeeping the scheduler sees.
  void give_slot(size_t i, long trials) {
    tasks[i].slots += 1;
    tasks[i].trials += trials;
    tasks[i].last_slot_trials = trials;
    per_slot[i].push_back(tasks[i].best_seconds);
    ++slot;
  }
};

std::vector<size_t> run(TaskScheduler& s, State& state, int slots) {
  std::vector<size_t> order;
  for (int i = 0; i < slots; ++i) {
    const auto pick = s.choose(state.view());
    if (!pick) break;
    order.push_back(*pick);
    state.give_slot(*pick, 8);
    s.observe(*pick, state.view());
  }
  return order;
}

TEST(SchedulerFactory, MakesEverySchedulerByName) {
  for (const auto& name : scheduler_names()) {
    const auto s = make_scheduler(name, {});
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->name(), name);
  }
  EXPECT_EQ(make_scheduler("ansor", {})->name(), "gradient");
  EXPECT_THROW(make_scheduler("nope", {}), std::invalid_argument);
}

TEST(Schedulers, NoneChoosesAFinishedTaskAndAllStopWhenEverythingIsFinished) {
  for (const auto& name : scheduler_names()) {
    State state(4);
    state.tasks[1].finished = true;
    SchedulerOptions o;
    o.seed = 3;
    const auto s = make_scheduler(name, o);
    for (const size_t pick : run(*s, state, 30)) EXPECT_NE(pick, 1u) << name;
    for (auto& t : state.tasks) t.finished = true;
    EXPECT_FALSE(s->choose(state.view()).has_value()) << name;
  }
}

TEST(SequentialScheduler, TunesTasksInOrderUpToTheirTrialShare) {
  State state(3);
  SchedulerOptions o;
  o.sequential_trials_per_task = 16;
  const auto s = make_scheduler("sequential", o);
  EXPECT_EQ(run(*s, state, 10), (std::vector<size_t>{0, 0, 1, 1, 2, 2}));
}

TEST(RoundRobinScheduler, CyclesThroughLiveTasks) {
  State state(3);
  const auto s = make_scheduler("round-robin", {});
  auto order = run(*s, state, 4);
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 0}));
  state.tasks[1].finished = true;
  order = run(*s, state, 3);
  EXPECT_EQ(order, (std::vector<size_t>{2, 0, 2}));
}

TEST(RandomScheduler, VisitsAllLiveTasksRoughlyEvenly) {
  State state(4);
  SchedulerOptions o;
  o.seed = 1;
  const auto s = make_scheduler("random", o);
  std::map<size_t, int> count;
  for (const size_t pick : run(*s, state, 4000)) ++count[pick];
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(count[i], 1000, 150);
}

TEST(FlopLinearScheduler, SlotsFollowTheFlopShare) {
  State state(3);
  state.tasks[0].flops = 1e9;
  state.tasks[1].flops = 2e9;
  state.tasks[2].flops = 1e9;
  state.tasks[2].weight = 3;  // occurs three times: three times the share
  const auto s = make_scheduler("flop-linear", {});
  std::map<size_t, int> count;
  for (const size_t pick : run(*s, state, 600)) ++count[pick];
  EXPECT_NEAR(count[0], 100, 2);
  EXPECT_NEAR(count[1], 200, 2);
  EXPECT_NEAR(count[2], 300, 2);
}

TEST(GradientScheduler, GradientFollowsTvmsFormula) {
  State state(2);
  state.tasks[0].group = "conv";
  state.tasks[1].group = "conv";
  state.tasks[0].weight = 2;
  state.tasks[0].flops = 4e9;
  state.tasks[1].flops = 1e9;
  // Task 0: four slots, best 10 ms -> 6 ms; task 1 at 1 ms (1000 GFLOPS, the group's best).
  state.per_slot[0] = {0.010, 0.009, 0.008, 0.006};
  state.tasks[0].slots = 4;
  state.tasks[0].best_seconds = 0.006;
  state.per_slot[1] = {0.001};
  state.tasks[1].slots = 1;
  state.tasks[1].best_seconds = 0.001;
  GradientSchedulerOptions o;  // alpha 0.2, beta 2, window 3
  const GradientScheduler s(o, 0);
  const double backward = (0.006 - 0.010) / 3;
  const double next_1 = 0.006 - 0.006 / 4;
  const double next_2 = 2.0 * 4e9 / (1e9 / 0.001);
  const double forward = std::min(next_1, next_2) - 0.006;
  EXPECT_NEAR(s.gradient(state.view(), 0), 2 * (0.2 * backward + 0.8 * forward), 1e-12);
  // With a backward window longer than the history, only the forward term counts.
  EXPECT_NEAR(s.gradient(state.view(), 1), 1 * 0.8 * (std::min(0.0, 2.0 * 1e9 / 1e12) - 0.001),
              1e-12);
}

TEST(GradientScheduler, WarmsUpEveryTaskThenFollowsTheSteepestGradient) {
  State state(3);
  GradientSchedulerOptions o;
  o.eps_random = 0;
  GradientScheduler s(o, 0);
  EXPECT_EQ(run(s, state, 3), (std::vector<size_t>{0, 1, 2}));
  state.tasks[2].weight = 50;  // the heaviest task has the steepest gradient
  EXPECT_EQ(s.choose(state.view()), 2u);
}

// The reward is a share of the model's initial latency: scaling every latency (a model 10x
// faster, its tasks 10x faster) changes no decision.
TEST(DynaTuneScheduler, DecisionsDoNotDependOnTheModelsScale) {
  for (const double scale : {1.0, 0.1, 10.0}) {
    State state(3);
    DynaTuneOptions o;
    o.c = 1e-4;
    o.belief.mcmc.steps = 100;
    o.belief.mcmc.samples = 50;
    DynaTuneScheduler s(o, 1);
    for (size_t i = 0; i < 3; ++i) {
      state.tasks[i].flops *= scale;  // same GFLOPS, latencies scaled
      for (int t = 1; t <= 40; ++t)
        state.gflops[i].push_back(i == 2 ? 500 * std::pow(t / 40.0, 0.5)
                                         : 300.0 * (1 - std::exp(-t)));
      state.tasks[i].best_seconds = state.tasks[i].flops / (state.gflops[i].back() * 1e9);
    }
    const double model_seconds = 0.01 * scale;
    for (size_t i = 0; i < 3; ++i) {
      state.give_slot(i, 40);
      s.observe(i, state.view(model_seconds));
    }
    // The bonus's range (weight x latency at stake, a share of the model) is a share too.
    const auto range = [&](size_t i) { return state.tasks[i].best_seconds / model_seconds; };
    EXPECT_NEAR(s.upper_confidence_bound(state.view(model_seconds), 2) -
                    s.upper_confidence_bound(state.view(model_seconds), 0),
                s.predicted_reduction_ms(state.view(model_seconds), 2) / (10 * scale) -
                    s.predicted_reduction_ms(state.view(model_seconds), 0) / (10 * scale) +
                    (range(2) - range(0)) * std::sqrt(o.c * std::log(3.0)),
                1e-12)
        << scale;
    EXPECT_EQ(s.choose(state.view(model_seconds)), 2u) << scale;
  }
}

TEST(DynaTuneScheduler, TriesEveryTaskOnceThenPrefersThePredictedReduction) {
  State state(3);
  DynaTuneOptions o;
  o.c = 1e-6;  // nearly no exploration: the belief decides
  o.belief.mcmc.steps = 100;
  o.belief.mcmc.samples = 50;
  DynaTuneScheduler s(o, 1);
  // Task 1's curve still rises steeply; tasks 0 and 2 have saturated.
  for (size_t i = 0; i < 3; ++i) {
    for (int t = 1; t <= 40; ++t) {
      const double g = i == 1 ? 600 * std::pow(t / 40.0, 0.7) : 300.0 * (1 - std::exp(-t));
      state.gflops[i].push_back(g);
    }
    state.tasks[i].best_seconds = state.tasks[i].flops / (state.gflops[i].back() * 1e9);
  }
  // The warm-up: tasks 0 and 2 (slower now, so more at stake) before task 1.
  EXPECT_EQ(run(s, state, 3), (std::vector<size_t>{0, 2, 1}));
  EXPECT_GT(s.predicted_reduction_ms(state.view(), 1),
            2 * s.predicted_reduction_ms(state.view(), 0));
  EXPECT_EQ(s.choose(state.view()), 1u);
  // Weight multiplies the reduction: a saturated task that occurs often can still win.
  state.tasks[0].weight = 1e6;
  EXPECT_EQ(s.choose(state.view()), 0u);
}

TEST(DynaTuneScheduler, WarmsUpTheTasksWithTheMostLatencyAtStakeFirst) {
  State state(4);
  state.tasks[0].best_seconds = 1e-3;  // stakes: 1, 6, 2, 6 (x 1e-3)
  state.tasks[1].best_seconds = 2e-3;
  state.tasks[1].weight = 3;
  state.tasks[2].best_seconds = 2e-3;
  state.tasks[3].best_seconds = 6e-3;
  DynaTuneOptions o;
  o.belief.mcmc.steps = 50;
  o.belief.mcmc.samples = 20;
  DynaTuneScheduler s(o, 0);
  EXPECT_EQ(run(s, state, 4), (std::vector<size_t>{1, 3, 2, 0}));
  // A finished task is skipped, whatever its stake.
  State again(2);
  again.tasks[1].best_seconds = 5e-3;
  again.tasks[1].finished = true;
  EXPECT_EQ(s.choose(again.view()), 0u);
}

TEST(DynaTuneScheduler, OnlyWarmUpSlotsEndWhenTheirSearchGoesFlat) {
  State state(2);
  state.tasks[1].slots = 1;
  DynaTuneScheduler s(DynaTuneOptions{}, 0);
  EXPECT_TRUE(s.slot_ends_when_flat(0, state.view()));  // never tuned: a warm-up slot
  EXPECT_FALSE(s.slot_ends_when_flat(1, state.view()));
  DynaTuneOptions whole;
  whole.warm_up_ends_when_flat = false;
  EXPECT_FALSE(DynaTuneScheduler(whole, 0).slot_ends_when_flat(0, state.view()));
  // The other schedulers' slots always last their length.
  EXPECT_FALSE(make_scheduler("gradient", {})->slot_ends_when_flat(0, state.view()));
}

TEST(DynaTuneScheduler, ExplorationBonusShrinksWithSlotsGiven) {
  State state(2);
  DynaTuneOptions o;
  o.c = 2;
  DynaTuneScheduler s(o, 0);
  state.tasks[0].slots = 1;
  state.tasks[1].slots = 9;
  state.slot = 10;
  // No beliefs yet (no history): only the bonus sqrt(C ln t / c_k) counts, times the range of
  // the reward (each task holds 1 ms of the 10 ms model).
  EXPECT_NEAR(s.upper_confidence_bound(state.view(), 0), 0.1 * std::sqrt(2 * std::log(10.0) / 1),
              1e-12);
  EXPECT_NEAR(s.upper_confidence_bound(state.view(), 1), 0.1 * std::sqrt(2 * std::log(10.0) / 9),
              1e-12);
  EXPECT_EQ(s.choose(state.view()), 0u);
}

// A slot cannot remove more than the task's latency at stake: a task with a tenth of another's
// stake gets a tenth of its bonus, and with no belief to tell them apart the larger one is
// tuned, however often it was. Unscaled, the task tuned less often would win.
TEST(DynaTuneScheduler, ExplorationBonusIsScaledByTheTasksStake) {
  State state(2);
  state.tasks[0].best_seconds = 4e-3;
  state.tasks[0].slots = 4;
  state.tasks[1].best_seconds = 0.4e-3;
  state.tasks[1].slots = 1;
  state.slot = 5;
  DynaTuneOptions o;
  DynaTuneScheduler s(o, 0);
  EXPECT_NEAR(s.upper_confidence_bound(state.view(), 0), 0.4 * std::sqrt(o.c * std::log(5.0) / 4),
              1e-12);
  EXPECT_NEAR(s.upper_confidence_bound(state.view(), 1), 0.04 * std::sqrt(o.c * std::log(5.0) / 1),
              1e-12);
  EXPECT_EQ(s.choose(state.view()), 0u);
  o.bonus_scaled_by_stake = false;
  EXPECT_EQ(DynaTuneScheduler(o, 0).choose(state.view()), 1u);
}

// Once a task has been tried, an untried one is bounded by its stake times the largest share
// of its start any first slot removed, plus a once-tried task's bonus: not infinity, so a small
// untried task waits while a large one promises more.
TEST(DynaTuneScheduler, AnUntriedTaskIsBoundedByTheLargestFirstSlotReduction) {
  State state(3);
  for (auto& t : state.tasks) t.baseline_seconds = 2e-3;
  state.tasks[0].best_seconds = 8e-3;  // 0.8 of the 10 ms model at stake, tried once
  state.tasks[0].baseline_seconds = 10e-3;
  state.give_slot(0, 8);  // its first slot removed a fifth: 10 ms -> 8 ms
  state.tasks[1].best_seconds = 0.2e-3;
  state.tasks[2].best_seconds = 2e-3;
  state.tasks[2].baseline_seconds = std::numeric_limits<double>::infinity();  // unknown
  DynaTuneOptions o;
  DynaTuneScheduler s(o, 0);
  EXPECT_NEAR(*s.first_slot_reduction(state.view()), 0.2, 1e-12);
  const double bonus = std::sqrt(o.c * std::log(1.0));
  EXPECT_NEAR(s.upper_confidence_bound(state.view(), 1), 0.02 * 0.2 + 0.02 * bonus, 1e-12);
  EXPECT_NEAR(s.upper_confidence_bound(state.view(), 2), 0.2 * 0.2 + 0.2 * bonus, 1e-12);
  state.slot = 3;
  EXPECT_GT(s.upper_confidence_bound(state.view(), 0), s.upper_confidence_bound(state.view(), 1));
  EXPECT_EQ(s.choose(state.view()), 0u);
  // The paper's infinite gamma: every untried task before any tried one.
  o.finite_untried_bound = false;
  DynaTuneScheduler paper(o, 0);
  EXPECT_TRUE(std::isinf(paper.upper_confidence_bound(state.view(), 1)));
  EXPECT_EQ(paper.choose(state.view()), 2u);
  // Before any task with a known start was tried, untried tasks have no bound either.
  State fresh(2);
  EXPECT_FALSE(s.first_slot_reduction(fresh.view()).has_value());
  EXPECT_EQ(s.choose(fresh.view()), 0u);
}

}  // namespace
}  // namespace nimble::tuning
