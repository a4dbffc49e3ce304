"""Inference replays: one run of the module under `no_grad`, captured and replayed."""

from __future__ import annotations

import torch

from . import lowering_fallback
from .build_replay import Handover
from .capture import capture
from .model_snapshot import ModelSnapshot, module_state
from .structure import ExampleCall, OutputStructure


class InferenceReplay:
    """What `prepare()` builds by default: the module's forward as one replay. Built by
    prepare's pipeline (pipeline.py): it captures here and hands its one part over there."""

    def __init__(self, module: torch.nn.Module, example: ExampleCall, options) -> None:
        self.module = module
        self.example_inputs = example.static_inputs
        self._example = example
        self._float64: list | None = None  # computed where a lowered replay first differs
        args, kwargs = example.static_args, example.static_kwargs

        with torch.no_grad():
            captured = capture(module, lambda _: module(*args, **kwargs),
                               inputs=self.example_inputs)
        self.side_effects = captured.side_effects
        self.outputs, output_tensors = OutputStructure.split(captured.result)
        # Eager's results, before a replay writes into the tensors it returns.
        self._references = ([t.detach().clone() for t in output_tensors]
                            if options.lower_for_cpu else [])
        ops = captured.recorder.trace.ops
        self.parts = [Handover(ops, self.example_inputs, module_state(module), output_tensors)]
        self.trace_ops = [str(op.func._schema.name) + (f".{op.func._schema.overload_name}"
                                                       if op.func._schema.overload_name else "")
                          for op in ops]
        self.replays = []

    def check(self, replay) -> None:
        """Raises if a lowered `replay` differs from eager on the example (the pipeline then
        keeps ATen's ops where the lowering breaks it: lowering_fallback.py)."""
        # Nothing of nimble's own in the program: it is ATen's ops as captured, which the
        # unlowered replay would run too (and an RNG op would draw other numbers than the
        # recorded run did, a difference that is no error).
        if not _lowered_op_names(replay):
            return
        with self.snapshot():
            outputs = list(replay.run(self.example_inputs, False))
        # Out of the snapshot: the float64 reference runs on the example as captured.
        lowering_fallback.expect_outputs(outputs, self._references,
                                         lambda: _lowered_op_names(replay),
                                         self._float64_references)

    def _float64_references(self) -> list | None:
        """Eager's outputs in float64, once: what tells float32's own rounding from an error
        of the lowering, where the lowered replay differs from eager."""
        if self._float64 is None:
            self._float64 = lowering_fallback.float64_outputs(
                self.module, self._example.static_args, self._example.static_kwargs) or []
        return self._float64 or None

    def adopt(self, replays: list) -> None:
        self.replays = replays
        self._references = []  # checked: eager's outputs are not kept beyond prepare
        self._float64 = []

    def abandon(self) -> None:
        """Nothing to put back: a capture of a forward leaves the model as it found it."""

    def snapshot(self) -> ModelSnapshot:
        """What a run on `example_inputs` changes: the model, and the inputs it writes."""
        return ModelSnapshot(self.module, inputs=self.example_inputs)

    def run_example(self) -> None:
        self.replays[0].run(self.example_inputs, False)


def _lowered_op_names(replay) -> list[str]:
    """The distinct ops of a lowered replay that are nimble's own (what the lowering put in)."""
    names = []
    for op in replay.ops():
        if op["name"].startswith("nimble::") and op["name"] not in names:
            names.append(op["name"])
    return names
