// The tuner with several batches in flight: a fake pool that completes them out of order,
// loses some, or runs out of workers. Whatever the pool does, no config is measured twice and
// every batch that was submitted ends up recorded exactly once.
#include "tuning/measure/measure_pool.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <set>
#include <utility>

#include "test_tasks.h"
#include "tuning/scheduler/scheduler_factory.h"
#include "tuning/simulator/simulated_model.h"
#include "tuning/tuner/model_tuner.h"

namespace nimble::tuning {
namespace {

// Measures with the tasks' own measurers, but hands back a random one of the requests in
// flight; every `lose_every`-th request comes back without results (a lost worker's batch);
// after `workers_left_after` takes its capacity drops to 0.
class ShufflingPool : public MeasurePool {
 public:
  ShufflingPool(const std::vector<Task>& tasks, int capacity, uint64_t seed)
      : tasks_(tasks), capacity_(capacity), rng_(seed) {}
  int capacity() override { return taken_ >= workers_left_after ? 0 : capacity_; }
  void submit(MeasureRequest request) override {
    EXPECT_LT(static_cast<int>(queue_.size()), capacity_);
    queue_.push_back(std::move(request));
    max_in_flight = std::max(max_in_flight, static_cast<int>(queue_.size()));
    ++submitted;
  }
  MeasuredRequest take() override {
    EXPECT_FALSE(queue_.empty());
    std::uniform_int_distribution<size_t> pick(0, queue_.size() - 1);
    const size_t i = pick(rng_);
    if (i != 0) ++out_of_order;
    MeasureRequest request = std::move(queue_[i]);
    queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(i));
    MeasuredRequest out{request.ticket, {}, 2.0};
    if (lose_every == 0 || ++taken_ % lose_every != 0)
      out.results = tasks_[request.task].measurer->measure(request.configs,
                                                           *make_repeat_policy(request.repeats));
    else
      ++lost;
    if (lose_every == 0) ++taken_;
    return out;
  }

  int lose_every = 0;
  long workers_left_after = 1L << 40;
  int max_in_flight = 0;
  long submitted = 0;
  long out_of_order = 0;
  long lost = 0;

 private:
  const std::vector<Task>& tasks_;
  int capacity_;
  std::mt19937_64 rng_;
  std::vector<MeasureRequest> queue_;
  long taken_ = 0;
};

// Every config recorded once, and as many records as the report's trials.
void expect_each_config_once(const TuningDatabase& db, const std::vector<Task>& tasks,
                             const TuningReport& r) {
  long records = 0;
  for (const Task& t : tasks) {
    std::set<Config> seen;
    for (const auto& rec : db.records(t.signature, "cpu")) {
      EXPECT_TRUE(seen.insert(rec.config).second) << t.name << " measured a config twice";
      ++records;
    }
  }
  EXPECT_EQ(records, r.trials);
  EXPECT_EQ(db.count(), r.trials);
}

TEST(MeasurePool, OutOfOrderCompletionsMeasureNothingTwiceAndRecordEverything) {
  TuningDatabase db(testing::temp_db("pool", "shuffle"));
  ModelTuner tuner(testing::three_tasks(), testing::small_options(120), &db);
  ShufflingPool pool(tuner.tasks(), 4, 7);
  const auto scheduler = make_scheduler("round-robin", {});
  const TuningReport r = tuner.run(*scheduler, {}, &pool);
  EXPECT_EQ(r.stop_reason, "budget");
  EXPECT_EQ(r.trials, 120);  // the trial budget counts batches in flight: never exceeded
  EXPECT_EQ(pool.max_in_flight, 4);
  EXPECT_GT(pool.out_of_order, 0);
  expect_each_config_once(db, tuner.tasks(), r);
  EXPECT_LT(r.final_model_seconds, r.initial_model_seconds);
  EXPECT_GT(r.measure_seconds, 0);
  EXPECT_LE(r.cold_seconds + r.failed_seconds, r.measure_seconds);
}

TEST(MeasurePool, OneBatchInFlightGivesTheRunWithoutAPool) {
  const auto run = [](bool with_pool) {
    ModelTuner tuner(testing::three_tasks(), testing::small_options(120));
    ShufflingPool pool(tuner.tasks(), 1, 3);
    const auto scheduler = make_scheduler("dynatune", {});
    return tuner.run(*scheduler, {}, with_pool ? &pool : nullptr);
  };
  const TuningReport a = run(false);
  const TuningReport b = run(true);
  ASSERT_EQ(a.curve.size(), b.curve.size());
  for (size_t i = 0; i < a.curve.size(); ++i) {
    EXPECT_EQ(a.curve[i].seconds, b.curve[i].seconds);
    EXPECT_EQ(a.curve[i].model_seconds, b.curve[i].model_seconds);
  }
  EXPECT_EQ(a.slots, b.slots);
}

TEST(MeasurePool, ALostBatchIsRecordedAsFailedAndTheRunGoesOn) {
  TuningDatabase db(testing::temp_db("pool", "lost"));
  ModelTuner tuner(testing::three_tasks(), testing::small_options(120), &db);
  ShufflingPool pool(tuner.tasks(), 3, 11);
  pool.lose_every = 4;
  const auto scheduler = make_scheduler("round-robin", {});
  const TuningReport r = tuner.run(*scheduler, {}, &pool);
  EXPECT_EQ(r.trials, 120);
  EXPECT_GT(pool.lost, 0);
  expect_each_config_once(db, tuner.tasks(), r);
  long failed = 0;
  for (const Task& t : tuner.tasks())
    for (const auto& rec : db.records(t.signature, "cpu"))
      if (rec.result.message == "measurer failed for the whole batch") ++failed;
  EXPECT_GE(failed, pool.lost);  // a lost batch's configs are all failures
  EXPECT_GT(r.failed_seconds, 0);
}

TEST(MeasurePool, APoolWithoutWorkersEndsTheRunAfterTakingBackWhatIsInFlight) {
  TuningDatabase db(testing::temp_db("pool", "no_workers"));
  ModelTuner tuner(testing::three_tasks(), testing::small_options(120), &db);
  ShufflingPool pool(tuner.tasks(), 3, 5);
  pool.workers_left_after = 5;
  const auto scheduler = make_scheduler("round-robin", {});
  const TuningReport r = tuner.run(*scheduler, {}, &pool);
  EXPECT_EQ(r.stop_reason, "no-workers");
  EXPECT_EQ(r.trials, pool.submitted * 8);  // every submitted batch came back and was recorded
  expect_each_config_once(db, tuner.tasks(), r);
}

TEST(MeasurePool, ASmallSpaceInFlightWaitsInsteadOfFinishing) {
  // 3 configs, 2 per batch, 4 batches in flight: the second batch can only get one config,
  // the third none until results are back; the task is exhausted after exactly 3 trials.
  Task t;
  t.name = "tiny";
  t.signature = "test/tiny";
  t.space.add_knob(Knob::categorical("mode", {"a", "b", "c"}));
  t.flops = 1e9;
  t.measurer = std::make_shared<testing::FormulaMeasurer>(
      [](const Config& c) { return 1e-3 * (1 + c[0]); }, nullptr, 0.0, 1);
  TunerOptions o = testing::small_options(120);
  o.search.batch_size = 2;
  o.budget_trials = 0;
  TuningDatabase db(testing::temp_db("pool", "tiny"));
  ModelTuner tuner({t}, o, &db);
  ShufflingPool pool(tuner.tasks(), 4, 2);
  const auto scheduler = make_scheduler("round-robin", {});
  const TuningReport r = tuner.run(*scheduler, {}, &pool);
  EXPECT_EQ(r.stop_reason, "all-tasks-finished");
  EXPECT_EQ(r.trials, 3);
  expect_each_config_once(db, tuner.tasks(), r);
}

TEST(SimulatedModelMeasurer, ABatchIsTimedTheSameOnAnyWorkerInAnyOrder) {
  SimulatedModelMeasurer first(3, 2, 1000), second(3, 2, 1000);
  const std::string signature = first.signatures()[1];
  const std::vector<Config> x = {{0, 1, 2, 0, 1, 0}, {1, 1, 1, 1, 1, 1}};
  const std::vector<Config> y = {{2, 2, 0, 1, 0, 1}, {3, 0, 1, 0, 2, 0}};
  RepeatSettings fixed;
  fixed.adaptive = false;
  fixed.fixed_repeats = 3;
  first.measure(signature, x, fixed);
  const auto on_first = first.measure(signature, y, fixed);
  const auto on_second = second.measure(signature, y, fixed);  // without x before it
  ASSERT_EQ(on_first.size(), on_second.size());
  for (size_t i = 0; i < on_first.size(); ++i) {
    EXPECT_EQ(on_first[i].seconds, on_second[i].seconds);
    EXPECT_EQ(on_first[i].error, on_second[i].error);
  }
}

}  // namespace
}  // namespace nimble::tuning
