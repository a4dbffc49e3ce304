// Traces replayed by the simulator: spaces limited to the recorded configurations, measurements
// answered from the record (noise seeded per configuration, recorded costs), and schedulers
// compared on them under a budget that runs out.
#include "tuning/simulator/trace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "tuning/measure/adaptive_evaluator.h"
#include "tuning/scheduler/scheduler_factory.h"
#include "tuning/simulator/simulation.h"
#include "tuning/simulator/trace_measurer.h"

namespace nimble::tuning {
namespace {

// A task over two families: "grid" with 16 x 4 configs whose time falls smoothly towards one
// corner (its best is `best_ms`, its worst about 8x that), and "flat" with 8 configs all at
// `flat_ms`. Config (grid, x=3, y=1) failed when it was recorded.
TraceTask grid_task(const std::string& name, double weight, double best_ms, double flat_ms,
                    double baseline_ms) {
  TraceTask t;
  t.name = name;
  t.signature = "trace/" + name;
  t.group = "conv";
  t.flops = 1e8;
  t.weight = weight;
  t.baseline_seconds = baseline_ms * 1e-3;
  t.knobs = {{"family", "choice", {}, {"grid", "flat"}, "", {}},
             {"grid.x",
              "int",
              {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
              {},
              "family",
              {"grid"}},
             {"grid.y", "pow2", {1, 2, 4, 8}, {}, "family", {"grid"}},
             {"flat.z", "int", {1, 2, 3, 4, 5, 6, 7, 8}, {}, "family", {"flat"}}};
  for (int x = 0; x < 16; ++x)
    for (int y = 0; y < 4; ++y) {
      TracePoint p;
      p.config = {0, x, y, 0};
      p.seconds = best_ms * 1e-3 * (1 + 0.4 * x + 0.3 * (3 - y));
      p.noise = 0.02;
      p.setup_seconds = 0.05;
      p.repeat_seconds = 0.01;
      if (x == 3 && y == 1) p.error = MeasureError::kRuntime;
      t.points.push_back(p);
    }
  for (int z = 0; z < 8; ++z) {
    TracePoint p;
    p.config = {1, 0, 0, z};
    p.seconds = flat_ms * 1e-3;
    p.noise = 0.02;
    p.setup_seconds = 0.05;
    p.repeat_seconds = 0.01;
    t.points.push_back(p);
  }
  return t;
}

// Four tasks; the last one in the model's order holds nearly all of what tuning can gain, so
// that reaching 99% of the best latency means finding its best configuration.
std::shared_ptr<const Trace> skewed_trace() {
  auto trace = std::make_shared<Trace>();
  trace->model = "test";
  for (int i = 0; i < 3; ++i)
    trace->tasks.push_back(grid_task("small" + std::to_string(i), 1, 0.09, 0.1, 0.1));
  trace->tasks.push_back(grid_task("big", 2, 2.0, 30.0, 30.0));
  return trace;
}

SimulationOptions fast_options() {
  SimulationOptions o = default_simulation_options();
  o.tuner.slot_seconds = 2;
  o.tuner.search.annealing.chains = 16;
  o.tuner.search.annealing.steps = 10;
  o.scheduler_options.dynatune.belief.mcmc.steps = 100;
  o.scheduler_options.dynatune.belief.mcmc.samples = 50;
  return o;
}

TEST(TraceSpace, ProposesOnlyRecordedConfigs) {
  const TraceTask task = grid_task("t", 1, 1, 1, 1);
  const KnobSpace space = trace_space(task);
  std::set<Config> recorded;
  for (const TracePoint& p : task.points) recorded.insert(p.config);
  std::mt19937_64 rng(1);
  for (int i = 0; i < 500; ++i) {
    const Config c = space.random_config(rng);
    EXPECT_TRUE(recorded.count(c)) << config_to_json(c);
    EXPECT_TRUE(recorded.count(space.neighbor(c, rng)));
  }
}

TEST(TraceSpace, RefusesAConfigItsKnobsCannotHold) {
  TraceTask task = grid_task("t", 1, 1, 1, 1);
  task.points[0].config = {0, 16, 0, 0};  // grid.x has 16 values
  EXPECT_THROW(trace_space(task), std::invalid_argument);
  TraceTask gaps = grid_task("t", 1, 1, 1, 1);
  gaps.knobs[2].values = {1, 2, 8, 16};  // not a power-of-two range
  EXPECT_THROW(trace_space(gaps), std::invalid_argument);
}

TEST(TraceMeasurer, AnswersFromTheRecordWithSeededNoiseAndRecordedCost) {
  auto trace = std::make_shared<Trace>();
  trace->tasks.push_back(grid_task("t", 1, 1, 1, 1));
  TraceMeasurer a(trace, 0, 7), b(trace, 0, 7), other(trace, 0, 8);
  const FixedRepeats four(4);
  const std::vector<Config> batch = {{0, 2, 3, 0}, {0, 3, 1, 0}};
  const auto ra = a.measure(batch, four);
  const auto rb = b.measure({batch[0]}, four);  // alone: its noise does not depend on the batch
  ASSERT_TRUE(ra[0].ok());
  EXPECT_EQ(ra[0].seconds, rb[0].seconds);
  EXPECT_NE(ra[0].seconds, other.measure({batch[0]}, four)[0].seconds);
  EXPECT_NEAR(ra[0].cost_seconds, 0.05 + 4 * 0.01, 1e-12);
  for (const double s : ra[0].seconds) EXPECT_NEAR(s / 1.8e-3, 1, 0.1);
  EXPECT_EQ(ra[1].error, MeasureError::kRuntime);
  EXPECT_NEAR(ra[1].cost_seconds, 0.05, 1e-12);
  EXPECT_EQ(a.measure({{0, 0, 0, 5}}, four)[0].error, MeasureError::kCompile);  // not recorded
}

TEST(TraceMeasurer, ReplaysTheFirstCallCutOfALoweredTraceAtItsRecordedCost) {
  // grid (x=15, y=0) is recorded at 1 + 6 + 0.9 = 7.9x the task's best (x=0, y=3).
  const Config slow = {0, 15, 0, 0}, close = {0, 1, 3, 0};
  auto timed_first = std::make_shared<Trace>();
  timed_first->tasks.push_back(grid_task("t", 1, 1, 1, 1));
  auto lowered = std::make_shared<Trace>(*timed_first);
  lowered->warm_ups = 2;
  const AdaptiveEvaluator evaluator({}, 1e-3);
  const auto warm = TraceMeasurer(lowered, 0, 3).measure({slow, close}, evaluator);
  // Past 3x the best on its first warm-up call: one sample, cut short, the second warm-up and
  // the timed repeat not paid.
  ASSERT_TRUE(warm[0].ok());
  EXPECT_EQ(warm[0].seconds.size(), 1u);
  EXPECT_TRUE(warm[0].cut_short);
  EXPECT_NEAR(warm[0].cost_seconds, 0.05 - 0.01, 1e-12);
  EXPECT_NEAR(warm[0].seconds[0] / 7.9e-3, 1, 0.1);
  // A trace whose measurer timed its first call pays it as a repeat (the evaluator's 2x cut).
  const auto timed = TraceMeasurer(timed_first, 0, 3).measure({slow, close}, evaluator);
  EXPECT_EQ(timed[0].seconds, warm[0].seconds);  // the same draw
  EXPECT_NEAR(timed[0].cost_seconds, 0.05 + 0.01, 1e-12);
  // A candidate near the best is timed as before, draw for draw.
  EXPECT_EQ(warm[1].seconds, timed[1].seconds);
  EXPECT_EQ(warm[1].cost_seconds, timed[1].cost_seconds);
  EXPECT_GE(warm[1].seconds.size(), 2u);
}

TEST(TraceSimulation, DefaultBudgetIsAQuarterOfFinishingEveryTaskAndRunsOut) {
  SimulationOptions o = fast_options();
  o.trace = skewed_trace();
  o.scheduler = "round-robin";
  o.model.seed = 1;
  const double budget = default_trace_budget_seconds(*o.trace, o);
  // Finishing: the sequential scheduler on seed 0 with no budget, until all tasks finished.
  SimulationOptions unlimited = o;
  unlimited.scheduler = "sequential";
  unlimited.model.seed = 0;
  unlimited.tuner.budget_seconds = 1e9;
  unlimited.scheduler_options.sequential_trials_per_task = 1L << 40;
  const TuningReport finished = run_simulation(unlimited);
  EXPECT_EQ(finished.stop_reason, "all-tasks-finished");
  EXPECT_NEAR(budget, std::min(finished.tuning_seconds / 4, exhaustive_seconds(*o.trace, 2) / 3),
              1e-9);
  EXPECT_LE(budget, finished.tuning_seconds / 3);
  EXPECT_NEAR(trace_finishing_seconds(*o.trace, o), finished.tuning_seconds, 1e-9);
  const TuningReport r = run_simulation(o);
  EXPECT_EQ(r.stop_reason, "budget");
  EXPECT_GE(r.tuning_seconds, budget);
  int unfinished = 0;
  for (const TaskSummary& t : r.tasks) unfinished += !t.finished;
  EXPECT_GT(unfinished, 0);
  EXPECT_LT(r.final_model_seconds, r.initial_model_seconds);
}

TEST(TraceSimulation, DefaultSlotIsOneBatchOfTheMedianTask) {
  auto trace = std::make_shared<Trace>(*skewed_trace());
  // Make the tasks' measurements cost 1x, 2x, 3x and 10x: the median is between the middle two.
  for (size_t i = 0; i < trace->tasks.size(); ++i)
    for (TracePoint& p : trace->tasks[i].points) {
      const double scale = i == 3 ? 10.0 : static_cast<double>(i + 1);
      p.setup_seconds *= scale;
      p.repeat_seconds *= scale;
    }
  SimulationOptions o = fast_options();
  o.tuner.search.batch_size = 8;
  // Per task: 71 configurations at setup + 2 repeats (0.07 s), one that failed at setup only.
  const double batch = 8 * (71 * 0.07 + 0.05) / 72;
  EXPECT_NEAR(default_trace_slot_seconds(*trace, o), 2.5 * batch, 1e-9);
  o.tuner.adaptive_evaluator = false;
  o.tuner.fixed_repeats = 4;
  EXPECT_NEAR(default_trace_slot_seconds(*trace, o), 2.5 * 8 * (71 * 0.09 + 0.05) / 72, 1e-9);
  // A run without a slot gets it; one with a slot keeps its own.
  o = fast_options();
  o.trace = trace;
  o.tuner.slot_seconds = 0;
  EXPECT_NEAR(run_simulation(o).slot_seconds, 2.5 * batch, 1e-9);
  o.tuner.slot_seconds = 1.5;
  EXPECT_EQ(run_simulation(o).slot_seconds, 1.5);
  const Comparison c = compare_schedulers(
      {"round-robin"}, {0},
      [&] {
        SimulationOptions derived = o;
        derived.tuner.slot_seconds = 0;
        return derived;
      }(),
      1);
  EXPECT_NEAR(c.slot_seconds, 2.5 * batch, 1e-9);
}

TEST(TraceSimulation, TasksStartAtTheRecordedRuleAndStopOnAQuarterOfTheirRecording) {
  auto trace = std::make_shared<Trace>(*skewed_trace());
  trace->tasks[0].start = {0, 2, 3, 0};
  const std::vector<Task> tasks = make_trace_model(trace, 1);
  EXPECT_EQ(tasks[0].start, (Config{0, 2, 3, 0}));
  EXPECT_TRUE(tasks[1].start.empty());
  // 72 recorded configurations: 18 trials without improvement, not the run's 200.
  EXPECT_EQ(tasks[0].early_stop_trials, 18);
  TraceTask few = grid_task("few", 1, 1, 1, 1);
  few.points.resize(20);
  EXPECT_EQ(trace_early_stop_trials(few), 16);
  // A start that is not a recorded configuration is refused.
  trace->tasks[0].start = {1, 0, 0, 0};
  EXPECT_NO_THROW(trace_space(trace->tasks[0]));
  trace->tasks[0].start = {0, 0, 0, 5};  // flat.z is inactive under grid: not valid
  EXPECT_THROW(trace_space(trace->tasks[0]), std::invalid_argument);

  SimulationOptions o = fast_options();
  o.trace = trace;
  trace->tasks[0].start = {0, 15, 0, 0};  // the slowest grid configuration
  o.scheduler = "round-robin";
  o.tuner.budget_seconds = 1e9;
  const TuningReport r = run_simulation(o);
  EXPECT_EQ(r.stop_reason, "all-tasks-finished");
  // Tasks stopped on their flat tails, long before the run's 200 would have exhausted them.
  long trials = 0;
  for (const TaskSummary& t : r.tasks) trials += t.trials;
  EXPECT_LT(trials, 4 * 72);
}

TEST(TraceSimulation, IdenticalSeedsGiveIdenticalRuns) {
  SimulationOptions o = fast_options();
  o.trace = skewed_trace();
  o.model.seed = 3;
  const TuningReport a = run_simulation(o), b = run_simulation(o);
  ASSERT_EQ(a.curve.size(), b.curve.size());
  for (size_t i = 0; i < a.curve.size(); ++i) {
    EXPECT_EQ(a.curve[i].seconds, b.curve[i].seconds);
    EXPECT_EQ(a.curve[i].model_seconds, b.curve[i].model_seconds);
  }
  o.model.seed = 4;
  const TuningReport c = run_simulation(o);
  EXPECT_NE(c.final_model_seconds, a.final_model_seconds);
}

TEST(TraceComparison, DynaTuneReachesTheBestSoonerThanSequentialWhenOneTaskHoldsTheGain) {
  SimulationOptions o = fast_options();
  o.trace = skewed_trace();
  const Comparison c = compare_schedulers({"sequential", "dynatune"}, {0, 1, 2}, o, 2);
  ASSERT_EQ(c.rows.size(), 2u);
  const TraceTruth truth(*o.trace);
  EXPECT_GE(c.trace_reference_seconds, truth.optimum_model_seconds() * (1 - 1e-12));
  for (const ComparisonRun& r : c.runs) {
    EXPECT_GE(r.remeasured_final_seconds, c.trace_reference_seconds);
    EXPECT_EQ(r.report.stop_reason, "budget") << r.scheduler;
  }
  const ComparisonRow& sequential = c.rows[0];
  const ComparisonRow& dynatune = c.rows[1];
  EXPECT_EQ(sequential.unfinished_runs, 3);
  EXPECT_LT(dynatune.median_time_to_99, sequential.median_time_to_99);
  EXPECT_LE(dynatune.min_time_to_99, dynatune.median_time_to_99);
  EXPECT_LE(dynatune.median_time_to_99, dynatune.max_time_to_99);
  EXPECT_NE(comparison_table(c).find("| dynatune | "), std::string::npos);
}

// Variants compared on one seed set are scored against one given reference, not the best of
// their own runs: the runs are the same, only the times to 95%/99% move with the bar.
TEST(TraceComparison, AGivenReferenceReplacesTheBestOfTheRuns) {
  SimulationOptions o = fast_options();
  o.trace = skewed_trace();
  const Comparison own = compare_schedulers({"dynatune"}, {0}, o, 1);
  EXPECT_EQ(own.own_reference_seconds, own.trace_reference_seconds);
  const double lower = own.own_reference_seconds * 0.9;
  const Comparison given = compare_schedulers({"dynatune"}, {0}, o, 1, lower);
  EXPECT_EQ(given.trace_reference_seconds, lower);
  EXPECT_EQ(given.own_reference_seconds, own.own_reference_seconds);
  EXPECT_EQ(given.runs[0].remeasured_final_seconds, own.runs[0].remeasured_final_seconds);
  EXPECT_TRUE(std::isfinite(own.runs[0].time_to_99));
  EXPECT_FALSE(std::isfinite(given.runs[0].time_to_99));  // 1.11x above the bar at its end
}

}  // namespace
}  // namespace nimble::tuning
