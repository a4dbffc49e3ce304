"""What a replay knows of the model it was prepared from, and what it cannot repeat.

`watch` fingerprints the module tree for the C++ check that runs before every call
(csrc/python/model_watch.h, which says what is compared how); torch's global registration
hooks, installed once, report assignments to it. A change raises `StaleModelError` before
anything runs; `Nimble` then prepares again or, with `prepare(..., on_change="error")`,
hands the error on. The training replays check in Python, before every call, which
parameters get gradients (`TrainableParameters`): freezing one changes no dictionary.

`PythonSideEffects` names what a replay does not repeat: hooks that ran during the capture
(their tensor ops are in the trace; their Python side effects are not) and attributes the
forward changed (a call counter, a cache dict).
"""

from __future__ import annotations

import copy
import inspect
import weakref
from dataclasses import dataclass, field

import torch
from torch.nn.modules import module as _module_globals
from torch.utils.hooks import RemovableHandle

from ..errors import StaleModelError

# Per module: (dictionary attribute, what its entries are, its keys are hook ids).
_MODULE_DICTS = (
    ("_parameters", "parameters", False),
    ("_buffers", "buffers", False),
    ("_modules", "submodules", False),
    ("_forward_hooks", "forward hooks", True),
    ("_forward_pre_hooks", "forward pre-hooks", True),
    ("_backward_hooks", "backward hooks", True),
    ("_backward_pre_hooks", "backward pre-hooks", True),
)
_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_GLOBAL_HOOKS = {
    "_global_forward_hooks": "global forward hooks",
    "_global_forward_pre_hooks": "global forward pre-hooks",
    "_global_backward_hooks": "global backward hooks",
    "_global_backward_pre_hooks": "global backward pre-hooks",
}
# What an fx.GraphModule (a torch.compile graph, a traced model) sets on its first call,
# when it compiles its graph's Python code: its own code, not state a forward keeps.
_FX_CODE_CACHE = {"_code", "_lineno_map", "_prologue_start"}
# Module attributes that are its machinery, not state a forward keeps.
_MACHINERY = {name for name, _, _ in _MODULE_DICTS} | {
    "training",
    "_non_persistent_buffers_set",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks_with_kwargs",
    "_is_full_backward_hook",
    "_state_dict_hooks",
    "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks",
    "_compiled_call_impl",
}

# Module -> [(weak reference to a ModelWatch, the module's path in that watch's model)].
_WATCHED: "weakref.WeakKeyDictionary[torch.nn.Module, list]" = weakref.WeakKeyDictionary()
_HOOKS_INSTALLED = []


def _registered(kind: str):
    """A global registration hook: tells the watches of `module` that `name` changed."""

    def hook(module, name, value):
        watches = _WATCHED.get(module)
        if watches:
            existed = name in getattr(module, f"_{kind}s", {}) or name in module.__dict__
            for ref, prefix in watches:
                watch = ref()
                if watch is not None:
                    watch.mark_changed(f"{prefix}{name} {'replaced' if existed else 'added'}")
        return None

    return hook


def _install_registration_hooks() -> None:
    """Once per process: assignments of parameters, buffers and submodules anywhere reach
    the watches of the modules they are made on (a dictionary lookup per assignment)."""
    if _HOOKS_INSTALLED:
        return
    _module_globals.register_module_parameter_registration_hook(_registered("parameter"))
    _module_globals.register_module_buffer_registration_hook(_registered("buffer"))
    _module_globals.register_module_module_registration_hook(_registered("module"))
    _HOOKS_INSTALLED.append(True)


def _reads_training(cls: type) -> bool:
    """Whether a method the class defines (not nn.Module's own) reads `self.training`."""
    for klass in cls.__mro__:
        if klass is torch.nn.Module or klass is object:
            continue
        for fn in vars(klass).values():
            code = getattr(inspect.unwrap(fn) if callable(fn) else fn, "__code__", None)
            if code is not None and "training" in code.co_names:
                return True
    return False


def _where(path: str) -> str:
    return path or "the model"


def watch(module: torch.nn.Module, owner: torch.nn.Module | None = None):
    """A `nimble._C.ModelWatch` over `module` as it is now; `owner` (the Nimble wrapping
    it): its submodules too, so that replacing the wrapped module is seen."""
    from .. import _C

    _install_registration_hooks()
    w = _C.ModelWatch()
    ref = weakref.ref(w)
    if owner is not None:
        _WATCHED.setdefault(owner, []).append((ref, "the wrapper's "))
        w.watch_dict("the wrapper's submodules", "the wrapper's ", owner._modules, False, True)
    for path, mod in module.named_modules():
        prefix = f"{path}." if path else ""
        _WATCHED.setdefault(mod, []).append((ref, prefix))
        for attribute, kind, hooks in _MODULE_DICTS:
            d = mod.__dict__.get(attribute)
            if d is None:
                continue
            key_prefix = f"{_where(path)}: {kind[:-1]} #" if hooks else prefix
            # Additions show in the registration hooks and RemovableHandle's ids: the size is
            # compared for removals, which an empty dictionary cannot have.
            w.watch_dict(f"{kind} of {_where(path)}", key_prefix, d, hooks, bool(d))
        w.watch_dict(f"attributes of {_where(path)}", prefix, mod.__dict__, False, True)
        if not path or _reads_training(type(mod)):
            w.watch_item(f"{_where(path)}.training (train/eval mode)", mod.__dict__, "training")
    for attribute, kind in _GLOBAL_HOOKS.items():
        w.watch_dict(kind, f"{kind[:-1]} #", getattr(_module_globals, attribute), True, True)
    w.watch_hook_ids(RemovableHandle)
    return w


def state_names(module: torch.nn.Module) -> list[tuple[torch.Tensor, str]]:
    """Each parameter and buffer with its attribute path, for messages."""
    named = list(module.named_parameters(remove_duplicate=False))
    named += [(n, b) for n, b in module.named_buffers(remove_duplicate=False) if b is not None]
    return [(t, n) for n, t in named]


class TrainableParameters:
    """Which parameters a training replay computes gradients for, checked before every call.
    A parameter replaced, added or removed changes a module's dictionary, which the model
    watch sees first; freezing or unfreezing one changes none, so this compares each
    parameter's `requires_grad` with prepare's. It does not walk the module tree per call
    (`module.parameters()` cost milliseconds a step on mobilenet_v2, longer than the step's
    kernels, issue 45), and compares in C++ (csrc/runtime/trainable_parameters.h: a Python
    loop over mobilenet_v2's 158 parameters cost ~10 us of every step's host work)."""

    def __init__(self, module: torch.nn.Module) -> None:
        from .. import _C

        self._flags = _C.TrainableParameters(list(module.parameters()))

    def check(self) -> None:
        """Refuses a training call after the parameters that get gradients changed."""
        if not self._flags.unchanged():
            raise StaleModelError(
                "the model changed since prepare: its trainable parameters were replaced, "
                "added, removed or (un)frozen"
            )


def _hook_name(hook) -> str:
    fn = getattr(hook, "__func__", hook)
    qualname = getattr(fn, "__qualname__", None) or type(hook).__qualname__
    where = getattr(fn, "__module__", None)
    return f"{where}.{qualname}" if where else qualname


def hooks_of(module: torch.nn.Module) -> list[str]:
    """Every forward/backward hook that a run of `module` calls, named with its module path."""
    found = []
    for path, mod in module.named_modules():
        for attribute in _HOOK_DICTS:
            for hook in (mod.__dict__.get(attribute) or {}).values():
                found.append(f"{_where(path)}: {attribute[1:-1].replace('_', ' ')} {_hook_name(hook)}")
    for attribute, kind in _GLOBAL_HOOKS.items():
        for hook in getattr(_module_globals, attribute).values():
            found.append(f"{kind[:-1]} {_hook_name(hook)}")
    return found


def _fingerprint(value):
    """What of an attribute's value a forward can change without rebinding it."""
    if isinstance(value, (list, dict, set)):
        try:
            return ("container", id(value), copy.copy(value))
        except Exception:  # an unusual container: its identity is all we compare
            return ("object", id(value))
    return ("value", id(value), value if isinstance(value, (int, float, str, bool)) else None)


def _same(before, after) -> bool:
    if before[:2] != after[:2]:
        return before[0] == "value" == after[0] and before[2] is not None and before[2] == after[2]
    if before[0] != "container":
        return True
    a, b = before[2], after[2]
    if len(a) != len(b):
        return False
    try:
        pairs = zip(a.items(), b.items()) if isinstance(a, dict) else zip(a, b)
        return all(x is y or (not isinstance(x, torch.Tensor) and x == y) for x, y in pairs)
    except Exception:  # elements that cannot be compared: assume they changed
        return False


def _attributes(module: torch.nn.Module) -> dict[str, tuple]:
    out = {}
    for path, mod in module.named_modules():
        code_cache = _FX_CODE_CACHE if isinstance(mod, torch.fx.GraphModule) else set()
        for name, value in vars(mod).items():
            if (name in _MACHINERY or name in code_cache
                    or isinstance(value, (torch.Tensor, torch.nn.Module))):
                continue
            out[f"{path}.{name}" if path else name] = _fingerprint(value)
    return out


@dataclass
class PythonSideEffects:
    """What a capture of `module` ran that a replay does not repeat: taken before the
    capture (`before`), compared after it (`after`)."""

    module: torch.nn.Module
    hooks: list[str] = field(default_factory=list)
    mutated: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.hooks = hooks_of(self.module)
        self._before = _attributes(self.module)

    def after(self) -> "PythonSideEffects":
        now = _attributes(self.module)
        self.mutated = [
            name
            for name, fingerprint in now.items()
            if name not in self._before or not _same(self._before[name], fingerprint)
        ]
        self.mutated += [name for name in self._before if name not in now]
        return self

    def __bool__(self) -> bool:
        return bool(self.hooks or self.mutated)

    def describe(self) -> str:
        parts = []
        if self.hooks:
            parts.append(
                "hooks ran during the capture and their Python code does not run on a replay "
                "(their tensor ops do): " + "; ".join(self.hooks)
            )
        if self.mutated:
            parts.append(
                "the forward changed these attributes, which a replay leaves as they are: "
                + ", ".join(self.mutated)
            )
        return "; ".join(parts)
