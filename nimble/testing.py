"""The one comparison of a replay's result with eager's, for the test suite and for `bench`'s
check against eager before it times anything (so it lives in the package, not in tests/).

An absolute tolerance is blind where the outputs are small: with torchvision's initialisation
mobilenet_v2's logits are 1e-9, and `atol=1e-3` passed an all-zero or stale replay. Here the
difference is measured against the reference's own scale (its largest magnitude), and a
reference that is about zero is itself an error: nothing could be seen through it.

    assert_matches_eager(fast(x), model(x))                 # tolerance relative to max|eager|
    reason = mismatch(call(x), expected, tolerance=1e-3)   # None when it matches
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

# Relative to the reference's largest magnitude. Float32 rounding of reordered sums (prepacked
# kernels, folded batch norms, other thread splits) through a zoo model stays below 1e-4 of its
# output's scale; a wrong result, a stale replay or halved weights move it by 1e-1 or more.
TOLERANCE = 1e-4
# A reference whose largest magnitude is below this is about zero: a comparison against it
# would pass for an all-zero result.
FLOOR = 1e-2


class MismatchError(AssertionError):
    pass


def _leaves(value, path: str):
    if isinstance(value, torch.Tensor):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _leaves(item, f"{path}[{key!r}]")
    elif isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{path}[{i}]")
    elif value is not None and not isinstance(value, (int, float, bool, str)):
        raise TypeError(f"{path or 'result'}: cannot compare a {type(value).__name__}")


def _structure(value):
    if isinstance(value, torch.Tensor):
        return "tensor"
    if isinstance(value, Mapping):
        return {key: _structure(item) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return [_structure(item) for item in value]
    return value


def _tensor_mismatch(got: torch.Tensor, want: torch.Tensor, tolerance: float, floor: float,
                     equal_nan: bool) -> str | None:
    if got.shape != want.shape:
        return f"shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    got, want = got.detach().cpu(), want.detach().cpu()
    if not (want.is_floating_point() or want.is_complex()):
        return None if torch.equal(got, want) else "integer values differ"
    got, want = got.double(), want.double()
    finite = want.isfinite()
    same_special = torch.equal(got.isnan(), want.isnan()) and torch.equal(
        got[want.isinf()], want[want.isinf()])
    if not same_special or (want.isnan().any() and not equal_nan):
        return "NaN or infinity where the reference has none, or the other way round"
    if not finite.any():
        return None
    scale = want[finite].abs().max().item()
    if not scale >= floor:
        return (f"the reference is about zero (max |expected| {scale:.2e} < {floor:.0e}): "
                f"a comparison against it cannot see a wrong result")
    diff = (got[finite] - want[finite]).abs().max().item()
    if not diff <= tolerance * scale:
        return (f"max |difference| {diff:.3e} is {diff / scale:.2e} of max |expected| "
                f"{scale:.3e} (tolerance {tolerance:.0e})")
    return None


def mismatch(got, expected, tolerance: float = TOLERANCE, floor: float = FLOOR,
             equal_nan: bool = False) -> str | None:
    """Why `got` differs from the reference `expected` (tensors, or tuples, lists and dicts of
    them: each tensor against its own scale), or None where it matches: equal structure,
    shapes and dtypes; NaN and infinities where the reference has them; elsewhere every
    |got - expected| at most `tolerance` times the reference's largest magnitude, which must
    be at least `floor`."""
    if _structure(got) != _structure(expected):
        return f"structure {_structure(got)}, expected {_structure(expected)}"
    for (path, g), (_, w) in zip(_leaves(got, ""), _leaves(expected, "")):
        reason = _tensor_mismatch(g, w, tolerance, floor, equal_nan)
        if reason is not None:
            return f"{path}: {reason}" if path else reason
    return None


def assert_matches_eager(got, expected, tolerance: float = TOLERANCE, floor: float = FLOOR,
                         equal_nan: bool = False, what: str = "", model=None,
                         inputs: tuple = ()) -> None:
    """Raises MismatchError (an AssertionError) with `mismatch`'s reason. Given the `model`
    that `expected` came from and its positional `inputs`, a difference that is float32's own
    rounding passes: the model is ill-conditioned, and `got` is no further from the model run
    in float64 than float32 allows (`float32_limited`)."""
    reason = mismatch(got, expected, tolerance, floor, equal_nan)
    if reason is not None and not (model is not None
                                   and float32_limited(got, expected, model, inputs, tolerance)):
        raise MismatchError(f"{what}: {reason}" if what else reason)


def float32_limited(got, expected, model, inputs: tuple, tolerance: float = TOLERANCE) -> bool:
    """Whether each tensor of `got` that differs from eager's `expected` is within float32's
    own error of a float64 run of `model` on `inputs` (lowering_fallback.within_float32_error:
    at most a few times as far from it as eager)."""
    from .replay.lowering_fallback import float64_outputs, within_float32_error

    exact = float64_outputs(model, tuple(inputs), {})
    pairs = list(zip(_leaves(got, ""), _leaves(expected, "")))
    if exact is None or len(exact) != len(pairs):
        return False
    return all(_tensor_mismatch(g, w, tolerance, FLOOR, False) is None
               or within_float32_error(g, w, e, tolerance)
               for ((_, g), (_, w)), e in zip(pairs, exact))
