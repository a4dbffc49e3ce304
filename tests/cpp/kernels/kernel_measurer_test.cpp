// The measurer never lets a broken candidate win: build failures, exceptions and wrong
// results are failed measurements with their message; good candidates get timings.
#include "csrc/kernels/kernel_measurer.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "tests/cpp/kernels/random_convs.h"
#include "tuning/measure/adaptive_evaluator.h"

namespace nimble::kernels {
namespace {

// A family whose knob decides how its kernel misbehaves.
class FaultyFamily : public KernelFamily {
 public:
  std::string name() const override { return "faulty"; }
  bool supports(const TunableOp&) const override { return true; }
  std::vector<tuning::Knob> knobs(const TunableOp&) const override {
    return {tuning::Knob::categorical("mode", {"right", "wrong", "throws", "no_build", "layout"})};
  }
  std::unique_ptr<TunedKernel> build(const TunableOp& op, const KnobValues& k) const override {
    const std::string mode = k.label("mode");
    if (mode == "no_build") throw std::runtime_error("cannot build this");
    return std::make_unique<Kernel>(op, mode);
  }

 private:
  class Kernel : public TunedKernel {
   public:
    Kernel(TunableOp op, std::string mode) : op_(std::move(op)), mode_(std::move(mode)) {}
    at::Tensor run(at::TensorList operands) const override {
      if (mode_ == "throws") throw std::runtime_error("kernel crashed");
      at::Tensor y = op_.aten(operands);
      if (mode_ == "wrong") y.view(-1)[0] += 1e-2 * (1 + y.abs().max().item<float>());
      if (mode_ == "layout") y = y.contiguous(at::MemoryFormat::ChannelsLast).clone();
      return y;
    }

   private:
    TunableOp op_;
    std::string mode_;
  };
};

TEST(KernelMeasurer, FailuresAreRecordedWithTheirMessageAndNeverTimed) {
  std::mt19937_64 rng(2);
  TunableOp op = random_conv(rng);
  while (op.out_sizes[1] < 2 || op.out_h() < 2 || op.out_w() < 2) op = random_conv(rng);
  auto space = std::make_shared<const KernelSpace>(op, Families{std::make_shared<FaultyFamily>()});
  const MeasureOptions options;
  KernelMeasurer measurer(space, options, make_flusher(options));
  const tuning::FixedRepeats repeats(3);
  const auto results = measurer.measure({{0, 0}, {0, 1}, {0, 2}, {0, 3}, {0, 4}}, repeats);
  ASSERT_EQ(results.size(), 5u);
  EXPECT_TRUE(results[0].ok());
  EXPECT_EQ(results[0].seconds.size(), 3u);
  EXPECT_GT(results[0].cost_seconds, 0);
  EXPECT_EQ(results[1].error, tuning::MeasureError::kRuntime);
  EXPECT_NE(results[1].message.find("wrong result"), std::string::npos) << results[1].message;
  EXPECT_EQ(results[2].error, tuning::MeasureError::kRuntime);
  EXPECT_EQ(results[2].message, "kernel crashed");
  EXPECT_EQ(results[3].error, tuning::MeasureError::kCompile);
  EXPECT_EQ(results[3].message, "cannot build this");
  // A channels_last result where ATen gives a contiguous one (or the other way round).
  EXPECT_EQ(results[4].error, tuning::MeasureError::kRuntime);
  EXPECT_NE(results[4].message.find("wrong layout"), std::string::npos) << results[4].message;
  for (int i = 1; i < 5; ++i) EXPECT_TRUE(results[i].seconds.empty());
  EXPECT_GT(measurer.baseline_seconds(3), 0);
}

// The measurers of a model share one flusher; measuring on two threads at once stays right
// (and free of data races under TSan).
TEST(KernelMeasurer, MeasurersSharingOneFlusherMeasureConcurrently) {
  std::mt19937_64 rng(5);
  MeasureOptions options;
  options.flush_bytes = size_t{1} << 20;
  const auto flusher = make_flusher(options);
  std::vector<std::unique_ptr<KernelMeasurer>> measurers;
  std::shared_ptr<const KernelSpace> space;
  for (int i = 0; i < 2; ++i) {
    space = std::make_shared<const KernelSpace>(random_conv(rng),
                                                Families{std::make_shared<FaultyFamily>()});
    measurers.push_back(std::make_unique<KernelMeasurer>(space, options, flusher));
  }
  const tuning::FixedRepeats repeats(4);
  std::vector<std::vector<tuning::MeasureResult>> results(measurers.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < measurers.size(); ++i)
    threads.emplace_back([&, i] { results[i] = measurers[i]->measure({{0, 0}, {0, 1}}, repeats); });
  for (auto& t : threads) t.join();
  for (const auto& r : results) {
    ASSERT_EQ(r.size(), 2u);
    EXPECT_TRUE(r[0].ok());
    EXPECT_EQ(r[0].seconds.size(), 4u);
    EXPECT_EQ(r[1].error, tuning::MeasureError::kRuntime);
  }
  EXPECT_THROW(KernelMeasurer(space, options, nullptr), std::invalid_argument);
}

// After a correctness check the first timed call is a repeat; otherwise it is a warm-up.
TEST(KernelMeasurer, TheFirstTimedCallCountsOnlyAfterTheCallerRanOnce) {
  MeasureOptions options;
  const tuning::FixedRepeats repeats(3);
  for (const bool done : {false, true}) {
    int calls = 0, flushes = 0;
    tuning::MeasureResult result;
    time_calls([&] { ++calls; }, repeats, options, result, [&] { ++flushes; }, done);
    EXPECT_EQ(result.seconds.size(), 3u);
    EXPECT_EQ(calls, done ? 3 : 4);
    EXPECT_EQ(flushes, calls);
  }
}

TEST(KernelMeasurer, ASlowFirstCallIsATimeout) {
  tuning::MeasureResult result;
  MeasureOptions options;
  options.timeout_seconds = 0.01;
  const tuning::FixedRepeats repeats(3);
  time_calls([] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }, repeats, options,
             result);
  EXPECT_EQ(result.error, tuning::MeasureError::kTimeout);
  EXPECT_TRUE(result.seconds.empty());
}

}  // namespace
}  // namespace nimble::kernels
