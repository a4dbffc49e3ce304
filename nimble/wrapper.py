"""`Nimble`: wrap a module, prepare it once, replay it from C++."""

from __future__ import annotations

from typing import Any

import torch

from .errors import NotPreparedError
from .inference import InferenceReplay
from .streams import choose_streams
from .structure import ExampleCall
from .training import ForwardBackwardReplay, WholeStepReplay


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
        self._program = None  # an InferenceReplay, ForwardBackwardReplay or WholeStepReplay
        self._training = None  # the program, where it is a training one
        self._replay = None  # the program's first replay (the one `fast(x)` runs)
        self._copy_outputs = True
        self._tuned_report = []  # what use_tuned bound, per tunable op

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
        tuned: str | None = None,
        _graph_twin: bool = False,
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

        `tuned`: a tuning database (`nimble.tune`); binds its kernels as `use_tuned` does.

        `_graph_twin` (tests): replay a CPU model with a CUDA graph's semantics
        (`csrc/runtime/cpu/cpu_graph_executor.h`).
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
        options = dict(
            use_out_variants=use_out_variants,
            out_variant_max_bytes=out_variant_max_bytes,
            precompute_views=precompute_views,
            plan_memory=plan_memory,
            fold_batchnorm=fold_batchnorm,
            # An inference pass: training programs keep every copy they captured.
            drop_noop_ops=drop_noop_ops and not training,
            # The same for every device: the backend decides what a stream count means.
            streams=1 if streams == "auto" else streams,
            graph_twin=_graph_twin,
        )
        example = ExampleCall.of(example_inputs, example_kwargs, track_gradients=training)
        if not training:
            program = InferenceReplay(self.module, example, options)
        elif optimizer is None:
            program = ForwardBackwardReplay(self.module, example, options, copy_outputs)
        else:
            program = WholeStepReplay(
                self.module, example, options, loss_fn, optimizer, example_targets
            )
        if streams == "auto":
            choose_streams(program)
        self._program = program
        self._training = program if training else None
        self._replay = program.replays[0]
        self._outputs = None if training else program.outputs
        self._inputs = example.structure
        self._copy_outputs = copy_outputs
        self._prepared_training = self.module.training
        self._tuned_report = []
        if tuned is not None:
            self.use_tuned(tuned)
        return self

    # -- tuned kernels ---------------------------------------------------------------

    def use_tuned(
        self, database: str | None, *, any_device: bool = False, min_speedup: float = 1.0
    ) -> list[dict]:
        """Binds tuned kernels from a tuning database (`nimble.tune`) into the replay.

        Each tunable op's best record for this machine is checked against ATen on random
        inputs and timed side by side with ATen's kernel now; it is bound only if it is
        correct and faster. Records from another machine are used only with `any_device=True`
        (the report then says so). `min_speedup`: how much faster than ATen a kernel must be
        (0: bind every correct one). `use_tuned(None)` returns to ATen's kernels. Returns
        `tuned_report()`.
        """
        from ._C import kernels
        from .tune import _inference_replay

        replay = _inference_replay(self)
        if database is None:
            kernels.unbind(replay)
            self._tuned_report = []
            return []
        import os

        if not os.path.exists(database):
            raise FileNotFoundError(f"no tuning database at {database!r} (nimble.tune writes one)")
        self._tuned_report = kernels.bind(
            replay, database, any_device=any_device, min_speedup=min_speedup
        )
        return self.tuned_report()

    def tuned_report(self) -> list[dict]:
        """Per tunable op: the kernel chosen (family and config), ATen's and the tuned
        kernel's time per call when bound, the speedup, and why an op was not bound."""
        out = []
        for r in self._tuned_report:
            row = dict(r)
            row["family"] = r["kernel"].split(" ")[0].removeprefix("family=") if r["kernel"] else ""
            row["speedup"] = r["aten_ms"] / r["tuned_ms"] if r["tuned_ms"] > 0 else None
            out.append(row)
        return out

    def step(self, *args: Any, targets: Any = None, **kwargs: Any) -> torch.Tensor:
        """One training step replayed: forward, loss, backward and the optimizer update
        (after `prepare(..., training=True, loss_fn=..., optimizer=..., example_targets=...)`).
        `fast.step(x, y)`: the last positional argument is the targets unless `targets=` is
        given. Returns the loss; each parameter's `.grad` holds this step's gradient."""
        if not isinstance(self._training, WholeStepReplay):
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
        inputs = self._inputs.tensors(args, kwargs)
        return self._training.step(args, kwargs, inputs, targets)

    def _check_mode(self) -> None:
        if self.module.training != self._prepared_training:
            mode = "train" if self.module.training else "eval"
            raise NotPreparedError(
                f"the module was switched to {mode} mode after prepare; the captured trace "
                f"is for the other mode: call prepare() again"
            )

    # -- replay ----------------------------------------------------------------------

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self._replay is None:
            raise NotPreparedError(
                "Nimble was called before prepare(): call fast.prepare(example_inputs) once first"
            )
        self._check_mode()
        if (
            self._inputs.positional_tensors_only
            and not kwargs
            and len(args) == len(self._inputs.leaves)
            and all(isinstance(a, torch.Tensor) for a in args)
        ):
            inputs = list(args)
        else:
            inputs = self._inputs.tensors(args, kwargs)
        if self._training is not None:
            if isinstance(self._training, WholeStepReplay):
                raise NotPreparedError(
                    "this Nimble was prepared for whole training steps: call fast.step(x, targets)"
                )
            return self._training.forward(inputs)
        outputs = self._replay.run(inputs, self._copy_outputs)
        if self._outputs.single_tensor:
            return outputs[0]
        return self._outputs.rebuild(outputs)

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
        are put back afterwards; for inference, the model's buffers and the inputs."""
        from .visualize import write_trace

        with self._program.snapshot():
            _, ops = self.replay.run_timed(self._program.example_inputs)
        write_trace(path, self.schedule["ops"], ops)
