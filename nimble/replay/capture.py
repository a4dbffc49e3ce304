"""Records one run of a module below autograd, where kernels launch.

A `TorchDispatchMode` sees every ATen op after autograd has done its work: the recorder
keeps each op's overload, its arguments and its results (holding every tensor alive, so
that tensor identity stays meaningful until the C++ program builder has seen them), and
refuses ops whose results depend on tensor values, naming the user's source line.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..errors import NotStaticError, UnsupportedOpError
from .host_reads import HostReadGuard, UnfusedPaths, eager_takes_the_unfused_paths_alike
from .model_snapshot import ModelSnapshot, module_state
from .model_watch import PythonSideEffects
from .user_source import user_location, user_source_line

aten = torch.ops.aten

# Ops whose result (a Python number, or a shape) is read off tensor values: a trace of
# one run cannot stand for the next.
_VALUE_DEPENDENT = {
    aten._local_scalar_dense.default,
    aten.item.default,
    aten.is_nonzero.default,
    aten.equal.default,
    aten.nonzero.default,
    aten.nonzero_numpy.default,
    aten.argwhere.default,
    aten.masked_select.default,
    aten._unique.default,
    aten._unique2.default,
    aten.unique_dim.default,
    aten.unique_consecutive.default,
    aten.repeat_interleave.Tensor,
    aten.bincount.default,
    aten.allclose.default,
}

# Ops returning plain numbers that come from metadata, not values.
_METADATA_ONLY = {
    aten.is_same_size.default,
    aten.sym_size.int,
    aten.sym_stride.int,
    aten.sym_numel.default,
    aten.sym_storage_offset.default,
    aten.dim.default,
}

# Namespaces whose ops run C++ kernels the replay can call without Python.
_REPLAYABLE_NAMESPACES = {"aten", "prims", "torchvision"}
# Ops that only annotate a run (`record_function` in `Optimizer.step`): run, not replayed.
_ANNOTATION_NAMESPACES = {"profiler"}

@contextlib.contextmanager
def cycle_collector_paused():
    """Capture makes many small objects (a signature tuple per op argument), and Python's
    cycle collector, run by their count, scans every object of the process each time
    (vit_b_16 in a process with torchvision loaded: 50-80 ms of a 0.85 s prepare). Cycles
    made meanwhile are collected after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _is_tensor_type(t) -> bool:
    if isinstance(t, torch._C.TensorType):
        return True
    if isinstance(t, (torch._C.ListType, torch._C.OptionalType)):
        return _is_tensor_type(t.getElementType())
    return False


_RETURNS_NUMBER: dict[Any, bool] = {}


def _returns_number(func) -> bool:
    """Whether `func` returns a number computed while it runs. A `SymInt` return is a size
    (flash and cuDNN attention return their max sequence lengths): it follows from shapes,
    which a static model keeps. Python's schema objects type it `int`, like any integer;
    the schema's text still says `SymInt`."""
    answer = _RETURNS_NUMBER.get(func)
    if answer is None:
        returns = str(func._schema).rsplit(" -> ", 1)[-1].strip()
        if returns.startswith("("):
            returns = returns[1:-1]
        types = [r.split()[0] for r in returns.split(",") if r.strip()]
        answer = any(
            not _is_tensor_type(ret.type) and not (k < len(types) and types[k] == "SymInt")
            for k, ret in enumerate(func._schema.returns)
        )
        _RETURNS_NUMBER[func] = answer
    return answer


def _has_bool_index(func, args) -> bool:
    if func is not aten.index.Tensor or len(args) < 2:
        return False
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in args[1])


@dataclass
class RecordedOp:
    func: Any  # torch._ops.OpOverload
    args: tuple
    kwargs: dict
    out: Any


@dataclass
class Trace:
    ops: list[RecordedOp] = field(default_factory=list)


def produced_tensors(ops: list[RecordedOp]) -> dict[int, torch.Tensor]:
    """The tensors that `ops` return, by id."""
    produced = {}
    for op in ops:
        outs = op.out if isinstance(op.out, (list, tuple)) else [op.out]
        for t in outs:
            if isinstance(t, torch.Tensor):
                produced[id(t)] = t
    return produced


def _refuse_value_dependent(op: str):
    raise NotStaticError(
        f"the model is not static: {op} reads tensor values to decide what happens next (a "
        f"Python number, a condition, or a data-dependent shape), at {user_source_line()}. "
        f"nimble replays one fixed trace; move this computation out of the model or make it "
        f"independent of values."
    )


def _refuse_host_read(method: str):
    _refuse_value_dependent(f"Tensor.{method}()")


class Recorder(TorchDispatchMode):
    """Runs every op normally and records it; refuses value-dependent ops. Besides the trace
    it keeps each op's signature (`signature`) and the user's source line that ran it, so
    that two recorded runs can be compared op by op (`first_difference`)."""

    def __init__(
        self, persistent: dict[int, int] | None = None, snapshot: ModelSnapshot | None = None
    ) -> None:
        """`persistent`: tensors that are the same objects on every run (parameters and
        buffers), by id, and their index. `snapshot`: told of every tensor an op is about to
        write (paused ops too), so that it saves only what a run changes."""
        super().__init__()
        self._snapshot = snapshot
        self._written: dict[torch._ops.OpOverload, tuple] = {}  # written_arguments, by op
        if snapshot is not None:
            from .. import _C

            self._undeclared = _C.undeclared_writes()
        self.trace = Trace()
        self._persistent = persistent or {}
        self.signatures: list[tuple] = []
        self.locations: list[str] = []
        self._paused = False
        self._host_readable: set[int] = set()
        self._produced: dict[int, tuple[int, int]] = {}  # tensor id -> (op, output)

    @contextlib.contextmanager
    def paused(self):
        """Ops run here are not part of the trace (e.g. making example gradients)."""
        self._paused = True
        try:
            yield
        finally:
            self._paused = False

    @contextlib.contextmanager
    def host_reads_allowed(self, tensors):
        """`.item()` on these tensors is allowed and not recorded: the caller recomputes
        what the host does with the number before every replay (optimizer step counts)."""
        self._host_readable = {id(t) for t in tensors}
        try:
            yield
        finally:
            self._host_readable = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self._snapshot is not None and isinstance(func, torch._ops.OpOverload):
            places = self._written.get(func)
            if places is None:
                places = self._written[func] = written_arguments(func, self._undeclared)
            if places:
                self._snapshot.before_write(written_tensors(places, args, kwargs))
        if self._paused or getattr(func, "namespace", None) in _ANNOTATION_NAMESPACES:
            return func(*args, **kwargs)
        if func is aten._local_scalar_dense.default and id(args[0]) in self._host_readable:
            return func(*args, **kwargs)
        if func in _VALUE_DEPENDENT or _has_bool_index(func, args) or (
            func not in _METADATA_ONLY and _returns_number(func)
        ):
            _refuse_value_dependent(f"op {func}")
        if not isinstance(func, torch._ops.OpOverload) or func.namespace not in _REPLAYABLE_NAMESPACES:
            raise UnsupportedOpError(
                f"nimble cannot replay op {func} (at {user_source_line()}): only ops of "
                f"{sorted(_REPLAYABLE_NAMESPACES)} run without Python in the replay."
            )
        out = func(*args, **kwargs)
        self.signatures.append((str(func), self._signature((args, kwargs))))
        self.locations.append(user_location())
        outs = out if isinstance(out, (list, tuple)) else [out]
        for k, t in enumerate(outs):
            if isinstance(t, torch.Tensor):
                self._produced[id(t)] = (len(self.trace.ops), k)
        self.trace.ops.append(RecordedOp(func, args, kwargs, out))
        return out

    def _signature(self, value):
        """An argument as two runs of a static model give it alike: a tensor by layout and by
        where it comes from (an op of this run, a parameter or buffer, or elsewhere),
        anything else by value."""
        if isinstance(value, torch.Tensor):
            origin = self._produced.get(id(value))
            if origin is None:
                origin = ("state", self._persistent.get(id(value)))
            return ("tensor", tuple(value.shape), value.stride(), value.dtype, value.device, origin)
        if isinstance(value, (list, tuple)):
            return tuple(self._signature(v) for v in value)
        if isinstance(value, dict):
            return tuple((k, self._signature(v)) for k, v in value.items())
        return repr(value)


def written_arguments(func: torch._ops.OpOverload, undeclared: dict[str, list[int]]) -> tuple[tuple[int, str], ...]:
    """Where `func` takes the tensors it writes, by its schema's alias annotations
    (`Tensor(a!)`, `out=`) and `undeclared` (`_C.undeclared_writes()`: batch norms' running
    statistics): (position, name) of each."""
    schema = func._schema
    hidden = undeclared.get(schema.name, ())
    return tuple(
        (i, a.name)
        for i, a in enumerate(schema.arguments)
        if (a.alias_info is not None and a.alias_info.is_write) or i in hidden
    )


def written_tensors(places: tuple[tuple[int, str], ...], args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors at `places` (from `written_arguments`) of one call."""
    written = []
    for index, name in places:
        value = kwargs[name] if name in kwargs else args[index] if index < len(args) else None
        for t in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(t, torch.Tensor):
                written.append(t)
    return written


def _import_dynamo_only_when_loaded(mode: type) -> None:
    """torch wraps a dispatch mode's `__torch_dispatch__` so that dynamo never traces it,
    and that wrapper imports torch._dynamo on its first call: 0.8 s of the first `prepare`
    in a process (transformer:encoder: 0.94 s, 0.01 s the second time), where no dynamo
    runs at all. Its cached answer (the function's `__dynamo_disable`) is made here to call
    the mode directly while torch._dynamo is not loaded (nothing can be compiling then), and
    to be dynamo's own `disable` from the first call after it is."""
    raw = getattr(mode.__dict__.get("__torch_dispatch__"), "__wrapped__", None)
    if raw is None or hasattr(raw, "__dynamo_disable"):
        return
    disabled: list[Callable] = []  # torch._dynamo.disable(raw), once it is loaded

    def dispatch(*args, **kwargs):
        if not disabled:
            if "torch._dynamo" not in sys.modules:
                return raw(*args, **kwargs)
            import torch._dynamo

            disabled.append(torch._dynamo.disable(raw, recursive=True, wrapping=False))
        return disabled[0](*args, **kwargs)

    setattr(raw, "__dynamo_disable", dispatch)


_import_dynamo_only_when_loaded(Recorder)


def first_difference(first: Recorder, second: Recorder) -> str | None:
    """Where two recorded runs of the same call part ways, described; None if they agree."""
    for i, (a, b) in enumerate(zip(first.signatures, second.signatures)):
        if a != b:
            what = a[0] if a[0] != b[0] else f"{a[0]} (with other arguments)"
            return (
                f"op #{i}: the first run called {what} at {first.locations[i]}, the next "
                f"called {b[0]} at {second.locations[i]}"
            )
    if len(first.signatures) != len(second.signatures):
        longer = first if len(first.signatures) > len(second.signatures) else second
        i = min(len(first.signatures), len(second.signatures))
        return (
            f"one run called {len(first.signatures)} ops, the next {len(second.signatures)}; "
            f"op #{i} is {longer.signatures[i][0]} at {longer.locations[i]}"
        )
    return None


# Recorded runs before a model that never gives the same trace twice in a row is refused: a
# model whose first runs differ (lazy initialisation, a first-call branch) has this many
# chances to settle.
MAX_RECORDED_RUNS = 6

T = TypeVar("T")


@dataclass
class Capture:
    """A trace proven by the next recorded run, what its recorded run returned, and the
    Python side effects of the capture's runs."""

    recorder: Recorder
    result: Any
    side_effects: PythonSideEffects
    snapshot: ModelSnapshot  # what the model, optimizer and inputs were before the capture


def capture(
    module: torch.nn.Module,
    record: Callable[[Recorder], T],
    warm_up: Callable[[], Any] | None = None,
    *,
    inputs: list[torch.Tensor] = (),
    optimizer: torch.optim.Optimizer | None = None,
) -> Capture:
    """The one capture sequence: `record` runs recorded until two runs in a row give the
    same trace, op by op, and the first of the two is kept; after MAX_RECORDED_RUNS runs the
    model is refused, naming the first op that differs. State a first run makes lazily shows
    as a first trace unlike the next, so a static model runs twice. `warm_up` (optional)
    runs eagerly first, for state the recorded runs must find made (optimizer state, which
    the snapshot then adopts; dropped again when the capture fails). A snapshot of the model,
    `optimizer` and `inputs` puts them back after every run, whether it succeeded or not (it
    copies values only as the recorder sees them written, unless an unrecorded warm-up runs). Refuses a module that replaced a parameter or buffer object on the
    way: the replay would update the old one. `record` must keep nothing itself: the kept
    run's result is returned."""
    snapshot = ModelSnapshot(module, optimizer, inputs, copy_on_write=warm_up is None)
    identities = [id(t) for t in module_state(module)]
    # Which object each submodule has under each name: a forward that replaced one gets the
    # original back, as the model is left as it was found.
    bindings = [(table, name, t) for sub in module.modules()
                for table in (sub._parameters, sub._buffers) for name, t in table.items()]
    persistent = {identity: i for i, identity in enumerate(identities)}
    effects = PythonSideEffects(module)
    difference = None
    failed = True
    try:
        if warm_up is not None:
            warm_up()
            snapshot.restore()
            snapshot.adopt_created_state()
        previous = None
        unfused = eager_takes_the_unfused_paths_alike(module)  # host_reads.py says why
        for _ in range(MAX_RECORDED_RUNS):
            recorder = Recorder(persistent, snapshot)
            paths = UnfusedPaths() if unfused else contextlib.nullcontext()
            with HostReadGuard(_refuse_host_read), paths, recorder:
                result = record(recorder)
            snapshot.restore()
            if previous is not None:
                difference = first_difference(previous[0], recorder)
                if difference is None:
                    break
            previous = (recorder, result)
        failed = False
    finally:
        replaced = [id(t) for t in module_state(module)] != identities
        for table, name, t in bindings:
            table[name] = t
        snapshot.restore()
        if failed:
            snapshot.drop_created_state()
    if difference is not None:
        raise NotStaticError(
            f"the model is not static: {MAX_RECORDED_RUNS} recorded runs did not give the "
            f"same trace twice in a row; {difference}. nimble replays one fixed trace: make "
            f"the forward do the same ops on every call"
        )
    if replaced:
        raise UnsupportedOpError(
            "the module replaced a parameter or buffer object during forward (e.g. "
            "`self.buf = self.buf + 1`); nimble replays in-place updates only: write "
            "`self.buf.add_(1)` or `self.buf.copy_(...)` instead"
        )
    recorder, result = previous
    return Capture(recorder, result, effects.after(), snapshot)
