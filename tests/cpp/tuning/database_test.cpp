#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "test_tasks.h"
#include "tuning/database/json_lines.h"
#include "tuning/database/tuning_database.h"
#include "tuning/scheduler/round_robin_scheduler.h"
#include "tuning/tuner/model_tuner.h"

namespace nimble::tuning {
namespace {

DatabaseRecord record(const std::string& sig, Config c, std::vector<double> s,
                      MeasureError e = MeasureError::kNone) {
  DatabaseRecord r;
  r.run = "r1";
  r.signature = sig;
  r.device = "cpu";
  r.config = std::move(c);
  r.result.seconds = std::move(s);
  r.result.error = e;
  r.result.message = e == MeasureError::kNone ? "" : "boom \"quoted\"\nline";
  r.result.cost_seconds = 1.5;
  r.recorded_at = 1700000000.25;
  return r;
}

TEST(TuningDatabase, StoresQueriesAndFindsTheBest) {
  TuningDatabase db(testing::temp_db("tuning", "basic"));
  db.append({record("conv", {1, 2}, {3e-3, 3.2e-3}), record("conv", {2, 2}, {1e-3, 1.1e-3}),
             record("conv", {0, 0}, {}, MeasureError::kCompile), record("dense", {5}, {2e-3})});
  db.append({record("conv", {1, 1}, {5e-4}, MeasureError::kTimeout)});
  EXPECT_EQ(db.count(), 5);
  const auto conv = db.records("conv", "cpu");
  ASSERT_EQ(conv.size(), 4u);
  EXPECT_EQ(conv[0].config, (Config{1, 2}));
  EXPECT_EQ(conv[2].result.error, MeasureError::kCompile);
  EXPECT_EQ(conv[2].result.message, "boom \"quoted\"\nline");
  const auto best = db.best("conv", "cpu");
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->config, (Config{2, 2}));  // the timeout's short time does not count
  EXPECT_FALSE(db.best("conv", "gpu").has_value());
  EXPECT_EQ(db.signatures("cpu"), (std::vector<std::string>{"conv", "dense"}));
}

TEST(JsonLines, RoundTripsEveryField) {
  const DatabaseRecord r =
      record("sig \\ \"x\"", {3, 0, 7}, {1.25e-4, 1.5e-4}, MeasureError::kRuntime);
  const DatabaseRecord back = from_json_line(to_json_line(r));
  EXPECT_EQ(back.run, r.run);
  EXPECT_EQ(back.signature, r.signature);
  EXPECT_EQ(back.device, r.device);
  EXPECT_EQ(back.config, r.config);
  EXPECT_EQ(back.result.seconds, r.result.seconds);
  EXPECT_EQ(back.result.error, r.result.error);
  EXPECT_EQ(back.result.message, r.result.message);
  EXPECT_DOUBLE_EQ(back.result.cost_seconds, r.result.cost_seconds);
  EXPECT_DOUBLE_EQ(back.recorded_at, r.recorded_at);
  EXPECT_THROW(from_json_line("{\"run\":\"x\"}"), std::invalid_argument);
  EXPECT_THROW(from_json_line("not json"), std::invalid_argument);
}

// Lines as the hand-written writer before nlohmann-json wrote them: a non-finite time as null,
// cut_short as 0/1, and (older still) no cost, cut_short or recorded_at at all.
TEST(JsonLines, ReadsLinesTheOldWriterWrote) {
  const DatabaseRecord r = from_json_line(
      "{\"run\":\"r1\",\"signature\":\"conv \\\"a\\\"\",\"device\":\"cpu\",\"config\":[1,0,12],"
      "\"seconds\":[0.00012500000000000001,null],\"error\":\"none\",\"message\":\"tab\\there\","
      "\"cost_seconds\":0.5,\"cut_short\":1,\"recorded_at\":1700000000.25}");
  EXPECT_EQ(r.run, "r1");
  EXPECT_EQ(r.signature, "conv \"a\"");
  EXPECT_EQ(r.config, (Config{1, 0, 12}));
  ASSERT_EQ(r.result.seconds.size(), 2u);
  EXPECT_DOUBLE_EQ(r.result.seconds[0], 1.25e-4);
  EXPECT_TRUE(std::isnan(r.result.seconds[1]));
  EXPECT_EQ(r.result.message, "tab\there");
  EXPECT_TRUE(r.result.cut_short);
  EXPECT_DOUBLE_EQ(r.recorded_at, 1700000000.25);
  const DatabaseRecord oldest = from_json_line(
      "{\"run\":\"r\",\"signature\":\"s\",\"device\":\"cpu\",\"config\":[],\"seconds\":[],"
      "\"error\":\"compile\",\"message\":\"\"}");
  EXPECT_EQ(oldest.result.error, MeasureError::kCompile);
  EXPECT_FALSE(oldest.result.cut_short);
  EXPECT_EQ(oldest.recorded_at, 0);
  EXPECT_THROW(
      from_json_line("{\"run\":\"r\",\"signature\":\"s\",\"device\":\"cpu\",\"config\":[0.5],"
                     "\"seconds\":[],\"error\":\"none\",\"message\":\"\"}"),
      std::invalid_argument);
}

TEST(TuningDatabase, ExportsAndImportsJsonLines) {
  TuningDatabase a(testing::temp_db("tuning", "export_a"));
  a.append({record("conv", {1, 2}, {3e-3}), record("conv", {0, 0}, {}, MeasureError::kCompile)});
  const std::string file = testing::temp_db("tuning", "export_file") + ".jsonl";
  EXPECT_EQ(a.export_json_lines(file), 2);
  TuningDatabase b(testing::temp_db("tuning", "export_b"));
  EXPECT_EQ(b.import_json_lines(file), 2);
  const auto records = b.records("conv", "cpu");
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(to_json_line(records[0]), to_json_line(a.records("conv", "cpu")[0]));
  std::ofstream(file, std::ios::app) << "{broken\n";
  try {
    b.import_json_lines(file);
    FAIL() << "a broken line must be refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(":3:"), std::string::npos) << e.what();
  }
  EXPECT_EQ(b.count(), 2);  // nothing of the broken file was imported
}

// Sleeps per candidate so that a tuning run is still going when the test kills it.
class SlowMeasurer : public Measurer {
 public:
  std::vector<MeasureResult> measure(const std::vector<Config>& batch,
                                     const RepeatPolicy&) override {
    std::vector<MeasureResult> out(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      out[i].seconds = {1e-3 * (1 + batch[i][0])};
      out[i].cost_seconds = 1;
    }
    return out;
  }
};

TEST(TuningDatabase, AKilledTuningRunLeavesWholeBatchesInAReadableDatabase) {
  const std::string path = testing::temp_db("tuning", "killed");
  const int batch = 8;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    TuningDatabase db(path);
    Task task = testing::bowl_task("killed", 1e9, 1, 0);
    task.space = KnobSpace({Knob::integer_range("a", 0, 999), Knob::integer_range("b", 0, 999)});
    task.measurer = std::make_shared<SlowMeasurer>();
    TunerOptions o;
    o.search.batch_size = batch;
    o.search.min_records_for_model = 1 << 30;  // random search: the test is about the database
    o.early_stop_trials = 0;
    o.survey.stop_on_rate = false;
    ModelTuner tuner({task}, o, &db);
    RoundRobinScheduler scheduler;
    tuner.run(scheduler);  // runs until killed
    ::_exit(0);
  }
  // Wait for several committed batches, then kill the run mid-flight.
  long seen = 0;
  for (int i = 0; i < 2000 && seen < 5 * batch; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    try {
      if (std::filesystem::exists(path)) seen = TuningDatabase(path).count();
    } catch (const std::exception&) {
      // The child may still be creating the schema.
    }
  }
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the tuning run ended before it was killed";
  ASSERT_GE(seen, 5 * batch);

  TuningDatabase db(path);
  const auto records = db.records("test/killed", "cpu");
  EXPECT_GE(static_cast<long>(records.size()), seen);
  EXPECT_EQ(records.size() % batch, 0u) << "a batch was committed in part";
  std::set<Config> configs;
  for (const auto& r : records) {
    EXPECT_TRUE(r.result.ok());
    configs.insert(r.config);
  }
  EXPECT_EQ(configs.size(), records.size());
  EXPECT_TRUE(db.best("test/killed", "cpu").has_value());
  // Still writable after the crash.
  db.append({record("after", {1}, {1e-3})});
  EXPECT_EQ(db.count(), static_cast<long>(records.size()) + 1);
}

}  // namespace
}  // namespace nimble::tuning
