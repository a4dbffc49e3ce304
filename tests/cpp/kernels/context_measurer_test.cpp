// Tuning a lowered replay in context (slot/context_measurer.h): a candidate is credited with the
// time the replay's executor measured for the ops it replaced, the program's own convolutions
// are back in place after it, and a candidate whose result differs from the rule's on the
// replay's live inputs is recorded as an error, never timed.
#include "csrc/slot/context_measurer.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "csrc/program/program_builder.h"
#include "tests/cpp/program/record_op.h"
#include "tuning/measure/adaptive_evaluator.h"

namespace nimble::slot {
namespace {

using kernels::PrepackedConvolution;

// The convolution in place at `op`: the argument set_op_argument put there, else the program's.
const PrepackedConvolution* in_place(const Program& program, const ProgramState& state, int op) {
  for (const auto& [index, value] : state.ops[op].args)
    if (value.isCustomClass()) return value.toCustomClass<PrepackedConvolution>().get();
  for (const Arg& arg : program.ops[op].args)
    if (arg.kind == Arg::Kind::kConstant && arg.constant.isCustomClass())
      return arg.constant.toCustomClass<PrepackedConvolution>().get();
  return nullptr;
}

// Nanoseconds the test executor reports for a convolution: by its kernel, and its op.
int64_t reported_ns(const PrepackedConvolution& convolution, int op) {
  return (convolution.kernel() == PrepackedConvolution::Kernel::kOneDnn ? 1'000'000 : 3'000'000) +
         op * 1'000;
}

// The CPU executor, each convolution's time in run_timed replaced by reported_ns: what a
// measurer reports can only come from there.
class ReportingExecutor final : public Executor {
 public:
  ReportingExecutor(const Program& program, ProgramState& state, const ExecutorOptions& options)
      : program_(program), state_(state), inner_(make_executor(program, state, options)) {}
  void run() override { inner_->run(); }
  std::vector<OpTiming> run_timed() override {
    std::vector<OpTiming> timings = inner_->run_timed();
    for (OpTiming& t : timings)
      if (const PrepackedConvolution* c = in_place(program_, state_, t.op))
        t.end_ns = t.start_ns + reported_ns(*c, t.op);
    return timings;
  }
  std::string backend() const override { return "reporting"; }
  int num_streams() const override { return inner_->num_streams(); }
  const ScheduleInfo& schedule() const override { return inner_->schedule(); }

 private:
  const Program& program_;
  ProgramState& state_;
  std::unique_ptr<Executor> inner_;
};

struct Lowered {
  at::Tensor x, w1, w2;
  std::unique_ptr<Replay> replay;
};

// x -> relu(conv(x, w1)) -> relu(conv(., w2)): two lowered convolutions of one shape.
Lowered two_convolutions() {
  at::NoGradGuard no_grad;
  Lowered l;
  l.x = at::randn({1, 16, 10, 10}).contiguous(at::MemoryFormat::ChannelsLast);
  l.w1 = at::randn({16, 16, 3, 3}) * 0.1;
  l.w2 = at::randn({16, 16, 3, 3}) * 0.1;
  ProgramBuilder b;
  b.add_input(l.x);
  at::Tensor y = l.x;
  for (const at::Tensor& w : {l.w1, l.w2}) {
    Epilogue relu;
    relu.activation = Activation::kRelu;
    auto packed = c10::make_intrusive<PrepackedConvolution>(
        w, at::Tensor(), std::vector<at::Tensor>{w},
        kernels::ConvolutionGeometry{{1, 1}, {1, 1}, {1, 1}, 1}, relu, y, std::vector<int64_t>{},
        std::make_shared<kernels::NonFiniteWeights>());
    y = testing::record(b, "nimble::convolution_prepacked", "", {y, c10::IValue(), packed})
            .toTensor();
  }
  b.set_outputs({y});
  l.replay = std::make_unique<Replay>(
      b.finish({}), ExecutorOptions{},
      [](const Program& p, ProgramState& s, const ExecutorOptions& o) -> std::unique_ptr<Executor> {
        return std::make_unique<ReportingExecutor>(p, s, o);
      });
  return l;
}

tuning::Config with_kernel(const tuning::KnobSpace& space, tuning::Config config,
                           const std::string& kernel) {
  const int i = space.knob_index("prepacked.kernel");
  for (int v = 0; v < space.knobs()[i].size(); ++v)
    if (space.knobs()[i].label(v) == kernel) config[i] = v;
  return config;
}

TEST(ContextMeasurer, ACandidateGetsTheTimeTheExecutorMeasuredForItsOps) {
  Lowered l = two_convolutions();
  std::vector<ContextTask> found = context_tasks(*l.replay);
  ASSERT_EQ(found.size(), 1u);
  ASSERT_EQ(found[0].sites.size(), 2u);
  const int first = found[0].sites[0].op, second = found[0].sites[1].op;
  const std::vector<tuning::Task> tasks =
      context_tuning_tasks(*l.replay, {l.x}, std::move(found), kernels::MeasureOptions{});
  const tuning::Task& task = tasks.at(0);
  EXPECT_EQ(task.weight, 2.0);
  // Per call: the mean of the two ops' times, as the executor reported them.
  const auto expected = [&](PrepackedConvolution::Kernel kernel) {
    const int64_t base = kernel == PrepackedConvolution::Kernel::kOneDnn ? 1'000'000 : 3'000'000;
    return (2 * base + (first + second) * 1'000) * 1e-9 / 2;
  };
  const PrepackedConvolution::Kernel rule =
      in_place(l.replay->program(), l.replay->state(), first)->kernel();
  EXPECT_DOUBLE_EQ(task.baseline_seconds, expected(rule));
  std::vector<tuning::Config> batch = {task.start};
  if (at::hasMKLDNN()) {
    batch.push_back(with_kernel(task.space, task.start, "onednn_prepacked"));
    batch.push_back(with_kernel(task.space, task.start, "nimble_gemm"));
  }
  const tuning::FixedRepeats three(3);
  const std::vector<tuning::MeasureResult> results = task.measurer->measure(batch, three);
  ASSERT_EQ(results.size(), batch.size());
  for (const tuning::MeasureResult& r : results) {
    ASSERT_TRUE(r.ok()) << r.message;
    ASSERT_EQ(r.seconds.size(), 3u);
  }
  EXPECT_DOUBLE_EQ(results[0].mean_seconds(), expected(rule));
  if (at::hasMKLDNN()) {
    EXPECT_DOUBLE_EQ(results[1].mean_seconds(), expected(PrepackedConvolution::Kernel::kOneDnn));
    EXPECT_DOUBLE_EQ(results[2].mean_seconds(),
                     expected(PrepackedConvolution::Kernel::kNimbleGemm));
  }
  // The program's own convolutions are in place again.
  for (int op : {first, second}) EXPECT_TRUE(l.replay->state().ops[op].args.empty());
}

// Calls a first warm-up call past `line` seconds slow, and counts the timed repeats it is asked
// about.
class FirstCallLine : public tuning::RepeatPolicy {
 public:
  explicit FirstCallLine(double line) : line_(line) {}
  tuning::RepeatDecision after_repeat(const std::vector<double>& seconds, double) const override {
    ++timed_;
    return seconds.size() >= 3 ? tuning::RepeatDecision::kEnough
                               : tuning::RepeatDecision::kContinue;
  }
  bool slow_on_first_call(double seconds) const override { return seconds > line_; }
  int timed() const { return timed_; }

 private:
  double line_;
  mutable int timed_ = 0;
};

TEST(ContextMeasurer, ACandidateHopelessOnItsFirstWarmUpCallIsMeasuredSlowFromThatCall) {
  Lowered l = two_convolutions();
  const std::vector<tuning::Task> tasks =
      context_tuning_tasks(*l.replay, {l.x}, context_tasks(*l.replay), kernels::MeasureOptions{});
  const tuning::Task& task = tasks.at(0);
  const FirstCallLine under(task.baseline_seconds / 2), over(task.baseline_seconds * 2);
  const tuning::MeasureResult slow = task.measurer->measure({task.start}, under).at(0);
  ASSERT_TRUE(slow.ok()) << slow.message;
  EXPECT_TRUE(slow.cut_short);
  ASSERT_EQ(slow.seconds.size(), 1u);  // the first warm-up call's time, the executor's
  EXPECT_DOUBLE_EQ(slow.seconds[0], task.baseline_seconds);
  EXPECT_EQ(under.timed(), 0);  // no timed repeat
  const tuning::MeasureResult timed = task.measurer->measure({task.start}, over).at(0);
  ASSERT_TRUE(timed.ok()) << timed.message;
  EXPECT_FALSE(timed.cut_short);
  EXPECT_EQ(timed.seconds.size(), 3u);
  EXPECT_EQ(over.timed(), 3);
}

TEST(ContextMeasurer, ACandidateUnlikeTheRuleOnTheLiveInputsIsAnErrorNeverTimed) {
  Lowered l = two_convolutions();
  const std::vector<tuning::Task> tasks =
      context_tuning_tasks(*l.replay, {l.x}, context_tasks(*l.replay), kernels::MeasureOptions{});
  const tuning::Task& task = tasks.at(0);
  // The second convolution's weight changes after the rule's results on the live inputs were
  // taken: a candidate packs the new weight, so its result is not the rule's.
  {
    at::NoGradGuard no_grad;
    l.w2.mul_(-1);
  }
  const tuning::FixedRepeats three(3);
  const tuning::MeasureResult r = task.measurer->measure({task.start}, three).at(0);
  EXPECT_EQ(r.error, tuning::MeasureError::kRuntime);
  EXPECT_NE(r.message.find("against the rule's kernel"), std::string::npos) << r.message;
  EXPECT_TRUE(r.seconds.empty());
  for (const OpState& op : l.replay->state().ops) EXPECT_TRUE(op.args.empty());
}

}  // namespace
}  // namespace nimble::slot
