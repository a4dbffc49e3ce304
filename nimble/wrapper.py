"""`Nimble`: wrap a module, prepare it once, replay it from C++."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from .capture import HostReadGuard, Recorder, build_replay
from .errors import NotPreparedError, UnsupportedOpError


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        shape = "x".join(str(s) for s in value.shape) or "scalar"
        return f"Tensor[{shape}, {str(value.dtype).replace('torch.', '')}, {value.device}]"
    return repr(value)


def _describe_all(leaves: list) -> str:
    return "(" + ", ".join(_describe(v) for v in leaves) + ")"


@dataclass
class _Example:
    """The example call of prepare, flattened, with static copies of its tensors (the
    replay reads its inputs from buffers of its own: the capture runs on those)."""

    args: tuple
    kwargs: dict
    leaves: list
    spec: Any
    tensor_positions: list[int]
    static_leaves: list

    @classmethod
    def of(cls, example_inputs: Any, example_kwargs: dict | None) -> "_Example":
        args = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
        kwargs = dict(example_kwargs or {})
        leaves, spec = tree_flatten((tuple(args), kwargs))
        positions = [i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor)]
        static = list(leaves)
        for i in positions:
            static[i] = leaves[i].detach().clone()
        return cls(tuple(args), kwargs, leaves, spec, positions, static)

    def static_call(self) -> tuple[tuple, dict]:
        return tree_unflatten(self.static_leaves, self.spec)

    @property
    def static_inputs(self) -> list[torch.Tensor]:
        return [self.static_leaves[i] for i in self.tensor_positions]

    def restore_static_inputs(self) -> None:
        """The static copies hold the example's values again (runs may write inputs)."""
        for i in self.tensor_positions:
            self.static_leaves[i].copy_(self.leaves[i])


class _ModelState:
    """A snapshot of a module's parameters, buffers and the RNG, restored after capture so
    that prepare leaves the model exactly as it found it."""

    def __init__(self, module: torch.nn.Module) -> None:
        self._tensors = [(t, t.detach().clone()) for t in self._all(module)]
        self._rng = torch.get_rng_state()

    @staticmethod
    def _all(module: torch.nn.Module) -> list[torch.Tensor]:
        return list(module.parameters()) + [b for b in module.buffers() if b is not None]

    def restore(self) -> None:
        with torch.no_grad():
            for tensor, saved in self._tensors:
                tensor.copy_(saved)
        torch.set_rng_state(self._rng)


class Nimble(torch.nn.Module):
    """Captures a static module's kernel launches once and replays them.

    >>> fast = Nimble(model)
    >>> fast.prepare(example_input)
    >>> y = fast(x)           # same as model(x), without the framework overhead

    By default the outputs handed back are the caller's own (a replay never changes a
    tensor it returned earlier). Outputs made by an op are fresh tensors on every call;
    `prepare(..., copy_outputs=False)` also hands out, without a copy, outputs that live
    in memory the replay keeps (a view of a parameter or input; every output of a CUDA
    graph), which the next call may overwrite.
    """

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"Nimble wraps a torch.nn.Module, got {type(module).__name__}")
        self.module = module
        self._replay = None
        self._training = None
        self._copy_outputs = True

    # -- prepare ---------------------------------------------------------------------

    def prepare(
        self,
        example_inputs: Any,
        example_kwargs: dict | None = None,
        *,
        copy_outputs: bool = True,
        streams: int | str = 1,
        fold_batchnorm: bool = False,
        plan_memory: bool = True,
        use_out_variants: bool = True,
        out_variant_max_bytes: int = 0,
        precompute_views: bool = True,
        drop_noop_ops: bool = True,
        training: bool = False,
        loss_fn=None,
        optimizer: torch.optim.Optimizer | None = None,
        example_targets: Any = None,
    ) -> "Nimble":
        """Capture one run of the module on `example_inputs` (a tensor or a tuple of
        positional arguments) and build the replay.

        `streams`: 1 runs the ops in trace order on the calling thread; N spreads them over
        N CPU streams (worker threads) with Nimble's stream assignment; 'auto' times one
        stream against the default number of streams (chosen from the cores and the
        width of the op graph) on the example and keeps the faster.

        `drop_noop_ops` (inference): copies and aliases (`clone`, `detach`, ...) whose result
        readers cannot tell from their input are not replayed; copies whose source or
        result is written afterwards, that change the layout, or that are returned, stay.

        `training=True` captures forward and backward: `fast(x)` then returns outputs attached
        to autograd, and `.backward()` replays the captured backward, accumulating into each
        parameter's `.grad` as eager does. With `loss_fn`, `optimizer` and
        `example_targets` as well, the whole step (forward, `loss_fn(output, *targets)`,
        backward, `optimizer.step()`) is one program run by `fast.step(x, targets)`.
        """
        if not (streams == "auto" or (isinstance(streams, int) and streams >= 1)):
            raise ValueError(f"streams must be 'auto' or a positive int, got {streams!r}")
        whole_step = [loss_fn is not None, optimizer is not None, example_targets is not None]
        if any(whole_step) and not (training and all(whole_step)):
            raise ValueError(
                "the whole-step mode needs training=True with loss_fn, optimizer and "
                "example_targets together"
            )
        if training and fold_batchnorm:
            raise ValueError(
                "fold_batchnorm is an inference pass; it cannot be used with training=True"
            )
        example = _Example.of(example_inputs, example_kwargs)
        static_args, static_kwargs = example.static_call()
        self._training = None
        if training:
            options = dict(
                use_out_variants=use_out_variants,
                out_variant_max_bytes=out_variant_max_bytes,
                precompute_views=precompute_views,
                plan_memory=plan_memory,
                # An inference pass: training programs keep every copy they captured.
                drop_noop_ops=False,
            )
            return self._prepare_training(
                example, copy_outputs, streams, loss_fn, optimizer, example_targets, options
            )
        state = _ModelState(self.module)
        identities = self._state_identities()
        try:
            with torch.no_grad():
                # Warm-up: lazily created state exists before the recorded run.
                warm_args, warm_kwargs = tree_unflatten(
                    [
                        v.clone() if isinstance(v, torch.Tensor) else v
                        for v in example.static_leaves
                    ],
                    example.spec,
                )
                self.module(*warm_args, **warm_kwargs)
                state.restore()
                recorder = Recorder()
                with HostReadGuard(), recorder:
                    output = self.module(*static_args, **static_kwargs)
        finally:
            state.restore()
        if self._state_identities() != identities:
            raise UnsupportedOpError(
                "the module replaced a parameter or buffer object during forward (e.g. "
                "`self.buf = self.buf + 1`); nimble replays in-place updates only: write "
                "`self.buf.add_(1)` or `self.buf.copy_(...)` instead"
            )
        example.restore_static_inputs()

        out_leaves, out_spec = tree_flatten(output)
        out_tensor_positions = [i for i, v in enumerate(out_leaves) if isinstance(v, torch.Tensor)]
        self._replay = build_replay(
            recorder.trace.ops,
            example.static_inputs,
            _ModelState._all(self.module),
            [out_leaves[i] for i in out_tensor_positions],
            use_out_variants=use_out_variants,
            out_variant_max_bytes=out_variant_max_bytes,
            precompute_views=precompute_views,
            fold_batchnorm=fold_batchnorm,
            plan_memory=plan_memory,
            drop_noop_ops=drop_noop_ops,
            streams=1 if streams == "auto" else streams,
        )
        self._static_inputs = example.static_inputs
        if streams == "auto":
            # Timing replays run the model: keep its state, the RNG and the inputs intact.
            state = _ModelState(self.module)
            try:
                self._choose_streams()
            finally:
                state.restore()
                example.restore_static_inputs()

        self._remember_inputs(example, copy_outputs)
        self._out_spec = out_spec
        self._out_leaves = [None if isinstance(v, torch.Tensor) else v for v in out_leaves]
        self._out_tensor_positions = out_tensor_positions
        # The common call, positional tensors in and one tensor out, skips the pytrees.
        self._single_tensor_output = isinstance(output, torch.Tensor)
        return self

    def _remember_inputs(self, example: "_Example", copy_outputs: bool) -> None:
        self._in_spec = example.spec
        self._in_leaves = [None if isinstance(v, torch.Tensor) else v for v in example.leaves]
        self._in_tensor_positions = example.tensor_positions
        self._copy_outputs = copy_outputs
        self._prepared_training = self.module.training
        self._positional_tensors_only = not example.kwargs and (
            len(example.tensor_positions) == len(example.leaves) == len(example.args)
        )

    def _prepare_training(
        self,
        example: "_Example",
        copy_outputs,
        streams,
        loss_fn,
        optimizer,
        example_targets,
        options,
    ) -> "Nimble":
        from .training import TrainingReplay

        devices = {t.device.type for t in example.static_inputs + list(self.module.parameters())}
        if devices - {"cpu"}:
            # The CUDA graph backend runs the program once to warm up when it is built, which
            # would apply an optimizer step, and bakes scalar arguments (the learning rate)
            # into the graph: training there needs both handled first.
            raise UnsupportedOpError(
                f"training replays run on the CPU backend; got tensors on {sorted(devices)}. "
                "CUDA training is not built yet"
            )

        for i in example.tensor_positions:
            if example.leaves[i].requires_grad:  # its gradient is part of the captured backward
                example.static_leaves[i].requires_grad_()
        static_args, static_kwargs = example.static_call()
        static_inputs = example.static_inputs
        identities = self._state_identities()
        if optimizer is None:
            self._training = TrainingReplay.forward_backward(
                self.module,
                static_args,
                static_kwargs,
                static_inputs,
                options,
                copy_outputs,
                streams,
            )
        else:
            targets = (
                example_targets
                if isinstance(example_targets, (tuple, list))
                else (example_targets,)
            )
            if not all(isinstance(t, torch.Tensor) for t in targets):
                raise ValueError(
                    "example_targets must be a tensor or a tuple of tensors, "
                    f"got {_describe_all(list(targets))}"
                )
            static_targets = tuple(t.detach().clone() for t in targets)
            self._training = TrainingReplay.whole_step(
                self.module,
                optimizer,
                loss_fn,
                static_args,
                static_kwargs,
                static_inputs,
                static_targets,
                options,
                streams,
            )
        if self._state_identities() != identities:
            self._training = None
            raise UnsupportedOpError(
                "the module replaced a parameter or buffer object during forward; nimble "
                "replays in-place updates only"
            )
        self._replay = self._training.replays[0]
        self._static_inputs = static_inputs
        self._remember_inputs(example, copy_outputs)
        return self

    def step(self, *args: Any, targets: Any = None, **kwargs: Any) -> torch.Tensor:
        """One training step replayed: forward, loss, backward and the optimizer update
        (after `prepare(..., training=True, loss_fn=..., optimizer=..., example_targets=...)`).
        `fast.step(x, y)`: the last positional argument is the targets unless `targets=` is
        given. Returns the loss; each parameter's `.grad` holds this step's gradient."""
        if self._training is None or self._training.optimizer is None:
            raise NotPreparedError(
                "step() needs prepare(example_inputs, training=True, loss_fn=..., "
                "optimizer=..., example_targets=...) first"
            )
        if targets is None:
            if not args:
                raise ValueError("step(x, targets): no targets given")
            args, targets = args[:-1], args[-1]
        targets = tuple(targets) if isinstance(targets, (tuple, list)) else (targets,)
        self._check_mode()
        inputs = self._input_tensors(args, kwargs)
        return self._training.step(args, kwargs, inputs, targets)

    def _check_mode(self) -> None:
        if self.module.training != self._prepared_training:
            mode = "train" if self.module.training else "eval"
            raise NotPreparedError(
                f"the module was switched to {mode} mode after prepare; the captured trace "
                f"is for the other mode: call prepare() again"
            )

    def _choose_streams(self, repeats: int = 15) -> None:
        """Keeps multi-stream replay only where it measured faster than one stream."""

        def median_s() -> float:
            for _ in range(3):
                self._replay.run(self._static_inputs, False)
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                self._replay.run(self._static_inputs, False)
                times.append(time.perf_counter() - start)
            return statistics.median(times)

        single = median_s()
        self._replay.set_streams(0)  # the default count for this machine and graph
        if self._replay.num_streams == 1 or median_s() >= single * 0.97:
            self._replay.set_streams(1)

    def _state_identities(self) -> list[int]:
        return [id(t) for t in _ModelState._all(self.module)]

    # -- replay ----------------------------------------------------------------------

    def _input_tensors(self, args: tuple, kwargs: dict) -> list[torch.Tensor]:
        leaves, spec = tree_flatten((args, kwargs))
        if spec != self._in_spec:
            expected = tree_unflatten(
                [
                    v if v is not None or i not in self._in_tensor_positions else "Tensor"
                    for i, v in enumerate(self._in_leaves)
                ],
                self._in_spec,
            )
            raise ValueError(
                f"expected the arguments structured as at prepare, {expected}, "
                f"got {_describe_all(leaves)}"
            )
        tensor_positions = set(self._in_tensor_positions)
        for i, (got, expected) in enumerate(zip(leaves, self._in_leaves)):
            if i in tensor_positions:
                if not isinstance(got, torch.Tensor):
                    raise ValueError(f"argument leaf {i}: expected a tensor, got {_describe(got)}")
            elif got != expected:
                raise ValueError(
                    f"argument leaf {i}: expected {expected!r} (as at prepare), got {got!r}; "
                    f"non-tensor arguments are part of the captured trace"
                )
        return [leaves[i] for i in self._in_tensor_positions]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self._replay is None:
            raise NotPreparedError(
                "Nimble was called before prepare(): call fast.prepare(example_inputs) once first"
            )
        self._check_mode()
        if (
            self._positional_tensors_only
            and not kwargs
            and len(args) == len(self._in_leaves)
            and all(isinstance(a, torch.Tensor) for a in args)
        ):
            inputs = list(args)
        else:
            inputs = self._input_tensors(args, kwargs)
        if self._training is not None:
            if self._training.optimizer is not None:
                raise NotPreparedError(
                    "this Nimble was prepared for whole training steps: call fast.step(x, targets)"
                )
            return self._training.forward(inputs)
        outputs = self._replay.run(inputs, self._copy_outputs)
        if self._single_tensor_output:
            return outputs[0]
        leaves = list(self._out_leaves)
        for position, tensor in zip(self._out_tensor_positions, outputs):
            leaves[position] = tensor
        return tree_unflatten(leaves, self._out_spec)

    __call__ = forward

    # -- introspection ---------------------------------------------------------------

    @property
    def replay(self):
        if self._replay is None:
            raise NotPreparedError("Nimble has no replay before prepare()")
        return self._replay

    @property
    def num_ops(self) -> int:
        return self.replay.num_ops

    @property
    def schedule(self) -> dict:
        """Logical and physical stream counts, syncs, and each op's streams."""
        info = self.replay.schedule()
        info["ops"] = [op["name"] for op in self.replay.ops()]
        return info

    @property
    def memory(self) -> dict:
        """Bytes of the replay's preallocated buffers, with and without memory planning."""
        return self.replay.memory()

    def to_dot(self, path: str) -> None:
        """Writes the op dependency graph as Graphviz DOT, physical streams as colours."""
        from .visualize import write_dot

        write_dot(path, self.schedule, self.replay.dependencies)

    def trace(self, path: str) -> None:
        """Writes a Chrome/Perfetto trace-event JSON timeline of one replay (on the
        example inputs): one row per stream, one slice per op. For a training replay
        (the forward replay, or the whole step) the model, `.grad` and optimizer state
        are put back afterwards."""
        from .visualize import write_trace

        inputs = self._static_inputs
        snapshot = None
        if self._training is not None:
            from .training import TrainingSnapshot

            snapshot = TrainingSnapshot(self.module, self._training.optimizer)
            inputs = self._training.example_inputs()
        try:
            total_ns, ops = self.replay.run_timed(inputs)
        finally:
            if snapshot is not None:
                snapshot.restore()
        write_trace(path, self.schedule["ops"], ops)
