"""The hand-over, the one place a recorded trace goes from Python to C++ (prepare's pipeline:
pipeline.py): the trace's ops, their arguments in schema order, given to the program builder
(`ProgramBuilder`, csrc/program/program_builder.h), whose `finish(BuildOptions)` runs stages 2
to 6 (passes, program, memory plan, stream plan, executor: csrc/pipeline/replay_pipeline.h)
and returns the replay."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import UnsupportedOpError


@dataclass
class Handover:
    """What one replay is built from: the recorded ops (capture.py's RecordedOp, in trace
    order), the tensors the caller's arguments replace on every replay (`inputs`), the tensors
    used in place (`state`: parameters, buffers, optimizer state) and those handed back
    (`outputs`)."""

    ops: list
    inputs: list[torch.Tensor]
    state: list[torch.Tensor]
    outputs: list[torch.Tensor]


def schema_arguments(func, args: tuple, kwargs: dict) -> list:
    """The op's arguments in schema order, with defaults filled in."""
    values = []
    for index, formal in enumerate(func._schema.arguments):
        if not formal.kwarg_only and index < len(args):
            values.append(args[index])
        elif formal.name in kwargs:
            values.append(kwargs[formal.name])
        elif formal.has_default_value():
            values.append(formal.default_value)
        else:
            raise UnsupportedOpError(f"op {func}: the trace lacks its argument '{formal.name}'")
    return values


def schema_returns(func, out) -> list:
    if not func._schema.returns:
        return []
    if len(func._schema.returns) == 1:
        return [out]
    return list(out)


def build_replay(part: Handover, options):
    """Hands `part` to the C++ program builder and returns the replay (`_C.Replay`) it builds
    with `options` (a `_C.BuildOptions`, PrepareOptions.build_options())."""
    from .. import _C

    builder = _C.ProgramBuilder()
    for tensor in part.inputs:
        builder.add_input(tensor)
    for tensor in part.state:
        builder.add_state(tensor)
    for op in part.ops:
        schema = op.func._schema
        builder.add_op(
            schema.name,
            schema.overload_name,
            schema_arguments(op.func, op.args, op.kwargs),
            schema_returns(op.func, op.out),
        )
    builder.set_outputs(list(part.outputs))
    return builder.finish(options)
