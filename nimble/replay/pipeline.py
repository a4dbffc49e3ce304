"""prepare's pipeline, in one place: the stages from a module and its example call to the
replays `Nimble` runs, each with the types it takes and makes.

    stage            in -> out                                          where
    1. capture       Module, ExampleCall -> Capture (a Trace of          capture.py, called by the
                     RecordedOp; the run's result), then Handover parts  mode's program class
       hand-over     Handover, _C.BuildOptions -> _C.Replay             `hand_over` below, through
                                                                        build_replay.py
    2. passes        recorded ops -> recorded ops, TracePassResults     csrc/passes/trace_passes.h
    3. program       recorded ops -> BuiltProgram (Program, state)      ProgramBuilder::finish
    4. memory plan   BuiltProgram -> buffers sharing storage            csrc/program/memory_plan.h
    5. stream plan   Program -> StreamPlan                              csrc/runtime/stream_plan.h
    6. executor      Program, ProgramState, StreamPlan -> Executor      csrc/runtime/executor.h

Stages 2 to 6 are C++, run in that order by one function, `build_replay` in
csrc/pipeline/replay_pipeline.h, which `hand_over` reaches through `ProgramBuilder.finish`: the
only place a trace goes from Python to C++. The list lives here, in Python, because stage 1 can
only be Python (a TorchDispatchMode sees the ops; autograd and the optimizer run in Python)
and what is captured differs by mode: the mode's program class (`CapturedProgram`) captures
one forward, a forward and a backward, or a whole step, and splits the trace into the parts it
replays; `hand_over` builds them all alike. `PrepareOptions` (prepare_options.py) is read by
every stage, its C++ half as `_C.BuildOptions`. After this, `streams='auto'` times stream
counts on the built replays (streams.py).
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

import torch

from . import lowered_tuning, lowering_fallback
from .build_replay import Handover, build_replay
from .capture import cycle_collector_paused
from .inference import InferenceReplay
from .prepare_options import PrepareOptions
from .structure import ExampleCall
from .training import ForwardBackwardReplay
from .whole_step import WholeStepReplay


class CapturedProgram(Protocol):
    """What a mode's program class (InferenceReplay, ForwardBackwardReplay, WholeStepReplay)
    is once made: its capture done (stage 1), the parts it replays waiting for the hand-over."""

    parts: list[Handover]  # what each of its replays is built from, in the order it adopts them
    trace_ops: list[str] | None  # the trace's op names, where a lowering may need to be undone

    def check(self, replay) -> None:
        """Raises if a lowered replay is wrong (lowering_fallback.py); None where none is."""

    def adopt(self, replays: list) -> None:
        """Takes the built replays, one per part."""

    def abandon(self) -> None:
        """Puts back what the capture left for the replays (a failed hand-over)."""


def program_for(module: torch.nn.Module, example: ExampleCall, opts: PrepareOptions,
                example_targets: Any):
    """The program prepare's options ask for, built through every stage, and the lowering's
    kernels it kept from `opts.lowered_with`'s database (checked in the replay:
    lowered_tuning.py)."""
    choices = lowered_tuning.database_choices(opts.lowered_with)
    options = opts.build_options()
    with cycle_collector_paused():
        if not opts.training:
            return lowered_tuning.build_with_choices(
                lambda o: hand_over(InferenceReplay(module, example, o), o), options, choices)
        if opts.optimizer is None:
            program = ForwardBackwardReplay(module, example, opts.copy_outputs)
        else:
            program = WholeStepReplay(module, example, options, opts.loss_fn, opts.optimizer,
                                      example_targets, copy_loss=opts.copy_outputs)
        return hand_over(program, options), choices


def hand_over(program: CapturedProgram, options):
    """The hand-over: each captured part of `program` goes to C++ (build_replay.py), which runs
    stages 2 to 6 and returns its replay; a lowered replay that fails `program.check` is
    built again with ATen's ops where the lowering breaks it (lowering_fallback.py)."""
    parts, program.parts = program.parts, []  # the trace's tensors live no longer than this
    try:
        replays = [lowering_fallback.build_checked(functools.partial(build_replay, part), options,
                                                   program.check, program.trace_ops)
                   for part in parts]
    except BaseException:
        program.abandon()
        raise
    program.adopt(replays)
    return program
