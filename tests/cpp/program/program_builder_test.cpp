// The program builder: dependencies from data flow and aliasing, .out rewriting,
// precomputed views, and replay equal to eager on random traces.
#include "csrc/program/program_builder.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "csrc/errors.h"
#include "csrc/runtime/cpu/cpu_executor.h"
#include "csrc/runtime/replay.h"
#include "tests/cpp/program/record_op.h"

namespace nimble {
namespace {

// Runs an op eagerly through the dispatcher (full stack given) and records it.
using testing::record;

bool reaches(const Program& p, int from, int to) {
  std::vector<std::vector<int>> next(p.num_ops());
  for (auto [a, b] : p.dependencies) next[a].push_back(b);
  std::vector<int> todo = {from};
  std::set<int> seen;
  while (!todo.empty()) {
    const int v = todo.back();
    todo.pop_back();
    if (v == to) return true;
    for (int w : next[v]) {
      if (seen.insert(w).second) todo.push_back(w);
    }
  }
  return false;
}

TEST(ProgramBuilder, DependenciesFollowDataFlowAndMutation) {
  at::NoGradGuard no_grad;
  const at::Tensor x = at::randn({4});
  const at::Tensor w = at::randn({4});
  ProgramBuilder b;
  b.add_input(x);
  b.add_state(w);
  at::Tensor y = record(b, "aten::mul", "Tensor", {x, w}).toTensor();     // op 0
  record(b, "aten::relu_", "", {y});                                      // op 1: writes y
  at::Tensor z = record(b, "aten::add", "Tensor", {y, x, 1}).toTensor();  // op 2: reads x
  record(b, "aten::add_", "Tensor", {x, w, 1});                           // op 3: writes x
  b.set_outputs({z});
  const Program p = b.finish({}).program;

  ASSERT_EQ(p.num_ops(), 4u);
  const std::set<std::pair<int, int>> deps(p.dependencies.begin(), p.dependencies.end());
  EXPECT_TRUE(deps.count({0, 1}));  // read after write
  EXPECT_TRUE(deps.count({1, 2}));  // read after in-place write
  EXPECT_TRUE(deps.count({2, 3}));  // write after read of x
  EXPECT_TRUE(deps.count({0, 3}));  // write after read of x
  EXPECT_EQ(p.mutated_inputs, std::vector<int>{0});
  EXPECT_EQ(p.ops[0].name, "aten::mul.out");
  EXPECT_EQ(p.ops[1].name, "aten::relu_");
}

TEST(ProgramBuilder, ViewsOfStableTensorsAreComputedOnce) {
  at::NoGradGuard no_grad;
  const at::Tensor x = at::randn({2, 3});
  const at::Tensor w = at::randn({3, 2});
  ProgramBuilder b;
  b.add_input(x);
  b.add_state(w);
  at::Tensor wt = record(b, "aten::t", "", {w}).toTensor();
  at::Tensor y = record(b, "aten::mul", "Tensor", {x, wt}).toTensor();
  at::Tensor z = record(b, "aten::mul", "Tensor", {y, x}).toTensor();
  b.set_outputs({z});
  const Program p = b.finish({}).program;
  ASSERT_EQ(p.num_ops(), 2u);
  EXPECT_EQ(p.ops[0].name, "aten::mul.out");
  // The output is made fresh by its op each replay, so it is handed out without a copy.
  EXPECT_EQ(p.ops[1].name, "aten::mul.Tensor");
  EXPECT_EQ(p.output_reuses_storage, std::vector<bool>{false});

  Replay replay(b.finish({}), ExecutorOptions{});
  const at::Tensor fresh = at::randn({2, 3});
  EXPECT_TRUE(at::equal(replay.run({fresh}, true).at(0), fresh * w.t() * fresh));
}

TEST(ProgramBuilder, RejectsOpsReturningNumbers) {
  const at::Tensor x = at::randn({3});
  ProgramBuilder b;
  b.add_input(x);
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow("aten::_local_scalar_dense", "");
  std::vector<c10::IValue> stack = {at::sum(x)};
  handle.callBoxed(stack);
  try {
    b.add_op("aten::_local_scalar_dense", "", {at::sum(x)}, stack);
    FAIL() << "expected NotStatic";
  } catch (const NotStatic& e) {
    EXPECT_NE(std::string(e.what()).find("aten::_local_scalar_dense"), std::string::npos);
  }
}

TEST(ProgramBuilder, RejectsUnknownOps) {
  ProgramBuilder b;
  EXPECT_THROW(b.add_op("aten::no_such_op", "", {}, {}), UnsupportedOp);
  // C++ callers catching std::invalid_argument still catch it.
  EXPECT_THROW(b.add_op("aten::no_such_op", "", {}, {}), std::invalid_argument);
}

TEST(Replay, RejectsInputsUnlikeThePreparedOnes) {
  const at::Tensor x = at::randn({2, 2});
  ProgramBuilder b;
  b.add_input(x);
  at::Tensor y = record(b, "aten::sin", "", {x}).toTensor();
  b.set_outputs({y});
  Replay replay(b.finish({}), ExecutorOptions{});
  EXPECT_THROW(replay.run({at::randn({3, 2})}, true), std::invalid_argument);
  EXPECT_THROW(replay.run({at::randn({2, 2}, at::kDouble)}, true), std::invalid_argument);
  EXPECT_THROW(replay.run({}, true), std::invalid_argument);
}

// Random traces of out-of-place, in-place and view ops over a few tensors: the replay
// equals an eager run, and any two ops touching one storage, one of them writing, are
// ordered by a dependency path.
TEST(ProgramBuilder, RandomTracesReplayLikeEagerAndOrderConflictingOps) {
  at::NoGradGuard no_grad;
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 60; ++trial) {
    const at::Tensor initial_input = at::randn({4, 4});
    const at::Tensor initial_state = at::randn({4, 4});
    at::Tensor input = initial_input.clone();
    at::Tensor state = initial_state.clone();
    at::Tensor eager_input = initial_input.clone();
    at::Tensor eager_state = initial_state.clone();
    ProgramBuilder b;
    b.add_input(input);
    b.add_state(state);
    // Each live value in both worlds: (traced tensor, eager tensor).
    std::vector<std::pair<at::Tensor, at::Tensor>> live = {{input, eager_input},
                                                           {state, eager_state}};
    const int num_ops = 4 + static_cast<int>(rng() % 12);
    for (int i = 0; i < num_ops; ++i) {
      const auto [t, e] = live[rng() % live.size()];
      const auto [u, f] = live[rng() % live.size()];
      switch (rng() % 5) {
        case 0:
          live.emplace_back(record(b, "aten::add", "Tensor", {t, u, 1}).toTensor(), e + f);
          break;
        case 1:
          live.emplace_back(record(b, "aten::mul", "Tensor", {t, u}).toTensor(), e * f);
          break;
        case 2:
          record(b, "aten::mul_", "Scalar", {t, 0.5});
          e.mul_(0.5);
          break;
        case 3:
          if (t.is_same(u) || t.storage().is_alias_of(u.storage())) break;  // no self-overlap
          record(b, "aten::add_", "Tensor", {t, u, 1});
          e.add_(f);
          break;
        case 4:
          live.emplace_back(record(b, "aten::transpose", "int", {t, 0, 1}).toTensor(),
                            e.transpose(0, 1));
          break;
      }
    }
    std::vector<at::Tensor> outputs;
    for (const auto& [t, e] : live) outputs.push_back(t);
    b.set_outputs(outputs);
    Replay replay(b.finish({}), ExecutorOptions{});
    const Program& program = replay.program();

    for (size_t i = 0; i < program.num_ops(); ++i) {
      for (size_t j = i + 1; j < program.num_ops(); ++j) {
        auto touches = [&](const std::vector<int>& a, const std::vector<int>& b) {
          for (int x : a)
            for (int y : b)
              if (program.slots[x].storage == program.slots[y].storage) return true;
          return false;
        };
        const OpNode& first = program.ops[i];
        const OpNode& second = program.ops[j];
        if (touches(first.writes, second.reads) || touches(first.reads, second.writes) ||
            touches(first.writes, second.writes)) {
          EXPECT_TRUE(reaches(program, static_cast<int>(i), static_cast<int>(j)))
              << "trial " << trial << ": ops " << i << " and " << j << " share storage unordered";
        }
      }
    }

    state.copy_(initial_state);  // the recording run mutated it, as eager did its twin
    at::Tensor caller_input = initial_input.clone();
    const std::vector<at::Tensor> got = replay.run({caller_input}, true);
    ASSERT_EQ(got.size(), live.size());
    for (size_t k = 0; k < live.size(); ++k) {
      EXPECT_TRUE(at::allclose(got[k], live[k].second)) << "trial " << trial << " output " << k;
    }
    EXPECT_TRUE(at::allclose(state, eager_state)) << "trial " << trial;
    EXPECT_TRUE(at::allclose(caller_input, eager_input)) << "trial " << trial;
  }
}

}  // namespace
}  // namespace nimble
