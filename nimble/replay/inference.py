"""Inference replays: one run of the module under `no_grad`, captured and replayed."""

from __future__ import annotations

import torch

from .capture import build_replay, capture
from .model_snapshot import ModelSnapshot, module_state
from .structure import ExampleCall, OutputStructure


class InferenceReplay:
    """What `prepare()` builds by default: the module's forward as one replay."""

    def __init__(self, module: torch.nn.Module, example: ExampleCall, options: dict) -> None:
        self.module = module
        self.example_inputs = example.static_inputs
        args, kwargs = example.static_args, example.static_kwargs

        snapshot = ModelSnapshot(module, inputs=self.example_inputs, copy_on_write=True)
        with torch.no_grad():
            captured = capture(module, snapshot, lambda _: module(*args, **kwargs))
        self.side_effects = captured.side_effects
        self.outputs, output_tensors = OutputStructure.split(captured.result)
        self.replays = [
            build_replay(
                captured.recorder.trace.ops,
                self.example_inputs,
                module_state(module),
                output_tensors,
                **options,
            )
        ]

    def snapshot(self) -> ModelSnapshot:
        """What a run on `example_inputs` changes: the model, and the inputs it writes."""
        return ModelSnapshot(self.module, inputs=self.example_inputs)

    def run_example(self) -> None:
        self.replays[0].run(self.example_inputs, False)
