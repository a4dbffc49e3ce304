"""`Nimble`: wrap a module, prepare it once, replay it from C++."""

from __future__ import annotations

import copy
import dataclasses
import os
import warnings
from typing import Any

import torch

from . import lowered_tuning, model_watch
from ..errors import NotPreparedError, SideEffectError, StaleModelError
from .cuda_training import check_training_devices
from .pipeline import program_for
from .prepare_options import PrepareOptions, keyword_signature
from .streams import choose_streams
from .structure import ExampleCall
from .whole_step import WholeStepReplay


_PREPARES_PER_CALL = 3  # then a call raises StaleModelError (a model changed by each prepare)


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

    The model may change between calls. In-place writes (an optimizer step,
    `load_state_dict`) and a parameter's storage swapped with its layout kept (`p.data = t`
    of the same shape) are followed. Anything else the replay cannot follow (a parameter,
    buffer or submodule replaced, added or removed, a layout or dtype converted, a hook
    added or removed, train/eval switched) is found before the next call runs: by default
    the model is prepared again, with a one-line warning naming the change;
    `prepare(..., on_change="error")` raises `StaleModelError` instead.
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
        self._options = None  # prepare's keywords, for preparing again after a change
        self._example = None  # prepare's example call (static copies)
        self._tuned_args = None  # use_tuned's arguments, bound again after preparing again
        # what the database the CPU lowering ran (self._options.lowered_with) chose, by
        # convolution shape
        self._lowered_choices = {}
        self._model_watch = None  # checked before every call (nimble/replay/model_watch.py)

    # -- prepare ---------------------------------------------------------------------

    def prepare(self, example_inputs: Any, example_kwargs: dict | None = None, *,
                example_targets: Any = None, **options) -> "Nimble":
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

        `lower_for_cpu` (inference on the CPU): convolutions and linear layers become calls of
        kernels with their weights packed once (nimble's own, or oneDNN's) and the residual
        add and activation after them fused (batch norms are folded into them first); False
        replays ATen's convolutions as captured.

        `tuned`: a tuning database (`nimble.tune`): each lowered convolution runs the kernel
        the database found fastest for its shape among the lowering's own where the replay
        runs it faster than the rule's (timed side by side, lowered_tuning.py), and ops left
        to ATen get tuned kernels bound as `use_tuned` does.

        `on_change`: what a call does when the model changed since prepare in a way the
        replay cannot follow: "reprepare" (prepare again on that call's inputs, with these
        options and the same tuned kernels, warning once per change) or "error" (raise
        `StaleModelError`, before anything runs).

        `side_effects`: hooks that ran during the capture and attributes the forward
        changed are not repeated by a replay: "warn" names them, "error" raises
        `SideEffectError` and leaves the Nimble as it was.

        `_graph_twin` (tests): replay a CPU model with a CUDA graph's semantics
        (`csrc/runtime/cpu/cpu_graph_executor.h`).
        """
        opts = PrepareOptions.of(options)
        opts.check_whole_step(example_targets)
        _refuse_lazy_modules(self.module)
        example = ExampleCall.of(example_inputs, example_kwargs, track_gradients=opts.training)
        if opts.training:
            check_training_devices(self.module, example)
        program, lowered_choices = program_for(self.module, example, opts, example_targets)
        if program.side_effects:
            if opts.side_effects == "error":
                raise SideEffectError(
                    f"prepare: {program.side_effects.describe()}. Remove them, or "
                    f"prepare(..., side_effects='warn') to replay without them"
                )
            warnings.warn(f"nimble: {program.side_effects.describe()}", stacklevel=2)
        if opts.streams == "auto":
            choose_streams(program)
            opts = opts.replace(streams=program.replays[0].num_streams)
        self._model_watch = None
        if opts._watch_model:
            self._watch(program)
        self._program = program
        self._training = program if opts.training else None
        self._replay = program.replays[0]
        self._outputs = None if opts.training else program.outputs
        self._inputs = example.structure
        self._example = example
        self._copy_outputs = opts.copy_outputs
        # Kept to prepare again after a change: the tuned database as the lowering used it.
        self._options = opts.replace(tuned=None, _lowered_with=opts.lowered_with)
        self._tuned_report = []
        self._tuned_args = None
        self._lowered_choices = lowered_choices
        if opts.tuned is not None:
            self.use_tuned(opts.tuned)
        return self

    def _prepare_with(self, args, kwargs, options: PrepareOptions, example_targets=None):
        """prepare with options kept from an earlier prepare."""
        keywords = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
        return self.prepare(args, kwargs, example_targets=example_targets, **keywords)

    def _watch(self, program) -> None:
        """Names the program's parameters and buffers, and has its entry replay check the
        model's structure before every call (nimble/replay/model_watch.py)."""
        watch = model_watch.watch(self.module, owner=self)
        names = model_watch.state_names(self.module)
        for replay in program.replays:
            replay.set_state_names(names)
        program.replays[0].set_watch(watch)
        self._model_watch = watch

    def _prepare_again(self, change: StaleModelError, args: tuple, kwargs: dict, targets=None):
        """After a change the replay cannot follow: prepare again on this call, or raise."""
        if self._options.on_change == "error":
            raise change
        warnings.warn(
            f"nimble: {change}; preparing again (prepare(..., on_change='error') raises instead)",
            stacklevel=3,
        )
        tuned = self._tuned_args
        self._prepare_with(args, kwargs, self._options, example_targets=targets)
        if tuned is not None and tuned[0] is not None:
            self.use_tuned(*tuned)

    def _prepare_again_and_run(self, change: StaleModelError, run, args: tuple, kwargs: dict,
                               targets=None):
        """`_prepare_again`, then `run()`; a change between the two (a finalizer removing a
        hook, run by the cycle collector the capture paused) prepares again too."""
        for _ in range(_PREPARES_PER_CALL):
            self._prepare_again(change, args, kwargs, targets)
            try:
                return run()
            except StaleModelError as again:
                change = again
        raise change

    # -- tuned kernels ---------------------------------------------------------------

    def use_tuned(
        self, database: str | None, *, any_device: bool = False, min_speedup: float = 1.0
    ) -> list[dict]:
        """Binds tuned kernels from a tuning database (`nimble.tune`) into the replay.

        A replay whose convolutions are lowered (`lower_for_cpu`, the default) is built again
        so that each runs the lowering's kernel the database found fastest for its shape
        (a record of the "prepacked" family) where the replay runs it faster than the rule's
        own choice, timed side by side in the replay: tuning never makes a lowered
        convolution slower than the untuned default. The report lists them.
        Each op left to ATen gets its best record for this machine, checked against ATen
        on random inputs and timed side by side with ATen's kernel now; it is bound only if
        it is correct and faster. Records from another machine are used only with `any_device=True`
        (the report then says so). `min_speedup`: how much faster than ATen a kernel must be
        (0: bind every correct one). `use_tuned(None)` returns to ATen's kernels. Returns
        `tuned_report()`.
        """
        from .._C import kernels
        from .tunable import inference_replay

        replay = inference_replay(self)
        if database is not None and not os.path.exists(database):
            raise FileNotFoundError(f"no tuning database at {database!r} (nimble.tune writes one)")
        wanted = None if database is None else (database, any_device)
        if self._options.lowers and self._options.lowered_with != wanted:
            # The lowering picks its kernels while it builds the program: build it again.
            with warnings.catch_warnings():  # prepare named them already
                warnings.simplefilter("ignore")
                self._prepare_with(self._example.static_args, self._example.static_kwargs,
                                   self._options.replace(_lowered_with=wanted))
            replay = inference_replay(self)
        self._tuned_args = (database, any_device, min_speedup)
        if database is None:
            kernels.unbind(replay)
            self._tuned_report = []
            return []
        lowered = lowered_tuning.report_rows(replay, self._lowered_choices)
        self._tuned_report = lowered + kernels.bind(
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
        inputs = self._call_tensors(args, kwargs)
        try:
            if self._model_watch is not None:  # the structure's change named first
                self._model_watch.check()
            return self._training.step(args, kwargs, inputs, targets)
        except StaleModelError as change:
            return self._prepare_again_and_run(change, lambda: self._training.step(
                args, kwargs, self._call_tensors(args, kwargs), targets), args, kwargs, targets)

    # -- replay ----------------------------------------------------------------------

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self._replay is None:
            raise NotPreparedError(
                "Nimble was called before prepare(): call fast.prepare(example_inputs) once first"
            )
        try:
            return self._replayed(args, kwargs)
        except StaleModelError as change:
            return self._prepare_again_and_run(change, lambda: self._replayed(args, kwargs),
                                               args, kwargs)

    def _call_tensors(self, args: tuple, kwargs: dict) -> list[torch.Tensor]:
        """The tensors of a call, checked against prepare's structure; the common call,
        positional tensors only, skips the pytrees (~15 us a call)."""
        if (
            self._inputs.positional_tensors_only
            and not kwargs
            and len(args) == len(self._inputs.leaves)
            and all(isinstance(a, torch.Tensor) for a in args)
        ):
            return list(args)
        return self._inputs.tensors(args, kwargs)

    def _replayed(self, args: tuple, kwargs: dict) -> Any:
        inputs = self._call_tensors(args, kwargs)
        if self._training is not None:
            if isinstance(self._training, WholeStepReplay):
                raise NotPreparedError(
                    "this Nimble was prepared for whole training steps: call fast.step(x, targets)"
                )
            if self._model_watch is not None:  # the structure's change named first
                self._model_watch.check()
            return self._training.forward(inputs)
        outputs = self._replay.run(inputs, self._copy_outputs)
        if self._outputs.single_tensor:
            return outputs[0]
        return self._outputs.rebuild(outputs)

    __call__ = forward

    # -- copies ----------------------------------------------------------------------

    def __deepcopy__(self, memo: dict) -> "Nimble":
        """An independent Nimble over a deep copy of the model, prepared again with the same
        example and options (and the same tuned kernels)."""
        if isinstance(self._training, WholeStepReplay):
            raise TypeError(
                "copy.deepcopy of a Nimble prepared for whole training steps: its optimizer "
                "updates the original's parameters. Deep-copy the model, make an optimizer for "
                "the copy and prepare a new Nimble"
            )
        clone = Nimble(copy.deepcopy(self.module, memo))
        if self._program is not None:
            with warnings.catch_warnings():  # the original's prepare named them already
                warnings.simplefilter("ignore")
                clone._prepare_with(
                    self._example.static_args, self._example.static_kwargs, self._options
                )
            if self._tuned_args is not None and self._tuned_args[0] is not None:
                clone.use_tuned(*self._tuned_args)
        return clone

    def __reduce_ex__(self, protocol):
        raise TypeError(
            "a Nimble cannot be pickled or saved with torch.save: its replay is C++ state of "
            "this process. Save the model (torch.save(fast.module.state_dict(), path)), and "
            "after loading it wrap it and call prepare again"
        )

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


Nimble.prepare.__signature__ = keyword_signature(Nimble.prepare)


def _refuse_lazy_modules(module: torch.nn.Module) -> None:
    lazy = [name for name, t in [*module.named_parameters(), *module.named_buffers()]
            if torch.nn.parameter.is_lazy(t)]
    if lazy:
        raise ValueError(
            f"prepare: {', '.join(lazy)} not initialized yet (a lazy module, e.g. "
            f"torch.nn.LazyLinear, learns its shapes on its first call); call the model once "
            f"on an example input before prepare, which leaves the model as it finds it"
        )

