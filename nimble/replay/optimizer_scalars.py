"""The host-side numbers of a captured optimizer step, recomputed before every replay.

torch's SGD, Adam and AdamW compute a few Python floats on the host each step (``-lr``,
``1 - beta1``, Adam's bias corrections from the step count) and pass them to kernels as
scalar arguments. A replay must not keep the numbers of the captured step: the learning
rate may change (by hand or by an LR scheduler) and Adam's bias corrections change every
step. This module finds those arguments in the trace and recomputes them.

How the arguments are found: the capture runs with every nonzero hyperparameter nudged to
an unusual value, distinct per parameter group, so that each formula below has a value no
other scalar of the trace has; an argument equal to a formula's value is that formula. The
formulas copy torch's own expressions (same operations, same order), so a replay passes
kernels bit-identical numbers to those eager passes.

On a graph backend (a CUDA graph, or its CPU twin), where a changed number means capturing
the graph again, Adam and AdamW are captured in torch's own `capturable=True` form instead
(`device_steps`): the step counts live in device tensors the step increments, the bias
corrections are computed from them on the device, and the learning rate is read from a
device tensor of nimble's that is refreshed (a fill kernel, no copy, no sync) when it
changes. The numbers left as host scalars (betas, eps, weight decay) change only when the
user changes them: a step is one launch, an LR scheduler included. The user's optimizer
keeps its settings (`capturable` stays as it was); only its step counts move to the
parameters' device. The plain CPU backend reads its scalars on every call and keeps torch's
default form, bit for bit eager's.

Everything else about a group (which terms exist: momentum, weight decay, nesterov,
amsgrad, maximize, foreach) decides which ops the step runs; it is its *structure*, and a
change of it after prepare is refused (the trace has the other ops).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from typing import Callable

import torch
import torch.optim.adam as torch_adam
from torch.optim.optimizer import _get_scalar_dtype

from ..errors import StaleModelError, UnsupportedOpError

# Group entries that change which ops a step runs.
_STRUCTURE = {
    torch.optim.SGD: ("nesterov", "maximize", "foreach", "differentiable", "fused"),
    torch.optim.Adam: (
        "amsgrad",
        "maximize",
        "foreach",
        "capturable",
        "differentiable",
        "fused",
        "decoupled_weight_decay",
    ),
}
# Numbers whose zero-ness is structure (a zero term is skipped) but whose value is not.
_ZERO_MATTERS = {torch.optim.SGD: ("momentum", "weight_decay"), torch.optim.Adam: ("weight_decay",)}


def _family(optimizer: torch.optim.Optimizer):
    for family in _STRUCTURE:
        if isinstance(optimizer, family):
            return family
    raise UnsupportedOpError(
        f"nimble replays the update of torch.optim.SGD, Adam and AdamW; got "
        f"{type(optimizer).__name__}. Use prepare(training=True) without an optimizer and "
        f"call optimizer.step() yourself."
    )


# Each returns only the terms the group's update has (a zero weight decay has none).
def _sgd_formulas(g: dict, step: float) -> dict[str, float]:
    values = {"-lr": -g["lr"]}
    if g["weight_decay"] != 0:
        values["weight_decay"] = g["weight_decay"]
    if g["momentum"] != 0:
        values["momentum"] = g["momentum"]
        values["1 - dampening"] = 1 - g["dampening"]
    return values


def _adam_formulas(g: dict, step: float) -> dict[str, float]:
    beta1, beta2 = g["betas"]
    lr, weight_decay = g["lr"], g["weight_decay"]
    # torch: `param.addcdiv_(..., value=-step_size)` (single tensor) and
    # `(lr / bc) * -1` (foreach) are the same number: negation is exact.
    values = {
        "1 - beta1": 1 - beta1,
        "beta2": beta2,
        "1 - beta2": 1 - beta2,
        "eps": g["eps"],
        "bias_correction2 ** 0.5": (1 - beta2**step) ** 0.5,
        "-step_size": -(lr / (1 - beta1**step)),
    }
    if weight_decay != 0 and g["decoupled_weight_decay"]:
        values["1 - lr * weight_decay"] = 1 - lr * weight_decay
    elif weight_decay != 0:
        values["weight_decay"] = weight_decay
    return values


def _adam_device_formulas(g: dict, step: float) -> dict[str, float]:
    """torch's capturable Adam with a tensor learning rate: what is left on the host."""
    beta1, beta2 = g["betas"]
    values = {"1 - beta1": 1 - beta1, "beta1": beta1, "beta2": beta2, "1 - beta2": 1 - beta2,
              "eps": g["eps"]}
    if g["weight_decay"] != 0:
        values["weight_decay"] = g["weight_decay"]
    return values


@contextlib.contextmanager
def _capturable_on(device: torch.device):
    """torch gates `capturable=True` to devices with graphs; its ops are plain tensor ops, and
    the CPU twin of the CUDA graph replays them on the CPU."""
    original = torch_adam._get_capturable_supported_devices
    if device.type == "cpu":
        torch_adam._get_capturable_supported_devices = lambda *a, **k: original(*a, **k) + ["cpu"]
    try:
        with warnings.catch_warnings():
            # The recorded step is not a CUDA-graph capture (the replay's graph is made later).
            warnings.filterwarnings("ignore", message=".*capturable=True.*")
            yield
    finally:
        torch_adam._get_capturable_supported_devices = original


_FORMULAS: dict[type, Callable[[dict, float], dict[str, float]]] = {
    torch.optim.SGD: _sgd_formulas,
    torch.optim.Adam: _adam_formulas,
}


def _is_tensor_hyperparameter(group: dict) -> str | None:
    for key in ("lr", "momentum", "dampening", "weight_decay", "eps"):
        if isinstance(group.get(key), torch.Tensor):
            return key
    if any(isinstance(b, torch.Tensor) for b in group.get("betas", ())):
        return "betas"
    return None


class OptimizerScalars:
    """What a captured optimizer step needs to stay right across replays."""

    def __init__(self, optimizer: torch.optim.Optimizer, device_steps: bool = False) -> None:
        """`device_steps`: capture Adam and AdamW in their device-resident form (above); for
        backends that bake scalars in. SGD has no step-dependent numbers: unchanged."""
        self.optimizer = optimizer
        self.family = _family(optimizer)
        self.device_steps = device_steps and self.family is torch.optim.Adam
        # Per group, the device tensor the captured step reads its learning rate from, and
        # the value last written there.
        self.lr_tensors: list[torch.Tensor] = []
        self._lr_written: list[float | None] = []
        for group in optimizer.param_groups:
            key = _is_tensor_hyperparameter(group)
            if key is not None:
                raise UnsupportedOpError(
                    f"{type(optimizer).__name__}: the hyperparameter {key!r} is a tensor; "
                    f"nimble replays float hyperparameters (torch's default)"
                )
            if group.get("fused") or group.get("capturable") or group.get("differentiable"):
                raise UnsupportedOpError(
                    f"{type(optimizer).__name__}: fused, capturable and differentiable "
                    f"implementations are not replayed; use the default or foreach=True"
                )
        self.structure = self._structure()
        if self.device_steps:
            for group in optimizer.param_groups:
                device = group["params"][0].device if group["params"] else torch.device("cpu")
                self.lr_tensors.append(torch.zeros((), dtype=_get_scalar_dtype(), device=device))
                self._lr_written.append(None)
        self.places: list[tuple[int, int, int]] = []  # (traced op, argument, element)
        self._last_values: list[dict[str, float]] | None = None
        self._last_list: list[float] = []
        self._place_keys: list[tuple[int, str]] = []  # (group, formula) per place

    def _structure(self) -> list:
        zero_matters = _ZERO_MATTERS[self.family]
        return [
            (
                tuple(map(id, g["params"])),
                tuple(g.get(k) for k in _STRUCTURE[self.family]),
                tuple(g[k] == 0 for k in zero_matters),
            )
            for g in self.optimizer.param_groups
        ]

    def check_unchanged(self) -> None:
        """Refuses a step after the parameter groups or a group's structure changed."""
        now = self._structure()
        if now == self.structure:
            return
        if [s[0] for s in now] != [s[0] for s in self.structure]:
            raise StaleModelError(
                "the optimizer changed since prepare: its parameter groups (parameters added, "
                "removed or replaced)"
            )
        raise StaleModelError(
            "the optimizer changed since prepare: a setting that decides which update runs "
            f"(one of {_STRUCTURE[self.family] + _ZERO_MATTERS[self.family]}, e.g. a "
            "weight decay or momentum set to or from zero)"
        )

    @contextlib.contextmanager
    def nudged(self, unrecorded=contextlib.nullcontext):
        """Every nonzero float hyperparameter moved to a value of its own while capturing.
        `unrecorded`: a context in which the recorder does not see what runs (the device
        form's learning rates are written there, not as ops of the step)."""
        saved = [dict(g) for g in self.optimizer.param_groups]
        try:
            for index, group in enumerate(self.optimizer.param_groups):
                factor = 1 - math.pi * 1e-3 * (index + 1) / 7  # stays below 1: betas stay valid
                for key in ("lr", "momentum", "weight_decay", "eps"):
                    if group.get(key):
                        group[key] = group[key] * factor
                if "dampening" in group:
                    # Used whenever momentum is; zero only removes nothing.
                    group["dampening"] = group["dampening"] * factor or math.e * 1e-3 * (index + 1)
                if "betas" in group:
                    group["betas"] = tuple(b * factor for b in group["betas"])
            if not self.device_steps:
                yield
                return
            with unrecorded():
                for group, lr in zip(self.optimizer.param_groups, self.lr_tensors):
                    lr.fill_(group["lr"])
            for group, lr in zip(self.optimizer.param_groups, self.lr_tensors):
                group["lr"] = lr
                group["capturable"] = True
            self._lr_written = [None] * len(self.lr_tensors)  # the nudged values are there
            with _capturable_on(self.lr_tensors[0].device):
                yield
        finally:
            for group, old in zip(self.optimizer.param_groups, saved):
                group.clear()
                group.update(old)

    def move_steps_to_device(self) -> None:
        """Adam's step counts (CPU tensors by torch's default) onto their parameters' device,
        where the device form of the step increments them."""
        if not self.device_steps:
            return
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                state = self.optimizer.state.get(p)
                if state and isinstance(state.get("step"), torch.Tensor):
                    if state["step"].device != p.device:
                        state["step"] = state["step"].to(p.device)

    def write_device_values(self) -> None:
        """The groups' learning rates into the tensors the captured step reads, where they
        changed: a fill with the number as its argument, queued on the current stream like
        the replay's launch (no host-to-device copy, no synchronization)."""
        for i, (group, lr) in enumerate(zip(self.optimizer.param_groups, self.lr_tensors)):
            if group["lr"] != self._lr_written[i]:
                lr.fill_(group["lr"])
                self._lr_written[i] = group["lr"]

    def _group_steps(self, check_all: bool = False) -> list[float]:
        """Per group, the step count the next update uses. Adam counts per parameter; the
        replayed update moves every count of a group together, so after the check at
        prepare the first parameter's count speaks for its group."""
        if self.family is not torch.optim.Adam or self.device_steps:
            # (the device form reads its counts on the device: never read here, no sync)
            return [0.0] * len(self.optimizer.param_groups)
        steps = []
        state = self.optimizer.state
        for group in self.optimizer.param_groups:
            params = [p for p in group["params"] if p in state]
            counts = {float(state[p]["step"]) for p in (params if check_all else params[:1])}
            if len(counts) > 1:
                raise UnsupportedOpError(
                    "Adam's step counts differ between parameters of one group; nimble "
                    "replays groups whose parameters are all updated every step"
                )
            steps.append(counts.pop() + 1 if counts else 1.0)
        return steps

    def _values(self, check_all: bool = False) -> list[dict[str, float]]:
        formulas = _adam_device_formulas if self.device_steps else _FORMULAS[self.family]
        steps = self._group_steps(check_all)
        return [formulas(g, s) for g, s in zip(self.optimizer.param_groups, steps)]

    def expected_values(self) -> dict[float, tuple[int, str]]:
        """Each formula's value for the step about to be captured (call while `nudged`,
        before that step), keyed by value."""
        by_value: dict[float, tuple[int, str]] = {}
        for group, values in enumerate(self._values(check_all=True)):
            for name, value in values.items():
                if value in (0.0, 1.0, -1.0) or value in by_value:
                    raise UnsupportedOpError(
                        f"cannot tell the optimizer's {name!r} apart from another number of "
                        f"its step (value {value}); please report this"
                    )
                by_value[value] = (group, name)
        return by_value

    def find_places(
        self, candidates: list[tuple[int, int, int, float]], expected: dict[float, tuple[int, str]]
    ) -> None:
        """Keeps the scalar arguments of the captured step (traced op, argument, element,
        value) that are a formula's value."""
        self.places, self._place_keys = [], []
        self._last_values = None
        for op, arg, elem, value in candidates:
            key = expected.get(value)
            if key is not None:
                self.places.append((op, arg, elem))
                self._place_keys.append(key)

    def current_values(self) -> list[float]:
        """The value of every place for the next update, from the groups as they are now
        (a list as long as the step has scalar arguments, hundreds: made again only when a
        group's numbers changed, as this runs before every step)."""
        values = self._values()
        if values != self._last_values:
            self._last_values = values
            self._last_list = [values[group][name] for group, name in self._place_keys]
        return self._last_list


def scalar_candidates(ops, first: int, schema_arguments, produced: set[int]) -> list:
    """Every double scalar argument of traced ops `first..`: Python floats, elements of
    float lists, and 0-dim double tensors no op produced (numbers torch wrapped)."""
    found = []
    for index in range(first, len(ops)):
        op = ops[index]
        for a, value in enumerate(schema_arguments(op.func, op.args, op.kwargs)):
            if isinstance(value, float):
                found.append((index, a, -1, value))
            elif isinstance(value, (list, tuple)):
                for e, item in enumerate(value):
                    if isinstance(item, float):
                        found.append((index, a, e, item))
            elif (
                isinstance(value, torch.Tensor)
                and value.dim() == 0
                and value.dtype == torch.float64
                and id(value) not in produced
            ):
                found.append((index, a, -1, value.item()))
    return found
