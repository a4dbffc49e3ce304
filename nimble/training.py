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

import statistics
import time
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from .capture import HostReadGuard, Recorder, build_replay, schema_arguments
from .errors import NotPreparedError
from .optimizer_scalars import OptimizerScalars, scalar_candidates


def _describe(t: Any) -> str:
    if isinstance(t, torch.Tensor):
        shape = "x".join(str(s) for s in t.shape) or "scalar"
        return f"Tensor[{shape}, {str(t.dtype).replace('torch.', '')}, {t.device}]"
    return repr(t)


def _tensors_in(values) -> list[torch.Tensor]:
    found = []
    for v in values:
        if isinstance(v, torch.Tensor):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            found.extend(t for t in v if isinstance(t, torch.Tensor))
    return found


def _produced_ids(ops) -> dict[int, torch.Tensor]:
    produced = {}
    for op in ops:
        outs = op.out if isinstance(op.out, (list, tuple)) else [op.out]
        for t in outs:
            if isinstance(t, torch.Tensor):
                produced[id(t)] = t
    return produced


def _unique(tensors) -> list[torch.Tensor]:
    seen, out = set(), []
    for t in tensors:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def module_state(module: torch.nn.Module) -> list[torch.Tensor]:
    return _unique(list(module.parameters()) + [b for b in module.buffers() if b is not None])


class TrainingSnapshot:
    """Everything a capture changes, put back afterwards: parameter and buffer values,
    `.grad` references, optimizer state values, the RNG."""

    def __init__(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
        self._tensors = [(t, t.detach().clone()) for t in module_state(module)]
        self._grads = [(p, p.grad) for p in module.parameters()]
        self._rng = torch.get_rng_state()
        self._optimizer = optimizer
        self._state = {}
        if optimizer is not None:
            for p, entries in optimizer.state.items():
                self._state[p] = {
                    k: (v, v.detach().clone() if isinstance(v, torch.Tensor) else v)
                    for k, v in entries.items()
                }

    def restore(self) -> None:
        with torch.no_grad():
            for tensor, saved in self._tensors:
                tensor.copy_(saved)
            for p, entries in self._state.items():
                for k, (original, saved) in entries.items():
                    if isinstance(original, torch.Tensor):
                        original.copy_(saved)
                    self._optimizer.state[p][k] = original
        for p, grad in self._grads:
            p.grad = grad
        torch.set_rng_state(self._rng)

    def had_state(self, p: torch.Tensor) -> bool:
        return bool(self._state.get(p))


def _choose_streams(replays: list, run_once, repeats: int = 10) -> None:
    """Keeps multi-stream replay where it measured faster than one stream (on a training
    step every replay changes the model: callers snapshot and restore around this)."""

    def median_s() -> float:
        for _ in range(2):
            run_once()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            run_once()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    single = median_s()
    for replay in replays:
        replay.set_streams(0)
    if all(r.num_streams == 1 for r in replays) or median_s() >= single * 0.97:
        for replay in replays:
            replay.set_streams(1)


def _gradient_targets(module: torch.nn.Module, optimizer) -> list[torch.Tensor]:
    params = [p for p in module.parameters() if p.requires_grad]
    if optimizer is None:
        return params
    owned = {id(p) for p in module.parameters()}
    in_groups = _unique(p for g in optimizer.param_groups for p in g["params"])
    foreign = [p for p in in_groups if id(p) not in owned]
    if foreign:
        raise ValueError(
            f"the optimizer updates {len(foreign)} tensor(s) that are not parameters of the "
            f"wrapped module (first: {_describe(foreign[0])}); nimble captures the module's"
        )
    return [p for p in in_groups if p.requires_grad]


def _check_loss(loss: Any) -> None:
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.is_floating_point():
        raise ValueError(
            f"loss_fn must return a scalar floating-point tensor, got {_describe(loss)}"
        )


class _ForwardBackward(torch.autograd.Function):
    """The paper's mode: forward replay in `forward`, backward replay in `backward`;
    parameters are inputs, so autograd accumulates their gradients as in eager."""

    @staticmethod
    def forward(ctx, owner: "TrainingReplay", *tensors):
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


class TrainingReplay:
    """What `Nimble.prepare(..., training=True)` builds; the wrapper delegates to it."""

    # -- the paper's mode ----------------------------------------------------------------

    @classmethod
    def forward_backward(
        cls, module, static_args, static_kwargs, static_inputs, options, copy_outputs, streams
    ) -> "TrainingReplay":
        self = cls()
        self.module = module
        self.optimizer = None
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.num_inputs = len(static_inputs)
        self.copy_outputs = copy_outputs
        self.generation = 0
        wrt_inputs = [i for i, t in enumerate(static_inputs) if t.requires_grad]

        snapshot = TrainingSnapshot(module, None)
        try:
            with torch.enable_grad():
                warm = module(*static_args, **static_kwargs)  # lazily created state
                snapshot.restore()
                del warm
                recorder = Recorder()
                with HostReadGuard(), recorder:
                    output = module(*static_args, **static_kwargs)
                    num_forward = len(recorder.trace.ops)
                    out_leaves, out_spec = tree_flatten(output)
                    outs = [t for t in out_leaves if isinstance(t, torch.Tensor)]
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
        finally:
            snapshot.restore()

        ops = recorder.trace.ops
        forward_ops, backward_ops = ops[:num_forward], ops[num_forward:]
        produced = _produced_ids(forward_ops)
        used_in_backward = _unique(
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
            forward_ops,
            static_inputs,
            state,
            outs + saved,
            streams=1 if streams == "auto" else streams,
            **options,
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
            streams=1 if streams == "auto" else streams,
            **options,
        )
        self.replays = [self.forward_replay, self.backward_replay]
        self._static_inputs = static_inputs
        self._param_ids = [id(p) for p in self.params]
        self._out_spec = out_spec
        self._out_leaves = [None if isinstance(v, torch.Tensor) else v for v in out_leaves]
        self._out_tensor_positions = [
            i for i, v in enumerate(out_leaves) if isinstance(v, torch.Tensor)
        ]
        if streams == "auto":
            snapshot = TrainingSnapshot(module, None)
            try:
                _choose_streams(self.replays, self._run_example_forward_backward)
            finally:
                snapshot.restore()
        return self

    def _run_example_forward_backward(self) -> None:
        outs = self.forward_replay.run(self._static_inputs, False, 0)
        saved = outs[self.num_user_outputs :]
        used = [self._static_inputs[i] for i in self.backward_input_positions]
        self.backward_replay.run(self.example_gos + saved + used, False)

    def example_inputs(self) -> list[torch.Tensor]:
        """The inputs of `replays[0]` at prepare (the whole step's include the targets)."""
        return self._static_step_inputs if self.optimizer is not None else self._static_inputs

    def check_parameters(self) -> None:
        now = [id(p) for p in self.module.parameters() if p.requires_grad]
        if now != self._param_ids:
            raise NotPreparedError(
                "the module's parameters were replaced, added, removed or (un)frozen since "
                "prepare; call prepare() again"
            )

    def forward(self, inputs: list[torch.Tensor]):
        self.check_parameters()
        for i, (got, prepared) in enumerate(zip(inputs, self._static_inputs)):
            if got.requires_grad and not prepared.requires_grad:
                raise NotPreparedError(
                    f"input {i} requires grad, but did not at prepare: the captured backward "
                    f"computes no gradient for it; prepare with an example that requires grad"
                )
        outs = _ForwardBackward.apply(self, *inputs, *self.params)
        leaves = list(self._out_leaves)
        for position, tensor in zip(self._out_tensor_positions, outs):
            leaves[position] = tensor
        return tree_unflatten(leaves, self._out_spec)

    # -- the whole step ------------------------------------------------------------------

    @classmethod
    def whole_step(
        cls,
        module,
        optimizer,
        loss_fn,
        static_args,
        static_kwargs,
        static_inputs,
        static_targets,
        options,
        streams,
    ) -> "TrainingReplay":
        self = cls()
        self.module = module
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        params = _gradient_targets(module, optimizer)
        self.scalars = OptimizerScalars(optimizer)
        before = TrainingSnapshot(module, optimizer)
        snapshot = before
        try:
            with torch.enable_grad():
                # Warm-up, an eager step: lazily created module state and optimizer state
                # exist before the recorded step.
                loss = loss_fn(module(*static_args, **static_kwargs), *static_targets)
                _check_loss(loss)
                grads = torch.autograd.grad(loss, params, allow_unused=True)
            self.params = [p for p, g in zip(params, grads) if g is not None]
            for p, g in zip(params, grads):
                p.grad = g
            optimizer.step()
            del loss, grads
            snapshot.restore()
            step_tensors = [
                v
                for p in self.params
                for v in optimizer.state[p].values()
                if isinstance(v, torch.Tensor)
            ]
            with self.scalars.nudged():
                expected = self.scalars.expected_values()
                recorder = Recorder()
                with HostReadGuard(), recorder, torch.enable_grad():
                    loss = loss_fn(module(*static_args, **static_kwargs), *static_targets)
                    grads = torch.autograd.grad(loss, self.params)
                    for p, g in zip(self.params, grads):
                        p.grad = g
                    num_model_ops = len(recorder.trace.ops)
                    with recorder.host_reads_allowed(step_tensors):
                        optimizer.step()
                ops = recorder.trace.ops
                self.scalars.find_places(
                    scalar_candidates(ops, num_model_ops, schema_arguments, _produced_ids(ops)),
                    expected,
                )
        finally:
            snapshot.restore()

        self.optimizer_state = {p: dict(optimizer.state[p]) for p in self.params}
        state = _unique(
            module_state(module)
            + [
                t
                for e in self.optimizer_state.values()
                for t in e.values()
                if isinstance(t, torch.Tensor)
            ]
        )
        self.step_replay = build_replay(
            ops,
            static_inputs + list(static_targets),
            state,
            [loss] + list(grads),
            streams=1 if streams == "auto" else streams,
            **options,
        )
        self.step_replay.register_scalars(self.scalars.places)
        self.replays = [self.step_replay]
        self._param_ids = [id(p) for p in module.parameters() if p.requires_grad]
        self._static_step_inputs = static_inputs + list(static_targets)
        if streams == "auto":
            timing = TrainingSnapshot(module, optimizer)
            try:
                self.step_replay.set_scalars(self.scalars.current_values())
                _choose_streams(
                    self.replays, lambda: self.step_replay.run(self._static_step_inputs, False)
                )
            finally:
                timing.restore()
        # An optimizer without state (never stepped) makes it on its first step: that step
        # runs eagerly, and its state then moves into the tensors the replay updates.
        self.first_step_eager = any(not before.had_state(p) for p in self.params)
        if self.first_step_eager:
            for p in self.params:
                if not before.had_state(p):
                    del optimizer.state[p]
        self._targets = [t for t in static_targets]
        return self

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
                    f"targets[{i}]: expected {_describe(expected)} (as at prepare), "
                    f"got {_describe(got)}"
                )

    def step(
        self, args: tuple, kwargs: dict, inputs: list[torch.Tensor], targets: tuple
    ) -> torch.Tensor:
        """`args`/`kwargs`: the call as the user made it; `inputs`: its tensors, flattened."""
        self.check_targets(targets)
        self.check_parameters()
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
