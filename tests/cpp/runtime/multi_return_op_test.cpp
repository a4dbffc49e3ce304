// Ops with several returns through the one op-call path (op_call.h), on the CPU backend and
// on the CPU twin of the CUDA graph: every value a boxed call leaves on the stack must own
// its tensor. Run under AddressSanitizer by tests/sanitize.sh, where a dangling return is
// a heap-use-after-free; without it, a wrong or undefined result.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/library.h>

#include <string>
#include <tuple>

#include "csrc/program/program_builder.h"
#include "csrc/runtime/replay.h"
#include "tests/cpp/program/record_op.h"

namespace {

// Like cuDNN's batch norm `.out` kernel (`reserve = at::empty(...)`): it gives one out
// argument a new tensor instead of writing into the one it was handed. Through the boxed
// wrapper, an `.out` kernel's `std::tuple<Tensor&, Tensor&>` refers to the stack's
// argument slots, which are destroyed before the returns are pushed: the new tensor, owned
// by the stack alone, is freed first.
std::tuple<at::Tensor, at::Tensor> sum_and_scaled(const at::Tensor& x) { return {x + 1, x * 2}; }

std::tuple<at::Tensor&, at::Tensor&> sum_and_scaled_out(const at::Tensor& x, at::Tensor& sum,
                                                        at::Tensor& scaled) {
  at::add_out(sum, x, 1);
  scaled = x * 2;
  return {sum, scaled};
}

TORCH_LIBRARY(nimble_test, m) {
  m.def("sum_and_scaled(Tensor x) -> (Tensor, Tensor)");
  m.def(
      "sum_and_scaled.out(Tensor x, *, Tensor(a!) sum, Tensor(b!) scaled) -> "
      "(Tensor(a!), Tensor(b!))");
}

TORCH_LIBRARY_IMPL(nimble_test, CPU, m) {
  m.impl("sum_and_scaled", &sum_and_scaled);
  m.impl("sum_and_scaled.out", &sum_and_scaled_out);
}

}  // namespace

namespace nimble {
namespace {

using testing::record;

std::vector<c10::IValue> record_all(ProgramBuilder& b, const char* name, const char* overload,
                                    std::vector<c10::IValue> args) {
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  std::vector<c10::IValue> stack = args;
  handle.callBoxed(stack);
  b.add_op(name, overload, std::move(args), stack);
  return stack;
}

std::vector<at::Tensor> tensors_of(const std::vector<c10::IValue>& values) {
  std::vector<at::Tensor> out;
  for (const c10::IValue& v : values) {
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().numel() > 0)
      out.push_back(v.toTensor());
  }
  return out;
}

// The op's returns as program outputs, behind a `mul` so that they are produced inside the
// replay, and a reader of each (a `.out` rewrite happens only where no output lives).
struct MultiReturnCase {
  std::string name;
  const char* op;
  const char* overload;
  std::function<std::vector<c10::IValue>(const at::Tensor&)> args;
};

std::vector<MultiReturnCase> cases() {
  const at::Tensor weight = at::rand({4}) + 0.5;
  const at::Tensor bias = at::randn({4});
  return {
      {"native_batch_norm", "aten::native_batch_norm", "",
       [=](const at::Tensor& y) -> std::vector<c10::IValue> {
         return {y, weight, bias, at::zeros({4}), at::ones({4}), true, 0.1, 1e-5};
       }},
      {"native_batch_norm_eval", "aten::native_batch_norm", "",
       [=](const at::Tensor& y) -> std::vector<c10::IValue> {
         return {y, weight, bias, at::zeros({4}), at::ones({4}), false, 0.1, 1e-5};
       }},
      {"_native_batch_norm_legit", "aten::_native_batch_norm_legit", "no_stats",
       [=](const at::Tensor& y) -> std::vector<c10::IValue> {
         return {y, weight, bias, true, 0.1, 1e-5};
       }},
      {"max_pool2d_with_indices", "aten::max_pool2d_with_indices", "",
       [](const at::Tensor& y) -> std::vector<c10::IValue> {
         return {y,
                 std::vector<int64_t>{2, 2},
                 std::vector<int64_t>{2, 2},
                 std::vector<int64_t>{0, 0},
                 std::vector<int64_t>{1, 1},
                 false};
       }},
      {"topk", "aten::topk", "",
       [](const at::Tensor& y) -> std::vector<c10::IValue> {
         return {y, int64_t{3}, int64_t{-1}, true, true};
       }},
      {"sort", "aten::sort", "",
       [](const at::Tensor& y) -> std::vector<c10::IValue> {
         return {y, int64_t{-1}, false};
       }},
      {"sum_and_scaled", "nimble_test::sum_and_scaled", "",
       [](const at::Tensor& y) -> std::vector<c10::IValue> { return {y}; }},
  };
}

class MultiReturnOps : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(MultiReturnOps, EveryReturnIsRightOnEveryReplay) {
  at::NoGradGuard no_grad;
  const auto [index, twin] = GetParam();
  const MultiReturnCase c = cases()[index];
  const at::Tensor x = at::randn({2, 4, 6, 6});
  const at::Tensor scale = at::rand({1}) + 0.5;
  ProgramBuilder b;
  b.add_input(x);
  b.add_state(scale);
  const at::Tensor y = record(b, "aten::mul", "Tensor", {x, scale}).toTensor();
  const std::vector<at::Tensor> returns = tensors_of(record_all(b, c.op, c.overload, c.args(y)));
  // Each return read by one more op, so that the returns themselves are no outputs.
  std::vector<at::Tensor> outputs;
  for (const at::Tensor& r : returns)
    outputs.push_back(record(b, "aten::mul", "Scalar", {r, 3}).toTensor());
  b.set_outputs(outputs);
  ExecutorOptions options;
  options.graph_twin = twin;
  Replay replay(b.finish({}), options);
  for (int call = 0; call < 3; ++call) {
    const at::Tensor input = at::randn({2, 4, 6, 6});
    const std::vector<at::Tensor> got = replay.run({input}, /*copy_outputs=*/true);
    auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(c.op, c.overload);
    std::vector<c10::IValue> stack = c.args(input * scale);
    handle.callBoxed(stack);
    const std::vector<at::Tensor> expected = tensors_of(stack);
    ASSERT_EQ(got.size(), expected.size()) << c.name;
    for (size_t r = 0; r < got.size(); ++r) {
      EXPECT_TRUE(at::allclose(got[r], expected[r] * 3, 1e-5, 1e-6))
          << c.name << " return " << r << " call " << call;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(OpCall, MultiReturnOps,
                         ::testing::Combine(::testing::Range(0, static_cast<int>(cases().size())),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<int, bool>>& info) {
                           return cases()[std::get<0>(info.param)].name +
                                  (std::get<1>(info.param) ? "_on_the_graph_twin" : "_on_the_cpu");
                         });

// The builder never hands such an op to its `.out` overload: the stack would be the only
// owner of the tensor the kernel put there (see sum_and_scaled_out).
TEST(OpCall, OpsWithSeveralReturnsKeepTheirFunctionalOverload) {
  at::NoGradGuard no_grad;
  const at::Tensor x = at::randn({5});
  ProgramBuilder b;
  b.add_input(x);
  const at::Tensor y = record(b, "aten::mul", "Tensor", {x, x}).toTensor();
  const auto returns = record_all(b, "nimble_test::sum_and_scaled", "", {y});
  const at::Tensor z = record(b, "aten::add", "Tensor", {returns[0], returns[1], 1}).toTensor();
  b.set_outputs({z});
  const BuiltProgram built = b.finish({});
  ASSERT_EQ(built.program.ops.size(), 3u);
  EXPECT_EQ(built.program.ops[1].name, "nimble_test::sum_and_scaled");
  EXPECT_EQ(built.program.ops[0].name, "aten::mul.out");  // one return: rewritten
}

}  // namespace
}  // namespace nimble
