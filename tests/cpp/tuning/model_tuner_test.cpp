#include "tuning/tuner/model_tuner.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "test_tasks.h"
#include "tuning/scheduler/dynatune_scheduler.h"
#include "tuning/scheduler/scheduler_factory.h"
#include "tuning/simulator/simulation.h"

namespace nimble::tuning {
namespace {

TEST(ModelTuner, SpendsTheBudgetAndWritesEveryMeasurement) {
  TuningDatabase db(testing::temp_db("tuner", "budget"));
  ModelTuner tuner(testing::three_tasks(), testing::small_options(96), &db);
  const auto scheduler = make_scheduler("round-robin", {});
  long events = 0;
  const TuningReport r = tuner.run(*scheduler, [&](const ProgressEvent& e) {
    ++events;
    EXPECT_EQ(e.slot, events);
    EXPECT_FALSE(e.task.empty());
  });
  EXPECT_EQ(r.stop_reason, "budget");
  EXPECT_EQ(r.trials, 96);
  EXPECT_EQ(db.count(), 96);
  EXPECT_EQ(events, r.slots);
  long task_trials = 0;
  for (const auto& t : r.tasks) task_trials += t.trials;
  EXPECT_EQ(task_trials, 96);
  // The curve starts at the baseline model, never rises, and its time only grows.
  ASSERT_GE(r.curve.size(), 2u);
  EXPECT_DOUBLE_EQ(r.curve.front().model_seconds, r.initial_model_seconds);
  for (size_t i = 1; i < r.curve.size(); ++i) {
    EXPECT_LE(r.curve[i].model_seconds, r.curve[i - 1].model_seconds);
    EXPECT_GT(r.curve[i].seconds, r.curve[i - 1].seconds);
  }
  EXPECT_LT(r.final_model_seconds, r.initial_model_seconds);
  EXPECT_FALSE(r.epochs.empty());
}

TEST(ModelTuner, ResumesFromTheDatabaseWithoutMeasuringAConfigTwice) {
  const std::string path = testing::temp_db("tuner", "resume");
  TunerOptions o = testing::small_options(96);
  double first_final = 0;
  {
    TuningDatabase db(path);
    ModelTuner tuner(testing::three_tasks(), o, &db);
    const auto s = make_scheduler("round-robin", {});
    first_final = tuner.run(*s).final_model_seconds;
  }
  TuningDatabase db(path);
  o.seed = 99;
  ModelTuner tuner(testing::three_tasks(), o, &db);
  const auto s = make_scheduler("round-robin", {});
  const TuningReport r = tuner.run(*s);
  EXPECT_DOUBLE_EQ(r.initial_model_seconds, first_final);  // the bests came back
  EXPECT_EQ(db.count(), 192);
  // The shares are of this run's measurement time, as its seconds are: the records it resumed
  // from count in neither.
  ASSERT_GT(r.measure_seconds, 0);
  EXPECT_DOUBLE_EQ(r.cold_time_share, r.cold_seconds / r.measure_seconds);
  EXPECT_DOUBLE_EQ(r.failed_time_share, r.failed_seconds / r.measure_seconds);
  for (const auto& sig : db.signatures("cpu")) {
    std::set<Config> configs;
    for (const auto& rec : db.records(sig, "cpu"))
      EXPECT_TRUE(configs.insert(rec.config).second) << sig << " measured a config twice";
  }
}

// One good region (8 of 64 configs 5x faster than the rest): once the model has found it,
// everything left is cold, and the task finishes instead of measuring the cold rest.
TEST(ModelTuner, FinishesATaskWhenEverythingLeftIsCold) {
  auto run = [](bool finish_when_all_cold) {
    Task t = testing::bowl_task("a", 1e9, 1, 1);
    t.space = KnobSpace({Knob::integer_range("a", 0, 63)});
    t.measurer = std::make_shared<testing::FormulaMeasurer>(
        [](const Config& c) { return 1e-3 * (c[0] < 8 ? 1 : 5); }, nullptr, 0.01, 4);
    TunerOptions o = testing::small_options(96);
    o.budget_trials = 0;
    o.early_stop_trials = 1000;
    o.search.min_records_for_model = 16;
    o.search.random_fraction = 0;
    o.search.finish_when_all_cold = finish_when_all_cold;
    ModelTuner tuner({t}, o);
    const auto s = make_scheduler("round-robin", {});
    return tuner.run(*s);
  };
  const TuningReport on = run(true);
  const TuningReport off = run(false);
  EXPECT_EQ(off.tasks[0].trials, 64);  // the whole space
  EXPECT_LT(on.tasks[0].trials, off.tasks[0].trials);
  EXPECT_TRUE(on.tasks[0].finished);
  EXPECT_NEAR(on.final_model_seconds, 1e-3, 1e-4);
  EXPECT_LT(on.cold_time_share, off.cold_time_share);
}

TEST(ModelTuner, StopsWhenEveryTaskIsFinished) {
  std::vector<Task> tasks = testing::three_tasks();
  for (auto& t : tasks) {
    t.space = KnobSpace({Knob::integer_range("a", 0, 3), Knob::categorical("b", {"p", "q"})});
    t.measurer = std::make_shared<testing::FormulaMeasurer>(
        [](const Config& c) { return 1e-3 * (1 + c[0]); }, nullptr, 0.01, 4);
  }
  TunerOptions o = testing::small_options(96);
  o.budget_trials = 0;
  o.search.min_records_for_model = 4;
  ModelTuner tuner(tasks, o);
  const auto s = make_scheduler("dynatune", {});
  const TuningReport r = tuner.run(*s);
  EXPECT_EQ(r.stop_reason, "all-tasks-finished");
  for (const auto& t : r.tasks) {
    EXPECT_EQ(t.trials, 8);  // the whole space, once
    EXPECT_TRUE(t.finished);
  }
}

TEST(ModelTuner, FinishesATaskWithoutImprovementAfterTheSetNumberOfTrials) {
  Task flat = testing::bowl_task("flat", 1e9, 1, 0);
  flat.measurer = std::make_shared<testing::FormulaMeasurer>([](const Config&) { return 1e-3; },
                                                             nullptr, 0.0, 1);
  TunerOptions o = testing::small_options(96);
  o.budget_trials = 0;
  o.early_stop_trials = 24;
  ModelTuner tuner({flat}, o);
  const auto s = make_scheduler("sequential", {});
  const TuningReport r = tuner.run(*s);
  EXPECT_EQ(r.stop_reason, "all-tasks-finished");
  // The first trial sets the best, 24 more do not improve it; the check runs after each batch of 8.
  EXPECT_EQ(r.tasks[0].trials, 32);
}

class ThrowingMeasurer : public Measurer {
 public:
  std::vector<MeasureResult> measure(const std::vector<Config>&, const RepeatPolicy&) override {
    throw std::runtime_error("device lost");
  }
};

TEST(ModelTuner, FailuresAreRecordedAndNeverStopTheTuner) {
  std::vector<Task> tasks = testing::three_tasks();
  tasks[1].measurer = std::make_shared<ThrowingMeasurer>();
  TuningDatabase db(testing::temp_db("tuner", "failures"));
  ModelTuner tuner(tasks, testing::small_options(96), &db);
  const auto s = make_scheduler("round-robin", {});
  const TuningReport r = tuner.run(*s);
  EXPECT_EQ(r.stop_reason, "budget");
  EXPECT_EQ(r.tasks[1].failures, r.tasks[1].trials);
  EXPECT_GT(r.tasks[1].trials, 0);
  EXPECT_GT(r.tasks[0].trials - r.tasks[0].failures, 0);
  for (const auto& rec : db.records("test/b", "cpu"))
    EXPECT_EQ(rec.result.error, MeasureError::kRuntime);
}

// Every config takes `seconds`, without noise; counts the timed repeats the policy asked for.
class ConstantMeasurer : public Measurer {
 public:
  explicit ConstantMeasurer(double seconds) : seconds_(seconds) {}
  std::vector<MeasureResult> measure(const std::vector<Config>& batch,
                                     const RepeatPolicy& repeats) override {
    std::vector<MeasureResult> out(batch.size());
    for (MeasureResult& r : out) {
      time_with_policy(
          repeats,
          [&] {
            return TimedRepeat{seconds_, seconds_};
          },
          r);
      r.cost_seconds = seconds_ * static_cast<double>(r.seconds.size());
      repeats_.push_back(static_cast<int>(r.seconds.size()));
    }
    return out;
  }
  const std::vector<int>& repeats() const { return repeats_; }

 private:
  double seconds_;
  std::vector<int> repeats_;
};

// Before a task has a best, its baseline kernel is what a candidate must beat: one far
// slower than it is cut after its first repeat (it can never be bound), while without a
// baseline the first batch is timed to precision.
TEST(ModelTuner, CandidatesFarSlowerThanTheBaselineAreCutFromTheFirstBatchOn) {
  for (const bool with_baseline : {true, false}) {
    std::vector<Task> tasks = testing::three_tasks();
    tasks.resize(1);
    auto measurer = std::make_shared<ConstantMeasurer>(1e-2);
    tasks[0].measurer = measurer;
    tasks[0].baseline_seconds = with_baseline ? 1e-3 : std::numeric_limits<double>::infinity();
    TunerOptions o = testing::small_options(8);
    o.adaptive_evaluator = true;
    ModelTuner tuner(tasks, o, nullptr);
    const auto s = make_scheduler("round-robin", {});
    const TuningReport r = tuner.run(*s);
    ASSERT_EQ(measurer->repeats().size(), 8u);
    for (const int n : measurer->repeats()) EXPECT_EQ(n == 1, with_baseline) << n;
    EXPECT_EQ(r.cut_short, with_baseline ? 8 : 0);
  }
}

// Logs every config it is asked to time, in call order, before its inner measurer times it
// (or throws): the ground truth of what was measured.
class LoggingMeasurer : public Measurer {
 public:
  LoggingMeasurer(std::string task, std::shared_ptr<Measurer> inner,
                  std::vector<std::pair<std::string, Config>>& log)
      : task_(std::move(task)), inner_(std::move(inner)), log_(log) {}
  std::vector<MeasureResult> measure(const std::vector<Config>& batch,
                                     const RepeatPolicy& repeats) override {
    for (const Config& c : batch) log_.emplace_back(task_, c);
    return inner_->measure(batch, repeats);
  }

 private:
  std::string task_;
  std::shared_ptr<Measurer> inner_;
  std::vector<std::pair<std::string, Config>>& log_;
};

using Measured = std::vector<std::pair<std::string, Config>>;

void log_batch(Measured& log, const MeasuredBatch& b) {
  for (const Config& c : b.configs) log.emplace_back(b.task.name, c);
}

TEST(ModelTuner, EveryMeasurementReachesTheCostModelAndTheDatabaseOnceInOrder) {
  Measured measured;
  std::vector<Task> tasks = testing::three_tasks();
  // "a" fails to compile a third of its space, "b" throws on every batch, "c" always works.
  tasks[0].measurer = std::make_shared<testing::FormulaMeasurer>(
      [](const Config& c) { return 1e-3 * (1 + c[0] + c[1]); },
      [](const Config& c) { return c[2] == 0; }, 0.02, 5);
  tasks[1].measurer = std::make_shared<ThrowingMeasurer>();
  for (Task& t : tasks)
    t.measurer = std::make_shared<LoggingMeasurer>(t.name, t.measurer, measured);
  TuningDatabase db(testing::temp_db("tuner", "callbacks"));
  TunerOptions o = testing::small_options(96);
  // "b"'s batches cost no tuning time, so its slot lasts until it finishes.
  o.early_stop_trials = 40;
  o.budget_trials = 160;

  // The default callbacks, each wrapped to log what it is handed and to check that it took the
  // batch in: the cost-model update into the task's search, the database write into the database.
  const std::vector<MeasureCallback> defaults = default_measure_callbacks(&db, o.run, o.device);
  ASSERT_EQ(defaults.size(), 2u);
  Measured to_cost_model, to_database;
  std::map<MeasureError, long> errors;
  const MeasureCallback cost_model = [&, update = defaults[0]](const MeasuredBatch& b) {
    const long before = b.search.trials();
    update(b);
    EXPECT_EQ(b.search.trials(), before + static_cast<long>(b.configs.size()));
    for (const Config& c : b.configs) EXPECT_TRUE(b.search.measured(c));
    log_batch(to_cost_model, b);
  };
  const MeasureCallback database = [&, write = defaults[1]](const MeasuredBatch& b) {
    ASSERT_EQ(b.configs.size(), b.results.size());
    // The cost model has this batch already, the database every earlier one.
    EXPECT_EQ(to_cost_model.size(), to_database.size() + b.configs.size());
    EXPECT_EQ(db.count(), static_cast<long>(to_database.size()));
    const size_t before = db.records(b.task.signature, o.device).size();
    write(b);
    const std::vector<DatabaseRecord> rows = db.records(b.task.signature, o.device);
    ASSERT_EQ(rows.size(), before + b.configs.size());
    for (size_t i = 0; i < b.configs.size(); ++i) {
      EXPECT_EQ(rows[before + i].config, b.configs[i]);
      EXPECT_EQ(rows[before + i].result.error, b.results[i].error);
      EXPECT_EQ(rows[before + i].result.seconds, b.results[i].seconds);
      ++errors[b.results[i].error];
    }
    log_batch(to_database, b);
  };
  ModelTuner tuner(tasks, o, &db, {cost_model, database});
  const auto s = make_scheduler("round-robin", {});
  const TuningReport r = tuner.run(*s);

  EXPECT_EQ(to_cost_model, measured);
  EXPECT_EQ(to_database, measured);
  EXPECT_EQ(r.trials, static_cast<long>(measured.size()));
  EXPECT_GT(errors[MeasureError::kNone], 0);
  EXPECT_GT(errors[MeasureError::kCompile], 0);
  for (const TaskSummary& t : r.tasks) EXPECT_GT(t.trials, 0) << t.name;
  EXPECT_EQ(errors[MeasureError::kRuntime], r.tasks[1].trials);
}

TEST(ModelTuner, SurveyStopEndsTheRunAtTheGoal) {
  TunerOptions o = testing::small_options(96);
  o.budget_trials = 0;
  o.survey.goal_seconds = 1.0;  // any latency meets it after the first epoch
  ModelTuner tuner(testing::three_tasks(), o);
  const auto s = make_scheduler("round-robin", {});
  const TuningReport r = tuner.run(*s);
  EXPECT_EQ(r.stop_reason, "goal");
  EXPECT_EQ(r.epochs.size(), 1u);
  EXPECT_EQ(r.slots, 3);
}

// Every config of these tasks times the same, so a search's second batch never improves on
// its first. A candidate costs about 1.1 s of tuning time, a batch of 8 about 9 s: a whole
// 40 s slot takes four or more batches.
std::vector<Task> flat_tasks() {
  std::vector<Task> tasks = testing::three_tasks();
  for (Task& t : tasks)
    t.measurer = std::make_shared<testing::FormulaMeasurer>([](const Config&) { return 1e-3; },
                                                            nullptr, 0.0, 1);
  return tasks;
}

TunerOptions forty_second_slots() {
  TunerOptions o = testing::small_options(0);
  o.slot_seconds = 40;
  o.budget_seconds = 200;
  return o;
}

TEST(ModelTuner, AWarmUpSlotEndsAtItsFirstBatchWithoutImprovement) {
  const auto first_slot_trials = [](bool ends_when_flat) {
    std::vector<Task> tasks = flat_tasks();
    TunerOptions o = forty_second_slots();
    DynaTuneOptions d;
    d.warm_up_ends_when_flat = ends_when_flat;
    d.belief.mcmc.steps = 50;
    d.belief.mcmc.samples = 20;
    DynaTuneScheduler s(d, 0);
    std::vector<long> trials;  // each task's trials after its first slot, in warm-up order
    ModelTuner(tasks, o).run(s, [&](const ProgressEvent& e) {
      if (trials.size() < 3) trials.push_back(e.task_trials);
    });
    return trials;
  };
  EXPECT_EQ(first_slot_trials(true), (std::vector<long>{16, 16, 16}));
  for (const long t : first_slot_trials(false)) EXPECT_GE(t, 32);
}

// Ansor's task scheduler decides after every round, one batch of the task's search
// (continue_search_one_round), the warm-up round too; a 40 s slot holds four batches here.
TEST(ModelTuner, TheGradientSchedulersSlotsAreOneBatchEach) {
  const auto trials_per_slot = [](const std::string& scheduler) {
    const TuningReport r =
        ModelTuner(flat_tasks(), forty_second_slots()).run(*make_scheduler(scheduler, {}));
    return static_cast<double>(r.trials) / static_cast<double>(r.slots);
  };
  EXPECT_EQ(trials_per_slot("gradient"), 8.0);
  EXPECT_GE(trials_per_slot("round-robin"), 24.0);
}

TEST(Simulation, EverySchedulerImprovesTheSimulatedModel) {
  SimulationOptions o = default_simulation_options();
  o.model.tasks = 4;
  o.model.seed = 3;
  o.trials_per_task = 24;
  o.tuner.search.annealing.chains = 16;
  o.tuner.search.annealing.steps = 10;
  o.scheduler_options.dynatune.belief.mcmc.steps = 100;
  o.scheduler_options.dynatune.belief.mcmc.samples = 50;
  const Comparison c = compare_schedulers(scheduler_names(), {3}, o, 2);
  ASSERT_EQ(c.rows.size(), scheduler_names().size());
  for (const auto& run : c.runs) {
    EXPECT_EQ(run.report.trials, 96) << run.scheduler;
    EXPECT_LT(run.report.final_model_seconds, run.report.initial_model_seconds) << run.scheduler;
    EXPECT_LE(run.time_to_95, run.time_to_99);
  }
  const std::string table = comparison_table(c);
  for (const auto& name : scheduler_names())
    EXPECT_NE(table.find("| " + name + " |"), std::string::npos);
  EXPECT_NE(curve_to_csv(c.runs[0].report.curve).find("seconds,trials,model_ms\n0,0,"),
            std::string::npos);
}

TEST(TimeToReach, FindsTheFirstPointAtOrBelowTheLatency) {
  const std::vector<CurvePoint> curve = {{0, 0, 10}, {5, 8, 6}, {9, 16, 4}};
  EXPECT_DOUBLE_EQ(time_to_reach(curve, 6), 5);
  EXPECT_DOUBLE_EQ(time_to_reach(curve, 10), 0);
  EXPECT_TRUE(std::isinf(time_to_reach(curve, 3)));
}

}  // namespace
}  // namespace nimble::tuning
