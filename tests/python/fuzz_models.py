"""Random small models against eager: views, in-place ops, slicing, concatenation and
broadcasting over inputs, parameters, buffers and intermediates, with a random choice of
what is returned and of how the caller's tensors alias each other at call time.

Each case is built from one seed, so a failure is reproduced by its seed alone:

    python -m tests.python.fuzz_models --cases 10000 [--seed 0] [--streams 1 2]
    python -m tests.python.fuzz_models --case 1234 --streams 2 --show

A case passes when prepare refuses the model (`NotStaticError`, `UnsupportedOpError`),
when a call whose inputs alias each other or the model's state, or have another layout
than at prepare, is refused (`BadInputError`), or when outputs, the inputs after the call and the parameters and
buffers after the call all equal eager's on two calls with fresh inputs. Anything else
(different numbers, a refusal of inputs that alias nothing, another exception) fails.
"""

from __future__ import annotations

import argparse
import copy
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

import nimble

# Ops: name -> (number of tensor operands, builder of extra arguments from the rng).
# An op is applied as `OPS[name](operands, extra)` and returns one tensor.
Op = Callable[[list, Any], torch.Tensor]


def _dims(t: torch.Tensor) -> int:
    return max(t.dim(), 1)


OPS: dict[str, tuple[int, Callable[[random.Random], Any], Op]] = {
    # elementwise with broadcasting
    "add": (2, lambda r: None, lambda a, e: a[0] + a[1]),
    "mul": (2, lambda r: None, lambda a, e: a[0] * a[1]),
    "sub": (2, lambda r: None, lambda a, e: a[0] - a[1]),
    "maximum": (2, lambda r: None, lambda a, e: torch.maximum(a[0], a[1])),
    "where": (3, lambda r: None, lambda a, e: torch.where(a[0] > 0, a[1], a[2])),
    "scale": (1, lambda r: r.choice([0.5, 2.0, -1.0]), lambda a, e: a[0] * e),
    "relu": (1, lambda r: None, lambda a, e: a[0].relu()),
    "tanh": (1, lambda r: None, lambda a, e: a[0].tanh()),
    "neg": (1, lambda r: None, lambda a, e: -a[0]),
    # reductions and products
    "sum": (1, lambda r: (r.randint(0, 1), r.random() < 0.5), lambda a, e: a[0].sum(e[0] % _dims(a[0]), keepdim=e[1])),
    "matmul": (2, lambda r: None, lambda a, e: a[0] @ a[1]),
    "cat": (2, lambda r: r.randint(0, 1), lambda a, e: torch.cat([a[0], a[1]], e % _dims(a[0]))),
    "stack": (2, lambda r: r.randint(0, 1), lambda a, e: torch.stack([a[0], a[1]], e)),
    # views
    "t": (1, lambda r: None, lambda a, e: a[0].t()),
    "transpose": (1, lambda r: None, lambda a, e: a[0].transpose(0, -1)),
    "narrow": (1, lambda r: (r.randint(0, 1), r.randint(0, 2), r.randint(1, 3)),
               lambda a, e: a[0].narrow(e[0] % _dims(a[0]), e[1], e[2])),
    "step_slice": (1, lambda r: r.randint(0, 1), lambda a, e: a[0][e::2] if a[0].dim() else a[0]),
    "col_slice": (1, lambda r: r.randint(0, 2), lambda a, e: a[0][:, e:]),
    "select": (1, lambda r: (r.randint(0, 1), r.randint(0, 2)),
               lambda a, e: a[0].select(e[0] % _dims(a[0]), e[1])),
    "unsqueeze": (1, lambda r: r.randint(0, 1), lambda a, e: a[0].unsqueeze(e)),
    "expand": (1, lambda r: r.randint(2, 4), lambda a, e: a[0].expand(e, *a[0].shape)),
    "expand_as": (2, lambda r: None, lambda a, e: a[0].expand_as(a[1])),
    "view_flat": (1, lambda r: None, lambda a, e: a[0].view(-1)),
    "reshape": (1, lambda r: None, lambda a, e: a[0].reshape(a[0].shape[-1], -1)),
    "diagonal": (1, lambda r: None, lambda a, e: a[0].diagonal()),
    "chunk": (1, lambda r: r.randint(0, 1), lambda a, e: a[0].chunk(2, 0)[e]),
    "unbind": (1, lambda r: r.randint(0, 1), lambda a, e: a[0].unbind(0)[e]),
    "permute": (1, lambda r: None, lambda a, e: a[0].permute(*reversed(range(a[0].dim())))),
    # copies
    "clone": (1, lambda r: None, lambda a, e: a[0].clone()),
    "contiguous": (1, lambda r: None, lambda a, e: a[0].contiguous()),
    "detach": (1, lambda r: None, lambda a, e: a[0].detach()),
    # in place (on anything: inputs, parameters, buffers, views of them)
    "add_": (2, lambda r: None, lambda a, e: a[0].add_(a[1])),
    "mul_": (1, lambda r: r.choice([0.5, 2.0, -1.0]), lambda a, e: a[0].mul_(e)),
    "relu_": (1, lambda r: None, lambda a, e: a[0].relu_()),
    "copy_": (2, lambda r: None, lambda a, e: a[0].copy_(a[1])),
    "clamp_": (1, lambda r: None, lambda a, e: a[0].clamp_(-0.5, 0.5)),
    "fill_": (1, lambda r: r.choice([0.0, 1.5]), lambda a, e: a[0].fill_(e)),
    "zero_": (1, lambda r: None, lambda a, e: a[0].zero_()),
    "masked_fill_": (2, lambda r: None, lambda a, e: a[0].masked_fill_(a[1] > 0, 3.0)),
    "setitem": (2, lambda r: r.randint(0, 1), lambda a, e: a[0].narrow(0, e, 1).copy_(a[1])),
    "addcmul_": (3, lambda r: None, lambda a, e: a[0].addcmul_(a[1], a[2], value=0.5)),
    "t_": (1, lambda r: None, lambda a, e: a[0].t_()),
}
OP_NAMES = sorted(OPS)


@dataclass
class Step:
    op: str
    operands: list[int]
    extra: Any


@dataclass
class Case:
    seed: int
    input_shapes: list[tuple[int, ...]]
    param_shapes: list[tuple[int, ...]]
    buffer_shapes: list[tuple[int, ...]]
    steps: list[Step] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    return_dict: bool = False
    options: dict = field(default_factory=dict)
    aliasing: str = "fresh"
    # Whether eager can run the model twice: an in-place shape change of an input,
    # parameter or buffer (`t_()`) breaks the second run for eager as for nimble.
    repeatable: bool = True

    def describe(self) -> str:
        lines = [
            f"seed {self.seed}: inputs {self.input_shapes}, params {self.param_shapes}, "
            f"buffers {self.buffer_shapes}, options {self.options}, call inputs {self.aliasing}"
        ]
        first = len(self.input_shapes) + len(self.param_shapes) + len(self.buffer_shapes)
        for i, step in enumerate(self.steps):
            lines.append(f"  v{first + i} = {step.op}({', '.join(f'v{o}' for o in step.operands)}; {step.extra})")
        lines.append(f"  return {['v%d' % o for o in self.outputs]}{' as dict' if self.return_dict else ''}")
        return "\n".join(lines)


class FuzzModel(torch.nn.Module):
    """Runs a case's steps over [inputs, parameters, buffers, results of earlier steps]."""

    def __init__(self, case: Case, init_seed: int) -> None:
        super().__init__()
        self.case = case
        g = torch.Generator().manual_seed(init_seed)
        self.params = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.randn(s, generator=g)) for s in case.param_shapes]
        )
        for i, s in enumerate(case.buffer_shapes):
            self.register_buffer(f"b{i}", torch.randn(s, generator=g))

    def state(self) -> list[torch.Tensor]:
        return list(self.params) + [getattr(self, f"b{i}") for i in range(len(self.case.buffer_shapes))]

    def forward(self, *inputs: torch.Tensor) -> Any:
        values = list(inputs) + self.state()
        for step in self.case.steps:
            _, _, apply = OPS[step.op]
            values.append(apply([values[i] for i in step.operands], step.extra))
        outs = [values[i] for i in self.case.outputs]
        if self.case.return_dict:
            return {f"o{i}": o for i, o in enumerate(outs)}
        return outs[0] if len(outs) == 1 else tuple(outs)


def _shape(r: random.Random, rows: int, cols: int) -> tuple[int, ...]:
    return r.choice([(rows, cols), (rows, cols), (cols,), (rows, 1), (1, cols), (cols, rows)])


def make_case(seed: int) -> Case:
    """A random model that runs eagerly on inputs of its shapes: steps that raise on the
    dry run are left out, so every kept step is valid for these shapes."""
    r = random.Random(seed)
    rows, cols = r.randint(2, 4), r.randint(2, 5)
    case = Case(
        seed=seed,
        input_shapes=[_shape(r, rows, cols) for _ in range(r.randint(1, 3))],
        param_shapes=[_shape(r, rows, cols) for _ in range(r.randint(0, 2))],
        buffer_shapes=[_shape(r, rows, cols) for _ in range(r.randint(0, 2))],
    )
    case.options = {
        "streams": 1,
        "copy_outputs": r.random() < 0.8,
        "plan_memory": r.random() < 0.8,
        "drop_noop_ops": r.random() < 0.8,
        "precompute_views": r.random() < 0.8,
        "use_out_variants": r.random() < 0.8,
        "out_variant_max_bytes": r.choice([0, 0, 0, 16]),
    }
    model = FuzzModel(case, seed)
    values = [torch.randn(s) for s in case.input_shapes] + [t.detach().clone() for t in model.state()]
    wanted = r.randint(3, 12)
    tries = 0
    with torch.no_grad():
        while len(case.steps) < wanted and tries < 60:
            tries += 1
            name = r.choice(OP_NAMES)
            arity, extra_of, apply = OPS[name]
            # Later values more often: chains of views and writes on them.
            operands = [min(int(len(values) * r.random() ** 0.5), len(values) - 1) for _ in range(arity)]
            extra = extra_of(r)
            try:
                result = apply([values[i] for i in operands], extra)
            except (RuntimeError, IndexError, ValueError, TypeError):
                continue
            if not isinstance(result, torch.Tensor) or result.numel() > 4096:
                continue
            case.steps.append(Step(name, operands, extra))
            values.append(result)
    case.repeatable = _runs_twice(case, seed)
    n = len(values)
    case.outputs = sorted({min(int(n * r.random() ** 0.3), n - 1) for _ in range(r.randint(1, 3))})
    case.return_dict = r.random() < 0.2
    case.aliasing = r.choice(
        ["fresh"] * 4 + ["same", "overlap", "disjoint", "state", "noncontig", "expanded", "feedback"]
    )
    return case


def _runs_twice(case: Case, seed: int) -> bool:
    model = FuzzModel(case, seed)
    inputs = [torch.randn(s) for s in case.input_shapes]
    try:
        with torch.no_grad():
            model(*[t.clone() for t in inputs])
            model(*inputs)
    except (RuntimeError, IndexError):
        return False
    return True


def call_inputs(case: Case, model: FuzzModel, seed: int) -> tuple[list[torch.Tensor], bool]:
    """Inputs for one call, aliased as `case.aliasing` says; the same seed and model give
    the same values and the same aliasing. Returns (inputs, whether the replay may refuse
    them: they alias, or their layout differs from prepare's)."""
    g = torch.Generator().manual_seed(seed)
    shapes = case.input_shapes
    fresh = [torch.randn(s, generator=g) for s in shapes]
    kind = case.aliasing
    first_twin = next(
        ((i, j) for i in range(len(shapes)) for j in range(i + 1, len(shapes)) if shapes[i] == shapes[j]),
        None,
    )
    if kind == "same" and first_twin:
        i, j = first_twin
        fresh[j] = fresh[i]
        return fresh, True
    if kind in ("overlap", "disjoint") and first_twin:
        i, j = first_twin
        shape = shapes[i]
        lead = shape[0] if shape else 1
        base = torch.randn((2 * lead,) + tuple(shape[1:]), generator=g)
        shift = 1 if kind == "overlap" else lead
        fresh[i] = base[:lead].view(shape)
        fresh[j] = base[shift:shift + lead].view(shape)
        return fresh, kind == "overlap"
    if kind == "state":
        state = model.state()
        for i, s in enumerate(shapes):
            for t in state:
                if tuple(t.shape) == s:
                    fresh[i] = t.data if isinstance(t, torch.nn.Parameter) else t
                    return fresh, True
    if kind == "noncontig":
        return [t.t().contiguous().t() if t.dim() == 2 else t for t in fresh], True
    if kind == "expanded":
        return [t[:1].expand_as(t) if t.dim() == 2 and t.shape[0] > 1 else t for t in fresh], True
    return fresh, False


def _flat(out: Any) -> list[torch.Tensor]:
    if isinstance(out, dict):
        return list(out.values())
    return list(out) if isinstance(out, tuple) else [out]


class Mismatch(AssertionError):
    pass


def _compare(what: str, got: list[torch.Tensor], expected: list[torch.Tensor], exact: bool) -> None:
    if len(got) != len(expected):
        raise Mismatch(f"{what}: {len(got)} tensors, eager {len(expected)}")
    for k, (g, e) in enumerate(zip(got, expected)):
        try:
            if exact:
                torch.testing.assert_close(g, e, rtol=0, atol=0, equal_nan=True)
            else:
                torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6, equal_nan=True)
        except AssertionError as error:
            raise Mismatch(f"{what} {k}: {error}") from None


def _fed_back(inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each input replaced by the first output of its shape, where there is one."""
    return [next((o for o in outputs if o.shape == t.shape), t) for t in inputs]


def run_case(seed: int, streams: int) -> str:
    """Checks one case; returns how it ended ('equal', 'refused at prepare', 'refused
    call', 'eager raises') or raises Mismatch."""
    case = make_case(seed)
    case.options["streams"] = streams
    if case.aliasing == "feedback":
        case.options["copy_outputs"] = False
    eager = FuzzModel(case, seed)
    replayed = copy.deepcopy(eager)
    before = [t.detach().clone() for t in replayed.state()]
    example = [torch.randn(s) for s in case.input_shapes]
    try:
        fast = nimble.Nimble(replayed).prepare(tuple(example), **case.options)
    except (RuntimeError, IndexError) if not case.repeatable else ():
        # The model's own error (its warm-up run broke the recorded one, as a second
        # eager call breaks): prepare must leave the model as it found it.
        _compare("state after a failed prepare", [t.detach() for t in replayed.state()], before, True)
        return "eager raises"
    except (nimble.NotStaticError, nimble.UnsupportedOpError):
        _compare("state after a refused prepare", [t.detach() for t in replayed.state()], before, True)
        return "refused at prepare"
    except ValueError as error:
        # The program builder refuses in-place shape changes of inputs with a ValueError.
        if "in-place" not in str(error) and "in place" not in str(error):
            raise
        return "refused at prepare"
    _compare("state after prepare", [t.detach() for t in replayed.state()], before, True)
    exact = streams == 1
    ended = "equal"
    eager_out: list[torch.Tensor] = []
    fast_out: list[torch.Tensor] = []
    for call in range(2):
        call_seed = seed * 7919 + call
        eager_inputs, may_refuse = call_inputs(case, eager, call_seed)
        fast_inputs, _ = call_inputs(case, replayed, call_seed)
        if case.aliasing == "feedback" and call == 1:
            # The first call's outputs handed back as inputs, without copies: with
            # copy_outputs=False, the replay's own memory where eager's are views.
            eager_inputs, fast_inputs = _fed_back(eager_inputs, eager_out), _fed_back(fast_inputs, fast_out)
            may_refuse = True
            # Outputs may be views of another layout than the prepared inputs': the replay
            # reads them in the prepared layout, eager in theirs (a matmul then rounds
            # differently).
            exact = False
        if case.aliasing in ("noncontig", "expanded"):
            # The replay reads inputs as values in their prepared layout (docs/replays.md: where
            # eager's choice of a view or a copy depends on strides, it follows prepare's).
            eager_inputs = [t.contiguous() for t in eager_inputs]
        eager_state = [t.detach().clone() for t in eager.state()]
        try:
            with torch.no_grad():
                eager_out = _flat(eager(*eager_inputs))
                expected = [t.clone() for t in eager_out]
        except RuntimeError:
            # Eager itself refuses these inputs (a write through an expanded or
            # overlapping view); the replay's answer has nothing to be compared with.
            return "eager raises"
        fast_out_before = fast_out
        try:
            fast_out = _flat(fast(*fast_inputs))
            got = [t.clone() for t in fast_out]
        except nimble.BadInputError:
            if not may_refuse:
                raise
            # Refused before anything ran: the state must be untouched.
            _compare("state after a refused call", [t.detach() for t in replayed.state()], eager_state, True)
            return "refused call"
        _compare(f"call {call}: output", got, expected, exact)
        # A fed-back input that is the replay's own memory (copy_outputs=False) may be
        # overwritten by this call, as documented; the others must be eager's.
        own = [any(t is o for o in fast_out_before) for t in fast_inputs]
        _compare(
            f"call {call}: input after the call",
            [t for t, o in zip(fast_inputs, own) if not o],
            [t for t, o in zip(eager_inputs, own) if not o],
            exact,
        )
        _compare(
            f"call {call}: parameter/buffer after the call",
            [t.detach() for t in replayed.state()],
            [t.detach() for t in eager.state()],
            exact,
        )
    return ended


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0, help="first case's seed")
    parser.add_argument("--case", type=int, help="run this one seed only")
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--show", action="store_true", help="print each case's model")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    seeds = [args.case] if args.case is not None else range(args.seed, args.seed + args.cases)
    counts: dict[str, int] = {}
    failures = []
    start = time.perf_counter()
    for n, seed in enumerate(seeds):
        if args.show:
            print(make_case(seed).describe())
        for streams in args.streams:
            try:
                ended = run_case(seed, streams)
            except Exception as error:  # report every failure, keep going
                ended = "FAILED"
                failures.append((seed, streams, f"{type(error).__name__}: {error}"))
                print(f"FAILED seed {seed} streams {streams}: {type(error).__name__}: {error}"[:2000], flush=True)
            counts[ended] = counts.get(ended, 0) + 1
        if (n + 1) % 500 == 0:
            print(f"{n + 1} cases, {time.perf_counter() - start:.0f} s, {counts}", flush=True)
    elapsed = time.perf_counter() - start
    print(f"{len(seeds)} cases x streams {args.streams} in {elapsed:.1f} s: {counts}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
