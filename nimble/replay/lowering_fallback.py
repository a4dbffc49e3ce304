"""The CPU lowering's safety net: a lowered program is kept only if it builds, runs and
matches eager on the example; otherwise `prepare` finds the ops whose lowering breaks it and
keeps those as ATen's ops (or, failing that, replays the model unlowered), and warns once,
naming what failed. An optimisation must never turn a working model into an error."""

from __future__ import annotations

import copy
import re
import warnings
from typing import Callable

import torch
from torch.utils._pytree import tree_map

from .prepare_options import with_changes
from .structure import OutputStructure

# Lowered kernels reorder sums (blocked GEMMs, fused batch norms): float32 results differ from
# eager by ~1e-6 of the output's scale on deep models. A wrong layout or a misread view differs
# by the output's own scale, so the margin can be wide.
RELATIVE_TOLERANCE = 1e-3
# Some models are ill-conditioned in float32 (timm's tiny_vit: eager is 3e-3 of its scale off
# the same model in float64), and any other order of the same sums differs from eager by as
# much. Where the lowered result differs from eager, it is judged against a float64 reference
# instead: it may be off it by this many times eager's own float32 error. The lowering's
# blocked sums measured up to 3x eager's error on an ill-conditioned model; a wrong layout or
# a misread view is off by the output's own scale.
FLOAT32_ERROR_FACTOR = 4.0

_OP_NAME = re.compile(r"\b(?:aten|nimble|prims|torchvision)::\w+(?:\.\w+)?")


def difference(outputs: list, references: list) -> tuple[int, float] | None:
    """The first output (index, error relative to its scale) that differs from its reference
    by more than RELATIVE_TOLERANCE of the reference's largest magnitude, or None.

    Entries where eager has NaN or an infinity are not compared: a fused activation may turn an
    input's NaN into a number (docs/cpu.md, NaN). A reference of zeros is compared against the
    scale of all the references, and against 1 if every one is zero."""
    scales = [_scale(r) for r in references]
    overall = max(scales, default=0.0) or 1.0
    for index, (out, ref) in enumerate(zip(outputs, references)):
        if not isinstance(ref, torch.Tensor):
            continue
        if not isinstance(out, torch.Tensor) or out.shape != ref.shape:
            return index, float("inf")
        if not ref.is_floating_point():
            if not torch.equal(out, ref):
                return index, float("inf")
            continue
        finite = torch.isfinite(ref)
        error = (out.double() - ref.double()).abs().masked_fill(~finite, 0.0)
        if error.numel() == 0:
            continue
        worst = error.max().item()
        scale = scales[index] or overall
        if not worst <= RELATIVE_TOLERANCE * scale:  # a NaN where eager is finite fails too
            return index, worst / scale
    return None


def _scale(t) -> float:
    if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.numel() == 0:
        return 0.0
    return t.detach().double().abs().masked_fill(~torch.isfinite(t), 0.0).max().item()


def _culprit(error: BaseException) -> str:
    """The op an error names, or its first line."""
    text = str(error)
    found = _OP_NAME.search(text)
    first_line = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return f"{found.group(0)}: {first_line}" if found else first_line


# Rounds of the search for the ops the lowering breaks, each about log2(ops in the trace)
# builds and runs of the example; a model broken in more places is replayed unlowered.
MAX_CULPRITS = 2


def build_checked(build: Callable[..., object], options, check: Callable[[object], None],
                  trace_ops: list[str] | None = None):
    """`build(options)` with the CPU lowering, kept if `check(replay)` passes (it raises
    `LoweringMismatch` or any error of the run).

    Otherwise, given `trace_ops` (the captured trace's op names, by position), the ops whose
    lowering breaks the model are searched for: the lowering is bisected over the trace
    (ops from a position on kept as ATen's, `keep_aten_ops`) to the first op whose lowering
    makes it fail; that op keeps ATen's op, the rest stays lowered, and one line warns naming
    it. Up to MAX_CULPRITS such ops; past that, or without `trace_ops`, `build` without the
    lowering, after a one-line warning. Only the lowering is retried: an error of the
    unlowered build is the model's own and propagates."""
    if not options.lower_for_cpu:
        return build(options)
    replay, reason = _attempt(build, options, check)
    if replay is not None:
        return replay
    kept: list[int] = []
    for _ in range(MAX_CULPRITS if trace_ops else 0):
        culprit = _first_breaking(build, options, check, len(trace_ops), kept)
        if culprit in kept:  # the runs disagree with the last round's: nothing to blame
            break
        kept.append(culprit)
        replay, _ = _attempt(build, _keeping(options, kept), check)
        if replay is not None:
            named = ", ".join(f"{trace_ops[i]} (op {i} of the trace)" for i in kept)
            warnings.warn(
                f"nimble: the CPU lowering failed on this model ({reason}); {named} "
                f"{'keeps' if len(kept) == 1 else 'keep'} ATen's op, the rest stays lowered",
                stacklevel=4)
            return replay
    warnings.warn(
        f"nimble: the CPU lowering failed on this model ({reason}); replaying it unlowered "
        f"(prepare(..., lower_for_cpu=False) does so without trying)",
        stacklevel=4,
    )
    return build(with_changes(options, lower_for_cpu=False, tuned_convolutions={}))


def _keeping(options, positions):
    return with_changes(options, keep_aten_ops=set(options.keep_aten_ops) | set(positions))


def _attempt(build, options, check) -> tuple[object, str]:
    """(the replay, "") if `options` build a replay that passes `check`; else (None, why)."""
    try:
        replay = build(options)
        check(replay)
        return replay, ""
    except LoweringMismatch as error:
        return None, str(error)
    except (RuntimeError, ValueError, TypeError, IndexError) as error:
        return None, _culprit(error)


def _first_breaking(build, options, check, count: int, kept: list[int]) -> int:
    """The trace position p such that lowering the ops before p (less `kept`) passes and
    lowering those before p + 1 fails: lowering op p breaks the model. Bisection, assuming
    that lowering nothing passes and lowering everything (less `kept`) fails; the programs
    are deterministic, so the two builds differ and op p is one the lowering changes."""
    passes, fails = 0, count
    while fails - passes > 1:
        middle = (passes + fails) // 2
        replay, _ = _attempt(build, _keeping(options, [*kept, *range(middle, count)]), check)
        if replay is None:
            fails = middle
        else:
            passes = middle
    return fails - 1


def float64_outputs(module: torch.nn.Module, args: tuple, kwargs: dict) -> list | None:
    """The output tensors of a float64 copy of `module` on the float64 of the arguments' float
    tensors, in `OutputStructure.split`'s order; None where the model cannot run so."""

    def to_double(value):
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.detach().double()
        return value

    try:
        double = copy.deepcopy(module).double()
        double_args, double_kwargs = tree_map(to_double, (tuple(args), dict(kwargs)))
        with torch.no_grad():
            result = double(*double_args, **double_kwargs)
    except Exception:  # noqa: BLE001 - copying or running in float64 failed: no second opinion
        return None
    return [t.detach() for t in OutputStructure.split(result)[1]]


def within_float32_error(output, eager, reference, tolerance: float = RELATIVE_TOLERANCE) -> bool:
    """Whether `output` is off the float64 `reference` by at most FLOAT32_ERROR_FACTOR times
    eager's own error there, or by `tolerance` of the reference's scale (largest magnitudes
    over eager's finite entries)."""
    if not (isinstance(output, torch.Tensor) and isinstance(reference, torch.Tensor)
            and output.shape == eager.shape == reference.shape and eager.is_floating_point()):
        return False
    finite = torch.isfinite(eager)
    if not torch.equal(finite, torch.isfinite(output)):
        return False
    reference = reference.double()[finite]
    if reference.numel() == 0:
        return True
    own = (eager.double()[finite] - reference).abs().max().item()
    error = (output.double()[finite] - reference).abs().max().item()
    return error <= max(FLOAT32_ERROR_FACTOR * own, tolerance * reference.abs().max().item())


class LoweringMismatch(Exception):
    """The lowered replay's result on the example differs from eager's."""


def expect_outputs(outputs: list, references: list, op_names: Callable[[], list],
                   float64_references: Callable[[], list | None] = lambda: None) -> None:
    """Raises LoweringMismatch naming the lowered ops if a lowered replay's `outputs` differ
    from `references` (eager's), unless `float64_references()` (called only then) shows the
    differences to be float32's own rounding (`within_float32_error`)."""
    found = difference(outputs, references)
    if found is None:
        return
    index, relative = found
    exact = float64_references()
    if exact is not None and len(exact) == len(references) and all(
            difference([out], [ref]) is None or within_float32_error(out, ref, ref64)
            for out, ref, ref64 in zip(outputs, references, exact)):
        return
    raise LoweringMismatch(
        f"output {index} differs from eager by {relative:.3g} of its scale; lowered ops: "
        f"{', '.join(op_names()) or 'none'}"
    )
