"""Training replays: forward and backward as two programs (the paper's mode), or the whole
step (forward, loss, backward, optimizer update) as one.

Both capture one eager run below autograd, as inference does, with autograd on: the
dispatch mode sees the forward's kernels and then the kernels the autograd engine runs for
`torch.autograd.grad`. Gradients are computed with `autograd.grad`, never `.backward()`,
so the trace holds no accumulation into `.grad`: accumulation stays where eager does it
(autograd's AccumulateGrad in the paper's mode; the whole step sets `.grad` the way
`zero_grad(); backward()` leaves it).
"""

from __future__ import annotations

from typing import Any

import torch

from .capture import (
    ModelSnapshot,
    build_replay,
    capture,
    module_state,
    produced_tensors,
    schema_arguments,
    unique,
)
from ..errors import NotPreparedError, StaleModelError, UnsupportedOpError
from .cuda_training import check_training_devices
from .optimizer_scalars import OptimizerScalars, scalar_candidates
from .structure import ExampleCall, OutputStructure, describe, describe_all


def _tensors_in(values) -> list[torch.Tensor]:
    found = []
    for v in values:
        if isinstance(v, torch.Tensor):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            found.extend(t for t in v if isinstance(t, torch.Tensor))
    return found


def _trainable_ids(module: torch.nn.Module) -> list[int]:
    return [id(p) for p in module.parameters() if p.requires_grad]


def _check_parameters(module: torch.nn.Module, prepared: list[int]) -> None:
    if _trainable_ids(module) != prepared:
        raise StaleModelError(
            "the model changed since prepare: its trainable parameters were replaced, added, "
            "removed or (un)frozen"
        )


def _gradient_targets(module: torch.nn.Module, optimizer) -> list[torch.Tensor]:
    owned = {id(p) for p in module.parameters()}
    in_groups = unique(p for g in optimizer.param_groups for p in g["params"])
    foreign = [p for p in in_groups if id(p) not in owned]
    if foreign:
        raise ValueError(
            f"the optimizer updates {len(foreign)} tensor(s) that are not parameters of the "
            f"wrapped module (first: {describe(foreign[0])}); nimble captures the module's"
        )
    return [p for p in in_groups if p.requires_grad]


def _check_loss(loss: Any) -> None:
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.is_floating_point():
        raise ValueError(
            f"loss_fn must return a scalar floating-point tensor, got {describe(loss)}"
        )


def _static_targets(example_targets: Any) -> tuple[torch.Tensor, ...]:
    targets = (
        example_targets if isinstance(example_targets, (tuple, list)) else (example_targets,)
    )
    if not all(isinstance(t, torch.Tensor) for t in targets):
        raise ValueError(
            "example_targets must be a tensor or a tuple of tensors, "
            f"got {describe_all(list(targets))}"
        )
    return tuple(t.detach().clone() for t in targets)


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
    replays, joined by `_ForwardBackward`; the caller runs `.backward()` and the optimizer."""

    def __init__(
        self,
        module: torch.nn.Module,
        example: ExampleCall,
        options: dict,
        copy_outputs: bool,
    ) -> None:
        check_training_devices(module, example)
        self.module = module
        self.params = [p for p in module.parameters() if p.requires_grad]
        static_args, static_kwargs = example.static_args, example.static_kwargs
        static_inputs = example.static_inputs
        self.num_inputs = len(static_inputs)
        self.copy_outputs = copy_outputs
        self.generation = 0
        wrt_inputs = [i for i, t in enumerate(static_inputs) if t.requires_grad]

        def warm_up() -> None:
            module(*static_args, **static_kwargs)

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
            captured = capture(module, ModelSnapshot(module), warm_up, record)
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
        self.forward_replay = build_replay(
            forward_ops, static_inputs, state, outs + saved, **options
        )
        kept = [(i, g) for i, g in enumerate(grads) if g is not None]
        # Gradient positions among the Function's inputs (after the owner): inputs, params.
        positions = list(range(self.num_inputs, self.num_inputs + len(self.params))) + wrt_inputs
        self.grad_positions = [positions[i] for i, _ in kept]
        self.backward_replay = build_replay(
            backward_ops,
            gos + saved + [static_inputs[i] for i in self.backward_input_positions],
            state,
            [g for _, g in kept],
            **options,
        )
        self.replays = [self.forward_replay, self.backward_replay]
        self.example_inputs = static_inputs
        self._param_ids = _trainable_ids(module)

    def run_example(self) -> None:
        outs = self.forward_replay.run(self.example_inputs, False, 0)
        saved = outs[self.num_user_outputs :]
        used = [self.example_inputs[i] for i in self.backward_input_positions]
        self.backward_replay.run(self.example_gos + saved + used, False)

    def snapshot(self) -> ModelSnapshot:
        """What a run on `example_inputs` changes: the model."""
        return ModelSnapshot(self.module)

    def forward(self, inputs: list[torch.Tensor]) -> Any:
        _check_parameters(self.module, self._param_ids)
        for i, (got, prepared) in enumerate(zip(inputs, self.example_inputs)):
            if got.requires_grad and not prepared.requires_grad:
                raise NotPreparedError(
                    f"input {i} requires grad, but did not at prepare: the captured backward "
                    f"computes no gradient for it; prepare with an example that requires grad"
                )
        return self.outputs.rebuild(_ForwardBackward.apply(self, *inputs, *self.params))


class WholeStepReplay:
    """`prepare(training=True, loss_fn=..., optimizer=..., example_targets=...)`: forward,
    loss, backward and the optimizer update as one replay, run by `step`."""

    def __init__(
        self,
        module: torch.nn.Module,
        example: ExampleCall,
        options: dict,
        loss_fn,
        optimizer: torch.optim.Optimizer,
        example_targets: Any,
    ) -> None:
        check_training_devices(module, example)
        static_targets = _static_targets(example_targets)
        static_args, static_kwargs = example.static_args, example.static_kwargs
        self.module = module
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        params = _gradient_targets(module, optimizer)
        self.scalars = OptimizerScalars(optimizer)

        def warm_up() -> None:
            # An eager step: lazily created module state and optimizer state exist before
            # the recorded step.
            with torch.enable_grad():
                loss = loss_fn(module(*static_args, **static_kwargs), *static_targets)
                _check_loss(loss)
                grads = torch.autograd.grad(loss, params, allow_unused=True)
            self.params = [p for p, g in zip(params, grads) if g is not None]
            for p, g in zip(params, grads):
                p.grad = g
            optimizer.step()

        before = ModelSnapshot(module, optimizer)
        # A failure (out of memory, an op the builder refuses) leaves the optimizer without
        # the state the warm-up step made, as prepare found it.
        try:

            def record(recorder):
                step_tensors = [
                    v
                    for p in self.params
                    for v in optimizer.state[p].values()
                    if isinstance(v, torch.Tensor)
                ]
                with self.scalars.nudged():
                    with recorder.paused():  # the host's numbers for the step, not part of it
                        expected = self.scalars.expected_values()
                    with torch.enable_grad():
                        loss = loss_fn(module(*static_args, **static_kwargs), *static_targets)
                        grads = torch.autograd.grad(loss, self.params)
                        for p, g in zip(self.params, grads):
                            p.grad = g
                        num_model_ops = len(recorder.trace.ops)
                        with recorder.host_reads_allowed(step_tensors):
                            optimizer.step()
                    ops = recorder.trace.ops
                    with recorder.paused():
                        candidates = scalar_candidates(
                            ops, num_model_ops, schema_arguments, produced_tensors(ops)
                        )
                return loss, grads, candidates, expected

            captured = capture(module, before, warm_up, record)
            ops = captured.recorder.trace.ops
            loss, grads, candidates, expected = captured.result
            self.scalars.find_places(candidates, expected)
            self.side_effects = captured.side_effects

            self.optimizer_state = {p: dict(optimizer.state[p]) for p in self.params}
            state = unique(
                module_state(module)
                + [
                    t
                    for e in self.optimizer_state.values()
                    for t in e.values()
                    if isinstance(t, torch.Tensor)
                ]
            )
            self.example_inputs = example.static_inputs + list(static_targets)
            self.step_replay = build_replay(
                ops,
                self.example_inputs,
                state,
                [loss] + list(grads),
                **options,
            )
            self.step_replay.register_scalars(self.scalars.places)
        except BaseException:
            before.drop_created_state()
            raise
        # The numbers of this optimizer's next step, not the nudged ones of the capture, for
        # the runs before the first `step` (a stream choice, a timeline).
        self.step_replay.set_scalars(self.scalars.current_values())
        self.replays = [self.step_replay]
        self._param_ids = _trainable_ids(module)
        # An optimizer without state (never stepped) makes it on its first step: that step
        # runs eagerly, and its state then moves into the tensors the replay updates.
        self.first_step_eager = any(not before.had_state(p) for p in self.params)
        if self.first_step_eager:
            before.drop_created_state()
        self._targets = list(static_targets)

    def snapshot(self) -> ModelSnapshot:
        """What a run on `example_inputs` changes: the model and the optimizer's state."""
        return ModelSnapshot(self.module, self.optimizer)

    def run_example(self) -> None:
        self.step_replay.run(self.example_inputs, False)

    def check_targets(self, targets: tuple) -> None:
        if len(targets) != len(self._targets):
            raise ValueError(
                f"expected {len(self._targets)} target tensor(s) (as at prepare), "
                f"got {len(targets)}"
            )
        for i, (got, expected) in enumerate(zip(targets, self._targets)):
            if (
                not isinstance(got, torch.Tensor)
                or got.shape != expected.shape
                or got.dtype != expected.dtype
                or got.device != expected.device
            ):
                raise ValueError(
                    f"targets[{i}]: expected {describe(expected)} (as at prepare), "
                    f"got {describe(got)}"
                )

    def step(
        self, args: tuple, kwargs: dict, inputs: list[torch.Tensor], targets: tuple
    ) -> torch.Tensor:
        """`args`/`kwargs`: the call as the user made it; `inputs`: its tensors, flattened."""
        self.check_targets(targets)
        _check_parameters(self.module, self._param_ids)
        self.scalars.check_unchanged()
        if self.first_step_eager:
            return self._eager_first_step(args, kwargs, targets)
        self.step_replay.set_scalars(self.scalars.current_values())
        outs = self.step_replay.run(list(inputs) + list(targets), True, 1)
        for p, g in zip(self.params, outs[1:]):
            p.grad = g
        return outs[0]

    def _eager_first_step(self, args, kwargs, targets) -> torch.Tensor:
        with torch.enable_grad():
            loss = self.loss_fn(self.module(*args, **kwargs), *targets)
            grads = torch.autograd.grad(loss, self.params)
        for p, g in zip(self.params, grads):
            p.grad = g
        self.optimizer.step()
        with torch.no_grad():
            for p, entries in self.optimizer_state.items():
                for k, replayed in entries.items():
                    created = self.optimizer.state[p][k]
                    if isinstance(replayed, torch.Tensor):
                        replayed.copy_(created)
                        self.optimizer.state[p][k] = replayed
        self.first_step_eager = False
        return loss.detach()
