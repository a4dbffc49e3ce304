"""`torch.compile(model, backend="nimble")`: dynamo splits the model into graphs and guards
them; nimble prepares and replays each graph.

A graph dynamo hands over under `torch.no_grad()` is prepared as it is. With grad enabled
it goes through AOTAutograd, which turns it into functional ATen graphs: one for inference,
or a forward and a backward when something requires grad. Each becomes a `GraphReplay`, prepared by nimble on its first call (the example
inputs a compiler is given are fake tensors, a capture needs real ones) and replayed on
every later call. Parameters and buffers come into these graphs as arguments; nimble uses
them in place, as a prepared module does. What dynamo leaves to Python (graph breaks) runs
as usual.
"""

from __future__ import annotations

import collections
import contextlib
import types
import warnings
from typing import Any, Callable

import torch

from ..errors import BadInputError, NimbleError
from ..replay.wrapper import Nimble

# `torch.compile(..., options={...})` keys, each a `Nimble.prepare` argument.
PREPARE_OPTIONS = (
    "streams", "plan_memory", "fold_batchnorm", "drop_noop_ops", "out_variant_max_bytes", "tuned",
    "lower_for_cpu",
)
# Beyond prepare's: `strict` raises where nimble cannot replay a graph, instead of running
# that graph eagerly with a warning.
BACKEND_OPTIONS = PREPARE_OPTIONS + ("strict",)
# Programs kept per graph (one per set of input shapes and parameter tensors); the least
# recently used goes first, so a graph called with ever new shapes does not grow without end.
MAX_PROGRAMS_PER_GRAPH = 8


def _is_state(value: Any) -> bool:
    """Parameters and buffers: tensors dynamo passes as graph arguments but a replay uses
    in place (dynamo marks the buffers it lifts as static inputs)."""
    return isinstance(value, torch.nn.Parameter) or (
        isinstance(value, torch.Tensor)
        and getattr(value, "_dynamo_static_input_type", None) is not None
    )


class _BoundGraph(torch.nn.Module):
    """A graph with its state arguments held as buffers, called with the other arguments:
    what `Nimble.prepare` captures. Only the tensors the graph's ops make are the program's
    outputs; outputs that are arguments themselves (AOTAutograd's forward returns inputs it
    saves for backward) and non-tensor outputs (a backward's None for an input without
    gradient, a size) are handed back by `_Program.run` as they are."""

    def __init__(self, graph: torch.fx.GraphModule, args: list, state_positions: list[int]) -> None:
        super().__init__()
        self.graph_module = graph
        self.num_args = len(args)
        self.state_positions = state_positions
        self.input_positions = [i for i in range(len(args)) if i not in set(state_positions)]
        for n, i in enumerate(state_positions):
            self.register_buffer(f"state{n}", args[i], persistent=False)
        # Per output of the graph: ("made",), ("argument", position) or ("constant", value).
        # Held in a namespace the forward fills: an attribute the forward rebinds would read
        # as a side effect of the capture (model_watch.PythonSideEffects) to prepare.
        self.recorded = types.SimpleNamespace(output_kinds=[])

    def full_args(self, inputs: tuple) -> list:
        args: list = [None] * self.num_args
        for i, value in zip(self.input_positions, inputs):
            args[i] = value
        for n, i in enumerate(self.state_positions):
            args[i] = getattr(self, f"state{n}")
        return args

    def forward(self, *inputs: Any) -> list[torch.Tensor]:
        args = self.full_args(inputs)
        outputs = self.graph_module(*args)
        position = {id(a): i for i, a in enumerate(args) if isinstance(a, torch.Tensor)}
        self.recorded.output_kinds = [
            ("argument", position[id(t)]) if id(t) in position
            else ("made",) if isinstance(t, torch.Tensor)
            else ("constant", t)
            for t in outputs
        ]
        return [t for t, kind in zip(outputs, self.recorded.output_kinds) if kind[0] == "made"]


class _Program:
    """One prepared replay of a graph, for one set of input shapes and state tensors."""

    def __init__(self, graph: torch.fx.GraphModule, args: list, options: dict) -> None:
        self.state_positions = [i for i, a in enumerate(args) if _is_state(a)]
        self.state = [args[i] for i in self.state_positions]
        self.bound = _BoundGraph(graph, args, self.state_positions)
        inputs = tuple(args[i] for i in self.bound.input_positions)
        with contextlib.ExitStack() as stack:
            # prepare puts the state back after capturing, with the values it had: keeping
            # the version counters too lets autograd accept parameters a forward saved
            # before a backward graph was prepared.
            for t in self.state:
                stack.enter_context(torch.autograd._unsafe_preserve_version_counter(t))
            prepared = Nimble(self.bound).prepare(inputs, **options, _watch_model=False)
        self.replay = prepared.replay
        report = prepared.tuned_report()
        self.tuned_kernels = sum(r["bound"] for r in report)
        self.tuned_records = sum(bool(r["kernel"]) for r in report)  # ops the database knew
        # The replay reads the tensors; other arguments (sizes) are part of its trace.
        self.tensor_positions = [
            i for i in self.bound.input_positions if isinstance(args[i], torch.Tensor)
        ]
        self.output_kinds = self.bound.recorded.output_kinds
        self.static_only = all(isinstance(a, torch.Tensor) for a in args)

    def takes_state_of(self, args: list) -> bool:
        """Whether `args` hold this program's state tensors, and no size arguments (a
        dynamic graph's programs differ by those)."""
        return self.static_only and all(
            args[i] is t for i, t in zip(self.state_positions, self.state)
        )

    def run(self, args: list) -> list:
        made = iter(self.replay.run([args[i] for i in self.tensor_positions], True))
        return [
            next(made) if kind[0] == "made" else args[kind[1]] if kind[0] == "argument" else kind[1]
            for kind in self.output_kinds
        ]


def _signature(args: list) -> tuple:
    """What tells programs of one graph apart: the state tensors (by identity: another
    instance of a module runs the same graph with its own parameters), input shapes,
    dtypes and devices, and non-tensor arguments (sizes of a dynamic graph)."""
    key = []
    for a in args:
        if _is_state(a):
            key.append(id(a))
        elif isinstance(a, torch.Tensor):
            key.append((tuple(a.shape), a.dtype, a.device))
        else:
            key.append(a)
    return tuple(key)


class GraphReplay:
    """What the backend returns for one ATen graph: a boxed callable (AOTAutograd hands it
    its arguments as one list) that prepares a nimble program on its first call with a
    given signature and replays it on later calls. A graph nimble cannot replay (an op
    outside ATen, a host read) runs eagerly with a warning, or raises with `strict`."""

    def __init__(self, graph: torch.fx.GraphModule, options: dict, strict: bool, kind: str) -> None:
        # An instance attribute: AOTAutograd wraps the backward's callable in
        # `torch._dynamo.disable`, whose `functools.wraps` copies the instance's dict only.
        self._boxed_call = True
        self.graph = graph
        # The CPU lowering is an inference pass: a training forward's results are saved for
        # its backward, which ATen's kernels must see as eager computed them.
        self.options = options if kind == "inference" else {**options, "lower_for_cpu": False}
        self.strict = strict
        self.kind = kind
        self.programs: collections.OrderedDict[tuple, _Program] = collections.OrderedDict()
        self.eager_reason: str | None = None
        self._last: _Program | None = None

    def __call__(self, args: list) -> list:
        args_copy = list(args)
        args.clear()  # the boxed convention: the caller's list no longer keeps them alive
        if self.eager_reason is not None:
            return self.graph(*args_copy)
        program = self._last
        if program is not None and program.takes_state_of(args_copy):
            # The common call: the program of the previous one. The replay checks the
            # input shapes, dtypes and devices before running anything.
            try:
                return program.run(args_copy)
            except BadInputError:
                pass
        program = self._program_for(args_copy)
        if program is None:
            return self.graph(*args_copy)
        return program.run(args_copy)

    def _program_for(self, args: list) -> _Program | None:
        from torch._dynamo.utils import counters

        key = _signature(args)
        program = self.programs.get(key)
        if program is None:
            try:
                program = _Program(self.graph, args, self.options)
            except NimbleError as error:
                if self.strict:
                    raise
                self.eager_reason = f"{type(error).__name__}: {error}"
                counters["nimble"]["graphs_run_eagerly"] += 1
                warnings.warn(
                    f"nimble runs this {self.kind} graph eagerly, it cannot replay it: "
                    f"{self.eager_reason}",
                    stacklevel=2,
                )
                return None
            counters["nimble"]["programs_prepared"] += 1
            counters["nimble"]["ops_replayed"] += program.replay.num_ops
            counters["nimble"]["tuned_kernels_bound"] += program.tuned_kernels
            counters["nimble"]["tuned_records_found"] += program.tuned_records
            counters["nimble_executors"][program.replay.backend] += 1
            self.programs[key] = program
            if len(self.programs) > MAX_PROGRAMS_PER_GRAPH:
                self.programs.popitem(last=False)
        self.programs.move_to_end(key)
        self._last = program
        return program


def _check_options(options: dict | None) -> tuple[dict, bool]:
    options = dict(options or {})
    unknown = sorted(set(options) - set(BACKEND_OPTIONS))
    if unknown:
        raise ValueError(
            f"unknown option(s) {unknown} for torch.compile(backend='nimble'); "
            f"known: {list(BACKEND_OPTIONS)}"
        )
    strict = bool(options.pop("strict", False))
    return options, strict


def _static_graph(graph: torch.fx.GraphModule) -> bool:
    """Whether every input of dynamo's graph is a tensor of fixed shape and no node reads a
    number out of a tensor. Dynamic graphs (symbolic sizes, floats passed as tensors and
    read with `.item()`) go through AOTAutograd, which turns those into graph inputs."""
    for node in graph.graph.nodes:
        if node.op == "placeholder":
            value = node.meta.get("example_value")
            if not isinstance(value, torch.Tensor) or any(
                not isinstance(d, int) for d in value.shape
            ):
                return False
        elif node.op == "call_method" and node.target in ("item", "tolist"):
            return False
    return True


def nimble_backend(
    graph: torch.fx.GraphModule, example_inputs: list, options: dict | None = None
) -> Callable:
    """The dynamo backend: `torch.compile(model, backend="nimble", options={...})`, with
    options `streams`, `plan_memory`, `fold_batchnorm`, `drop_noop_ops`,
    `out_variant_max_bytes`, `tuned`, `lower_for_cpu` (as for `Nimble.prepare`; the lowering
    applies to inference graphs) and `strict`."""
    from torch._dynamo.backends.common import aot_autograd

    prepare_options, strict = _check_options(options)
    if not torch.is_grad_enabled() and _static_graph(graph):
        # Dynamo guards on grad mode, so this graph only ever runs without grad: there is
        # nothing to differentiate, and nimble's capture records the ATen ops under dynamo's
        # graph itself. AOTAutograd's functional tracing would only add compile time.
        from torch._dynamo.utils import counters

        counters["nimble"]["graphs_without_aot_autograd"] += 1
        replay = GraphReplay(graph, prepare_options, strict, "inference")
        return lambda *args: replay(list(args))

    def compiler(kind: str) -> Callable:
        def compile_graph(aten_graph: torch.fx.GraphModule, _fake_inputs: list) -> GraphReplay:
            return GraphReplay(aten_graph, prepare_options, strict, kind)

        return compile_graph

    return aot_autograd(
        fw_compiler=compiler("forward"),
        bw_compiler=compiler("backward"),
        inference_compiler=compiler("inference"),
    )(graph, example_inputs)


def register() -> None:
    """Registers `backend="nimble"` with dynamo, unless nimble is installed with its
    `torch_dynamo_backends` entry point: dynamo then finds and registers the backend itself
    (registering it here as well would be a duplicate it refuses), and `import nimble` does
    not have to import dynamo."""
    from importlib.metadata import entry_points

    if entry_points(group="torch_dynamo_backends", name="nimble"):
        return
    from torch._dynamo.backends import registry

    if "nimble" not in registry._COMPILER_FNS:
        registry.register_backend(nimble_backend, name="nimble")
