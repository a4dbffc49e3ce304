"""prepare's pipeline, in one place: the stages from a module and its example call to the
replay `Nimble` runs, each with the types it takes and makes.

    stage            in -> out                                          where
    1. capture       Module, ExampleCall -> Capture (Trace of           capture.py, under the mode's
                     RecordedOp, the recorded run's result)             program class (below)
       hand-over     Trace, tensors, _C.BuildOptions -> _C.Replay       build_replay.py:
                                                                        ProgramBuilder.finish
    2. passes        recorded ops -> recorded ops                       csrc/passes/
    3. program       recorded ops -> BuiltProgram (Program, state)      ProgramBuilder::finish
    4. memory plan   BuiltProgram -> buffers sharing storage            csrc/program/memory_plan.h
    5. stream plan   Program -> StreamPlan                              csrc/runtime/stream_plan.h
    6. executor      Program, ProgramState, StreamPlan -> Executor      csrc/runtime/executor.h

Stages 2 to 6 are C++, run in that order by one function, `build_replay` in
csrc/runtime/replay_pipeline.h; the hand-over (build_replay.py) is the only place Python gives a
trace to C++. The list lives here, in Python, because stage 1 can only be Python (a
TorchDispatchMode sees the ops; autograd and the optimizer run in Python), and what is captured
differs by mode: `program_for` picks the mode's program class, which captures (stage 1) and
hands over each part it replays (one forward; a forward and a backward; a whole step).
`PrepareOptions` (prepare_options.py) is read by every stage, its C++ half as `_C.BuildOptions`.
After prepare, `streams='auto'` times stream counts on the built replay (streams.py).
"""

from __future__ import annotations

from typing import Any

import torch

from . import lowered_tuning
from .capture import cycle_collector_paused
from .inference import InferenceReplay
from .prepare_options import PrepareOptions
from .structure import ExampleCall
from .training import ForwardBackwardReplay
from .whole_step import WholeStepReplay


def program_for(module: torch.nn.Module, example: ExampleCall, opts: PrepareOptions,
                example_targets: Any):
    """The program prepare's options ask for (an InferenceReplay, ForwardBackwardReplay or
    WholeStepReplay, each holding its `replays`), and the lowering's kernels it kept from
    `opts.lowered_with`'s database (checked in the replay: lowered_tuning.py)."""
    choices = lowered_tuning.database_choices(opts.lowered_with)
    options = opts.build_options()
    with cycle_collector_paused():
        if opts.training and opts.optimizer is None:
            return ForwardBackwardReplay(module, example, options, opts.copy_outputs), choices
        if opts.training:
            return WholeStepReplay(module, example, options, opts.loss_fn, opts.optimizer,
                                   example_targets, copy_loss=opts.copy_outputs), choices
        return lowered_tuning.build_with_choices(
            lambda o: InferenceReplay(module, example, o), options, choices)
