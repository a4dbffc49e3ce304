#pragma once
// A prepared program, its state and the executor that runs the one on the other: what a
// Python `Nimble` object holds. The program never changes after prepare; everything a call
// or a user changes (slot values, folded weights, bound kernels, scalar arguments) is the
// state's. It owns the static input buffers' contract (copy in, copy back inputs the trace
// mutates), hands outputs out, and serializes concurrent calls on one object.
#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "csrc/program/program.h"
#include "csrc/program/program_state.h"
#include "csrc/runtime/executor.h"
#include "csrc/runtime/input_aliasing.h"
#include "csrc/runtime/input_binding.h"
#include "csrc/runtime/state_watch.h"

namespace nimble {

class Replay {
 public:
  using ExecutorFactory = std::function<std::unique_ptr<Executor>(const Program&, ProgramState&,
                                                                  const ExecutorOptions&)>;
  // `make` builds the executor, now and whenever the options change (the backend for the
  // program's device unless a test brings its own).
  Replay(BuiltProgram built, const ExecutorOptions& options, ExecutorFactory make = make_executor);

  // Throws BadInput (errors.h) when the inputs differ from the prepared ones in number,
  // shape, dtype or device, or alias each other or the model's state where the trace
  // writes (input_aliasing.h). Parameters and buffers are used in place and compared, on
  // every call, with what the program was built for: one whose storage moved with its
  // layout unchanged (`p.data = t`, `p.set_(s)`) is followed (the views of it the program
  // computed at prepare are re-pointed, the executor rebuilt, the schedule and memory plan
  // unchanged); one whose shape, strides, offset, dtype or device changed, or that now
  // shares a storage the trace writes, throws StaleModel naming it, before anything runs. With
  // copy_outputs, outputs that live in buffers reused by the next replay are cloned; otherwise the
  // caller gets those buffers themselves. `copy_first`: only the first that many outputs follow
  // `copy_outputs` (the rest are handed out as they are); -1 for all.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs, bool copy_outputs,
                              int copy_first = -1);

  // Scalar arguments that change between replays (an optimizer's learning rate and bias
  // corrections). A place is (traced op index, argument index, list element or -1); the
  // argument is a Python number (double), a list of them, or a 0-dim tensor holding one.
  // `set_scalars` writes one value per registered place, in order, into the state (the
  // program keeps its captured constants); registering again starts from those.
  struct ScalarPlace {
    int traced_op = 0;
    int arg = 0;
    int elem = -1;
  };
  void register_scalars(const std::vector<ScalarPlace>& places);
  void set_scalars(const std::vector<double>& values);

  // What `run` checks of the parameters and buffers before it runs (it follows moved
  // storages, or throws StaleModel), alone: for measuring what the check costs.
  void check_state();
  // Names for the model's parameters and buffers in messages ("fc.weight"), by tensor.
  void set_state_names(const std::vector<std::pair<at::Tensor, std::string>>& names);
  // What the caller checks before each call (not called by `run` itself: the caller holds
  // what the check needs, e.g. Python's GIL).
  void set_pre_check(std::shared_ptr<PreReplayCheck> check) { pre_check_ = std::move(check); }
  PreReplayCheck* pre_check() const { return pre_check_.get(); }
  struct TimedRun {
    int64_t total_ns = 0;  // the whole replay, input copies included
    std::vector<OpTiming> ops;
  };
  // One replay with per-op start/end times.
  TimedRun run_timed(const std::vector<at::Tensor>& inputs);

  // The tuned-kernel slot: per op of the program, the kernel that runs instead of ATen's
  // (null: ATen's), or an empty list for ATen everywhere. Rebuilds the executor (a CUDA
  // graph captures the kernels); when that fails, the previous kernels stay.
  void set_kernels(std::vector<std::shared_ptr<const KernelOverride>> kernels);

  // Tuning in context (slot/context_measurer.h): argument `arg` of op `op` is `value` in the
  // replays that follow (nullopt: the program's own again). The executor is kept, so the
  // candidate runs with the replay's threads and memory as they are; an executor that bakes
  // its arguments (a CUDA graph) refuses.
  void set_op_argument(int op, int arg, const std::optional<c10::IValue>& value);

  // Rebuilds the executor, e.g. with another number of streams.
  void set_executor_options(const ExecutorOptions& options);
  const ExecutorOptions& executor_options() const { return options_; }

  struct Memory {
    // What the replay holds between calls: its buffers and its pool's block.
    int64_t resident_bytes = 0;
    std::optional<PoolStats> pool;  // backends with a private pool
  };
  Memory memory();

  const Program& program() const { return program_; }
  const ProgramState& state() const { return state_; }
  // Throws std::runtime_error while there is none (building it again after the model
  // changed failed; the next call tries again).
  const Executor& executor() const;

 private:
  void check_inputs(const std::vector<at::Tensor>& inputs) const;
  // See `run`: follows moved parameters and buffers (state_watch.h), or throws StaleModel.
  void follow_state();
  void copy_in(const std::vector<at::Tensor>& inputs, const InputBinding::Scope& bound);
  void copy_back(const std::vector<at::Tensor>& inputs, const InputBinding::Scope& bound);
  InputBinding::Scope bind_inputs(const std::vector<at::Tensor>& inputs) const;
  // Builds the executor anew; when that fails, the old one stays (with the state's values
  // as it left them) and the error propagates.
  void rebuild_executor();
  // The executor, built first if a failed rebuild left none.
  Executor& ready_executor();
  void write_scalars(const std::vector<double>& values);

  const Program program_;
  ProgramState state_;
  ExecutorOptions options_;
  ExecutorFactory make_executor_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<InputBinding> binding_;  // none for backends with fixed addresses
  InputAliasing aliasing_;
  StateWatch state_watch_;
  c10::MempoolId_t graph_pool_;  // ExecutorOptions::graph_pool, one per replay
  // The executor reads data addresses it recorded (a CUDA graph): a storage whose data moved
  // under the same storage object must be seen too.
  bool addresses_recorded_ = false;
  std::shared_ptr<PreReplayCheck> pre_check_;
  // Per registered place: its op (`traced_op`), the index of its entry in that op's
  // OpState::args (`arg`), and the list element or -1.
  std::vector<ScalarPlace> scalar_places_;
  std::mutex mutex_;
};

}  // namespace nimble
