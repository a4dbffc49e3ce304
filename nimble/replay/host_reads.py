"""How a capture runs the model: which of torch's paths it takes, and the host reads it
refuses that a dispatch mode cannot see (`Tensor.tolist`, `.numpy`, `__array__` read the
data directly).

While a `TorchFunctionMode` is active, `torch.overrides.has_torch_function` is true for every
tensor, and torch's modules that check it take their unfused paths: `nn.TransformerEncoderLayer`
and `nn.MultiheadAttention` run their linear layers one by one (which the CPU lowering packs)
instead of one fused op. The two compute the same, up to rounding, except under a global
forward hook: the fused op never calls the layer's inner modules, so eager skips the hook on
them and the unfused trace applies it (a replay off by the hook's change, issue 43); and
where an inner module runs a forward of its own (one assigned to the instance, a subclass's),
which the unfused path calls and the fused op skips. So the capture runs under `UnfusedPaths`
only where neither is the case (one added later is a change the model watch sees: the replay
prepares again), and the host reads are
refused by wrapping the methods on `torch.Tensor`, only while some thread captures and only
on a thread that does.
"""

from __future__ import annotations

import threading
from typing import Callable

import torch
from torch.nn.modules import module as _module_globals
from torch.overrides import TorchFunctionMode

_METHODS = ("tolist", "numpy", "__array__")


class HostReadGuard:
    """A context manager: the host reads above, on this thread, raise through `refuse`
    (called with the method's name) until it exits. Reentrant and thread-safe."""

    _lock = threading.Lock()
    _capturing_threads = 0  # threads inside a guard; the methods are wrapped while > 0
    _saved: dict[str, object] = {}  # what torch.Tensor's own dictionary held
    _this_thread = threading.local()

    def __init__(self, refuse: Callable[[str], None]) -> None:
        self._refuse = refuse

    def __enter__(self) -> "HostReadGuard":
        state = HostReadGuard._this_thread
        refusers = getattr(state, "refusers", None)
        if refusers is None:
            refusers = state.refusers = []
        if not refusers:
            with HostReadGuard._lock:
                if HostReadGuard._capturing_threads == 0:
                    _wrap_methods()
                HostReadGuard._capturing_threads += 1
        refusers.append(self._refuse)
        return self

    def __exit__(self, *exc) -> None:
        refusers = HostReadGuard._this_thread.refusers
        refusers.pop()
        if not refusers:
            with HostReadGuard._lock:
                HostReadGuard._capturing_threads -= 1
                if HostReadGuard._capturing_threads == 0:
                    _restore_methods()


def _refusing(name: str, original):
    def method(self, *args, **kwargs):
        refusers = getattr(HostReadGuard._this_thread, "refusers", None)
        if refusers:
            refusers[-1](name)
        return original(self, *args, **kwargs)

    method.__name__ = name
    return method


def _wrap_methods() -> None:
    saved = HostReadGuard._saved
    for name in _METHODS:
        saved[name] = vars(torch.Tensor).get(name)
        setattr(torch.Tensor, name, _refusing(name, getattr(torch.Tensor, name)))


def _restore_methods() -> None:
    for name in _METHODS:
        own = HostReadGuard._saved.pop(name)
        if own is None:  # inherited from torch._C.TensorBase
            delattr(torch.Tensor, name)
        else:
            setattr(torch.Tensor, name, own)


class UnfusedPaths(TorchFunctionMode):
    """Changes nothing an op does; while active, torch's modules take their unfused paths."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


# The modules whose forward takes a fused path that reads their inner modules' weights
# without calling those modules.
_FUSED_PATH_MODULES = (torch.nn.TransformerEncoderLayer, torch.nn.MultiheadAttention)


def _runs_torchs_own_forward(module: torch.nn.Module) -> bool:
    """Whether calling `module` runs torch's own forward: no forward assigned to the instance,
    none defined by a subclass or patched onto the class outside torch."""
    if "forward" in vars(module):
        return False
    return getattr(type(module).forward, "__module__", "").startswith("torch.")


def eager_takes_the_unfused_paths_alike(module: torch.nn.Module) -> bool:
    """Whether the fused paths of `module`'s layers and their unfused ones compute the same:
    not under a global module hook, and not where an inner module of such a layer runs a
    forward of its own (assigned to it, or a subclass's), which the unfused path calls and
    the fused op skips (the model-change fuzz's encoder at sequence 210: forwards assigned
    to a layer's attention and linear layers, off by 0.26 of the scale)."""
    if _module_globals._global_forward_hooks or _module_globals._global_forward_pre_hooks:
        return False
    return all(
        _runs_torchs_own_forward(inner)
        for layer in module.modules() if isinstance(layer, _FUSED_PATH_MODULES)
        for inner in layer.modules() if inner is not layer
    )
