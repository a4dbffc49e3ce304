"""Training replays, the paper's mode: forward and backward as two programs, joined by an
autograd Function; the caller runs `.backward()` and the optimizer (whole_step.py captures
the whole step, optimizer update included, as one).

The capture is one eager run below autograd, as inference's, with autograd on: the dispatch
mode sees the forward's kernels and then the kernels the autograd engine runs for
`torch.autograd.grad`. Gradients are computed with `autograd.grad`, never `.backward()`,
so the trace holds no accumulation into `.grad`: accumulation stays where eager does it
(autograd's AccumulateGrad in the paper's mode; the whole step sets `.grad` the way
`zero_grad(); backward()` leaves it).
"""

from __future__ import annotations

from typing import Any

import torch

from .build_replay import Handover, schema_arguments
from .capture import capture, produced_tensors
from ..errors import NotPreparedError
from .model_snapshot import ModelSnapshot, module_state, unique
from .model_watch import TrainableParameters
from .structure import ExampleCall, OutputStructure


def _tensors_in(values) -> list[torch.Tensor]:
    found = []
    for v in values:
        if isinstance(v, torch.Tensor):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            found.extend(t for t in v if isinstance(t, torch.Tensor))
    return found


class _ForwardBackward(torch.autograd.Function):
    """The paper's mode: forward replay in `forward`, backward replay in `backward`;
    parameters are inputs, so autograd accumulates their gradients as in eager."""

    @staticmethod
    def forward(ctx, owner: "ForwardBackwardReplay", *tensors):
        inputs = list(tensors[: owner.num_inputs])
        outputs = owner.forward_replay.run(inputs, owner.copy_outputs, owner.num_user_outputs)
        owner.generation += 1
        ctx.owner = owner
        ctx.generation = owner.generation
        ctx.saved = outputs[owner.num_user_outputs :]
        ctx.inputs_for_backward = [inputs[i] for i in owner.backward_input_positions]
        user = outputs[: owner.num_user_outputs]
        ctx.mark_non_differentiable(*[t for t in user if not t.is_floating_point()])
        return tuple(user)

    @staticmethod
    def backward(ctx, *grad_outputs):
        owner = ctx.owner
        if ctx.generation != owner.generation:
            raise NotPreparedError(
                "backward of an older forward: nimble's training replay keeps the "
                "activations of the latest forward only; call backward before the next "
                "forward of the same Nimble object"
            )
        gos = [
            (g if g is not None else torch.zeros_like(o))
            for g, o in zip(
                [grad_outputs[i] for i in owner.differentiable_outputs], owner.example_gos
            )
        ]
        grads = owner.backward_replay.run(gos + ctx.saved + ctx.inputs_for_backward, False)
        result = [None] * (owner.num_inputs + len(owner.params))
        for position, grad in zip(owner.grad_positions, grads):
            result[position] = grad
        return (None, *result)


class ForwardBackwardReplay:
    """`prepare(training=True)`, the paper's mode: the forward and the backward are two
    replays, joined by `_ForwardBackward`; the caller runs `.backward()` and the optimizer.
    Built by prepare's pipeline (pipeline.py): it captures here and hands its two parts
    over there."""

    check = None  # nothing is lowered in training: each part is built as it is
    trace_ops = None

    def __init__(self, module: torch.nn.Module, example: ExampleCall, copy_outputs: bool) -> None:
        self.module = module
        self.params = [p for p in module.parameters() if p.requires_grad]
        static_args, static_kwargs = example.static_args, example.static_kwargs
        static_inputs = example.static_inputs
        self.num_inputs = len(static_inputs)
        self.copy_outputs = copy_outputs
        self.generation = 0
        wrt_inputs = [i for i, t in enumerate(static_inputs) if t.requires_grad]

        def record(recorder):
            output = module(*static_args, **static_kwargs)
            num_forward = len(recorder.trace.ops)
            structure, outs = OutputStructure.split(output)
            differentiable = [i for i, t in enumerate(outs) if t.requires_grad]
            if not differentiable:
                raise ValueError(
                    "prepare(training=True): no output of the module requires grad "
                    "(are all parameters frozen, or is the forward under no_grad?)"
                )
            with recorder.paused():
                gos = [torch.randn_like(outs[i]) for i in differentiable]
            wrt = self.params + [static_inputs[i] for i in wrt_inputs]
            grads = torch.autograd.grad(
                [outs[i] for i in differentiable], wrt, gos, allow_unused=True
            )
            return num_forward, structure, outs, differentiable, gos, grads

        with torch.enable_grad():
            captured = capture(module, record)
        recorder = captured.recorder
        num_forward, self.outputs, outs, differentiable, gos, grads = captured.result
        self.side_effects = captured.side_effects

        ops = recorder.trace.ops
        forward_ops, backward_ops = ops[:num_forward], ops[num_forward:]
        produced = produced_tensors(forward_ops)
        used_in_backward = unique(
            t
            for op in backward_ops
            for t in _tensors_in(schema_arguments(op.func, op.args, op.kwargs))
        )
        saved = [t for t in used_in_backward if id(t) in produced]
        input_ids = {id(t): i for i, t in enumerate(static_inputs)}
        self.backward_input_positions = [
            input_ids[id(t)] for t in used_in_backward if id(t) in input_ids
        ]
        state = module_state(module)
        self.num_user_outputs = len(outs)
        self.differentiable_outputs = differentiable
        self.example_gos = gos
        kept = [(i, g) for i, g in enumerate(grads) if g is not None]
        # Gradient positions among the Function's inputs (after the owner): inputs, params.
        positions = list(range(self.num_inputs, self.num_inputs + len(self.params))) + wrt_inputs
        self.grad_positions = [positions[i] for i, _ in kept]
        self.parts = [
            Handover(forward_ops, static_inputs, state, outs + saved),
            Handover(backward_ops,
                     gos + saved + [static_inputs[i] for i in self.backward_input_positions],
                     state, [g for _, g in kept]),
        ]
        self.replays = []
        self.example_inputs = static_inputs
        self._trainable = TrainableParameters(module)

    def adopt(self, replays: list) -> None:
        self.forward_replay, self.backward_replay = replays
        self.replays = replays

    def abandon(self) -> None:
        """Nothing to put back: the capture's snapshot put the model back after every run."""

    def run_example(self) -> None:
        outs = self.forward_replay.run(self.example_inputs, False, 0)
        saved = outs[self.num_user_outputs :]
        used = [self.example_inputs[i] for i in self.backward_input_positions]
        self.backward_replay.run(self.example_gos + saved + used, False)

    def snapshot(self) -> ModelSnapshot:
        """What a run on `example_inputs` changes: the model."""
        return ModelSnapshot(self.module)

    def forward(self, inputs: list[torch.Tensor]) -> Any:
        self._trainable.check()
        for i, (got, prepared) in enumerate(zip(inputs, self.example_inputs)):
            if got.requires_grad and not prepared.requires_grad:
                raise NotPreparedError(
                    f"input {i} requires grad, but did not at prepare: the captured backward "
                    f"computes no gradient for it; prepare with an example that requires grad"
                )
        return self.outputs.rebuild(_ForwardBackward.apply(self, *inputs, *self.params))
