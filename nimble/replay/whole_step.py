"""The whole training step as one replay: forward, `loss_fn(output, *targets)`, backward and
`optimizer.step()`, captured together and run by `Nimble.step`.

It is captured as the paper's mode (training.py) is, on through the loss and the optimizer's
update: gradients come from `torch.autograd.grad` and are set as `.grad` the way
`zero_grad(); backward()` leaves them, and the optimizer's step-dependent numbers (learning
rate, bias corrections) are found in the trace and fed to the replay before every step
(optimizer_scalars.py). On a graph backend Adam and AdamW run in their device form there
(step counts and bias corrections on the device), so that a step is one launch.

A step's host work is kept off the device's critical path: each input and target is one
copy into the replay's buffer (queued on the stream, as the launch is), the learning rate
is a fill queued the same way, the loss is the replay's own buffer unless the caller asked
for copies (`copy_outputs`), and nothing waits for the device.
"""

from __future__ import annotations

from typing import Any

import torch

from .build_replay import Handover, schema_arguments
from .capture import capture, produced_tensors
from .model_snapshot import ModelSnapshot, module_state, unique
from .model_watch import TrainableParameters
from .optimizer_scalars import OptimizerScalars, scalar_candidates
from .structure import ExampleCall, describe, describe_all


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


class WholeStepReplay:
    """`prepare(training=True, loss_fn=..., optimizer=..., example_targets=...)`: forward,
    loss, backward and the optimizer update as one replay, run by `step`. Built by prepare's
    pipeline (pipeline.py): it captures here and hands its one part over there."""

    check = None  # nothing is lowered in training: the part is built as it is
    trace_ops = None

    def __init__(
        self,
        module: torch.nn.Module,
        example: ExampleCall,
        options,
        loss_fn,
        optimizer: torch.optim.Optimizer,
        example_targets: Any,
        copy_loss: bool = True,
    ) -> None:
        static_targets = _static_targets(example_targets)
        static_args, static_kwargs = example.static_args, example.static_kwargs
        self.module = module
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        params = _gradient_targets(module, optimizer)
        # Backends that bake scalars in (a graph) capture again when one changes.
        graph = options.graph_twin or any(p.is_cuda for p in params)
        self.scalars = OptimizerScalars(optimizer, device_steps=graph)
        self.scalars.move_steps_to_device()
        self.copy_loss = copy_loss

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
            self.scalars.move_steps_to_device()  # the state this step made

        def record(recorder):
            step_tensors = [
                v
                for p in self.params
                for v in optimizer.state[p].values()
                if isinstance(v, torch.Tensor)
            ]
            with self.scalars.nudged(recorder.paused):
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

        # The capture drops the optimizer state the warm-up step made when it fails; so does
        # a failure after it (out of memory, an op the builder refuses): prepare leaves the
        # optimizer as it found it.
        captured = capture(module, record, warm_up, optimizer=optimizer)
        self._before = captured.snapshot
        try:
            ops = captured.recorder.trace.ops
            loss, grads, candidates, expected = captured.result
            self.scalars.find_places(candidates, expected)
            self.side_effects = captured.side_effects

            self.optimizer_state = {p: dict(optimizer.state[p]) for p in self.params}
            state = unique(
                module_state(module)
                + self.scalars.lr_tensors
                + [
                    t
                    for e in self.optimizer_state.values()
                    for t in e.values()
                    if isinstance(t, torch.Tensor)
                ]
            )
            self.example_inputs = example.static_inputs + list(static_targets)
            self.parts = [Handover(ops, self.example_inputs, state, [loss] + list(grads))]
        except BaseException:
            self.abandon()
            raise
        self._targets = list(static_targets)
        self.replays = []

    def abandon(self) -> None:
        """After a failure past the capture (out of memory, an op the builder refuses), the
        optimizer is left without the state the warm-up step made, as prepare found it."""
        self._before.drop_created_state()

    def adopt(self, replays: list) -> None:
        try:
            (self.step_replay,) = replays
            self.step_replay.register_scalars(self.scalars.places)
        except BaseException:
            self.abandon()
            raise
        # The numbers of this optimizer's next step, not the nudged ones of the capture, for
        # the runs before the first `step` (a stream choice, a timeline).
        self._baked = self.scalars.current_values()
        self.step_replay.set_scalars(self._baked)
        self.scalars.write_device_values()
        # How often a step found the baked-in numbers changed (a graph backend captures the
        # step again each time): with the device form of Adam, only when the user changes
        # betas, eps or weight decay.
        self.recaptures = 0
        self.replays = replays
        self._trainable = TrainableParameters(self.module)
        from .. import _C

        self._gradient_targets = _C.GradientTargets(self.params)
        # An optimizer without state (never stepped) makes it on its first step: that step
        # runs eagerly, and its state then moves into the tensors the replay updates.
        self.first_step_eager = any(not self._before.had_state(p) for p in self.params)
        if self.first_step_eager:
            self._before.drop_created_state()
        self._before = None  # its copies of the model and optimizer state are not kept

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
        self._trainable.check()
        self.scalars.check_unchanged()
        if self.first_step_eager:
            return self._eager_first_step(args, kwargs, targets)
        values = self.scalars.current_values()
        if values != self._baked:
            self.recaptures += 1
            self._baked = values
            self.step_replay.set_scalars(values)
        self.scalars.write_device_values()
        # The gradients become the parameters' .grad in C++ (a graph hands out the same
        # buffers every step); only the loss comes back.
        return self.step_replay.run_step(list(inputs) + list(targets), self.copy_loss,
                                         self._gradient_targets)

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
