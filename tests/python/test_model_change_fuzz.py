"""Random sequences of changes to a prepared model, each followed by a call: the replay equals
eager, or both fail, or (with on_change="error") the replay raises StaleModelError or
BadInputError; never a silent difference. 2,000 sequences in all in CI (most on small models,
where preparing again is cheap); NIMBLE_FUZZ_SCALE multiplies every case's count.

Every change moves values by 10% to 50% (a change of 0.1% would hide a stale replay inside
the tolerance): hooks, global hooks and forward wrappers scale an output; the kinds that
change no value by themselves (a memory format, a dtype, a parametrization or pruning made
permanent, train/eval) also scale a weight. The test counts the calls where eager's output
moved by at least 10x the tolerance since the call before: most must have. (Some cannot: a
change to a layer whose output is unused, a hook on an inner module of a transformer layer
that eager runs as one fused op.)"""

import copy
import os
import random
import types
import warnings
from collections import Counter

import pytest
import torch
import torch.nn.utils.parametrize as parametrize
import torch.nn.utils.prune as prune
import torchvision

import nimble
from nimble.testing import assert_matches_eager
from nimble.zoo import realistic_weights

SCALE = float(os.environ.get("NIMBLE_FUZZ_SCALE", "1"))


class Scale(torch.nn.Module):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, w):
        return w * self.factor


class Encoder(torch.nn.Module):
    """A small transformer encoder over a token sequence."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(12, 32)
        layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(32, 5)

    def forward(self, x):
        return self.head(self.encoder(self.embed(x)).mean(1))


class SmallNet(torch.nn.Module):
    """Convolutions with batch norm, two branches, dropout and a linear head."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU()
        )
        self.left = torch.nn.Conv2d(8, 8, 1)
        self.right = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.Hardswish())
        self.drop = torch.nn.Dropout(0.2)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = self.stem(x)
        y = self.left(y) + self.right(y)
        return self.fc(self.drop(y.mean((2, 3))))


# Relative to the output's scale (nimble.testing), by model (None: the others). A stale replay
# is off by a change of 10% or more of some tensor; lowered kernels sum in other orders
# (blocked GEMMs, folded batch norms, fewer threads per stream), about 1e-6 of the scale on
# the unchanged models. resnet18 is worse conditioned: at batch 2 and 32x32 its layer4 maps
# are 1x1, so a batch norm switched to train mode normalises 2 values per channel, and dozens
# of changes of up to 50% leave running variances at 1/15 of their start. At sequence 72
# (a load_state_dict, followed in place), against the model run in float64 eager's float32
# output is off by 5.0e-4 of the scale and the lowered replay by 1.4e-3 (1.9e-3 from eager);
# scaling any one tensor by 1.5 there moves the replay from eager by 2e-4 at most (none is
# stale), and a fresh prepare keeps the lowering off, its own 1e-3 check failing alike.
TOLERANCE = {None: 1e-3, "resnet18": 5e-3}


def _rms(t: torch.Tensor) -> float:
    return float(t.detach().double().pow(2).mean().sqrt()) if t.numel() else 0.0


def _parent(model, path):
    *parents, name = path.split(".")
    module = model
    for p in parents:
        module = getattr(module, p)
    return module, name


class Changes:
    """The kinds of change a user makes to a model between calls, each applied to a random
    part of it. `pending` holds what must be undone later (hooks, a dtype)."""

    def __init__(self, model, rng):
        self.model = model
        self.rng = rng
        self.hooks = []
        self.global_hooks = []
        self.double = False
        # Each tensor's size at the start: changes shrink what has grown and grow what has
        # shrunk, so that hundreds of changes of up to 50% keep the model's outputs O(1).
        self.rms = {k: _rms(v) for k, v in model.state_dict().items() if v.is_floating_point()}

    def _factor(self, name: str | None = None, t: torch.Tensor | None = None) -> float:
        """1 ± U(0.1, 0.5): towards the tensor's starting size where it is known."""
        m = self.rng.uniform(0.1, 0.5)
        start = self.rms.get(name)
        if start is None or t is None:
            return 1 + m if self.rng.random() < 0.5 else 1 - m
        return 1 + m if _rms(t) < start else 1 - m

    def _perturbed(self, name: str, t: torch.Tensor) -> torch.Tensor:
        if not t.is_floating_point():
            return t.clone()
        return t.detach() * self._factor(name, t)

    def _param(self):
        return self.rng.choice(list(self.model.named_parameters()))

    def _weighted(self, plain_weight: bool):
        found = [
            m
            for m in self.model.modules()
            if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))
            and ("weight" in m._parameters) == plain_weight
            and (plain_weight or parametrize.is_parametrized(m, "weight"))
            # torch's pruning views the weight flat: a channels_last one cannot be pruned
            and (not plain_weight or m.weight.is_contiguous())
        ]
        return self.rng.choice(found) if found else None

    # Each returns a short name for the tally.
    def inplace(self):
        name, p = self._param()
        with torch.no_grad():
            p.mul_(self._factor(name, p))
        return "in-place"

    def load_state_dict(self):
        sd = {k: self._perturbed(k, v) for k, v in self.model.state_dict().items()}
        assign = self.rng.random() < 0.5
        self.model.load_state_dict(sd, assign=assign)
        return "load_state_dict assign" if assign else "load_state_dict"

    def data(self):
        name, p = self._param()
        p.data = self._perturbed(name, p)
        return ".data ="

    def set_(self):
        name, p = self._param()
        with torch.no_grad():
            p.set_(self._perturbed(name, p))
        return "set_"

    # A change that moves no value by itself (a memory format, a dtype, a parametrization or
    # pruning made permanent, train/eval of a module that does not read it) comes with a
    # weight scaled after it, in the tensors it made: a replay that missed it shows.
    def memory_format(self):
        fmt = self.rng.choice([torch.channels_last, torch.contiguous_format])
        self.model.to(memory_format=fmt)
        self.inplace()
        return "memory format"

    def dtype(self):
        if self.double:
            self.model.float()
            self.double = False
            self.inplace()
            return "float()"
        if self.rng.random() < 0.7:
            self.model.double().float()
            self.inplace()
            return "double().float()"
        self.model.double()
        self.double = True
        self.inplace()
        return "double()"

    def parameter(self):
        path, p = self._param()
        module, name = _parent(self.model, path)
        setattr(module, name, torch.nn.Parameter(self._perturbed(path, p), p.requires_grad))
        return "new Parameter"

    def buffer(self):
        buffers = [(n, b) for n, b in self.model.named_buffers() if b is not None]
        if not buffers:
            return self.parameter()
        path, b = self.rng.choice(buffers)
        module, name = _parent(self.model, path)
        setattr(module, name, self._perturbed(path, b))
        return "new buffer"

    def submodule(self):
        leaves = [
            (n, m)
            for n, m in self.model.named_modules()
            if n and not list(m.children()) and list(m.parameters(recurse=False))
            and not parametrize.is_parametrized(m) and not m._forward_pre_hooks
        ]
        if not leaves:  # every layer parametrized or pruned (long runs of a small model)
            return self.inplace()
        path, m = self.rng.choice(leaves)
        clone = copy.deepcopy(m)
        with torch.no_grad():
            for name, p in clone.named_parameters():
                p.copy_(self._perturbed(f"{path}.{name}", p))
        parent, name = _parent(self.model, path)
        setattr(parent, name, clone)
        return "new submodule"

    def parametrization(self):
        m = self._weighted(plain_weight=False)
        if m is not None and self.rng.random() < 0.5:
            parametrize.remove_parametrizations(m, "weight", leave_parametrized=True)
            self.inplace()
            return "parametrization removed"
        m = self._weighted(plain_weight=True)
        if m is None:
            return self.inplace()
        parametrize.register_parametrization(m, "weight", Scale(self._factor()))
        return "parametrization"

    def pruning(self):
        pruned = [(n, m) for n, m in self.model.named_modules()
                  if prune.is_pruned(m) and hasattr(m, "weight_mask")]
        if pruned and self.rng.random() < 0.5:
            path, m = self.rng.choice(pruned)
            prune.remove(m, "weight")
            # The pruned weights grow back: pruned again and again, a layer would end all
            # zeros, and no later change (they scale) could move what it feeds.
            with torch.no_grad():
                zero = m.weight == 0
                m.weight[zero] = torch.randn(int(zero.sum())) * self.rms[f"{path}.weight"]
            return "pruning removed"
        m = self._weighted(plain_weight=True)
        if m is None:
            return self.inplace()
        prune.l1_unstructured(m, "weight", amount=0.3)
        return "pruning"

    def hook(self):
        if self.hooks and self.rng.random() < 0.5:
            self.hooks.pop(self.rng.randrange(len(self.hooks))).remove()
            return "hook removed"
        _, m = self.rng.choice(list(self.model.named_modules()))
        factor = self._factor()
        if self.rng.random() < 0.5:
            handle = m.register_forward_hook(
                lambda mod, i, o: o * factor if isinstance(o, torch.Tensor) else o
            )
        else:
            handle = m.register_forward_pre_hook(
                lambda mod, i: tuple(t * factor if isinstance(t, torch.Tensor) else t for t in i)
            )
        self.hooks.append(handle)
        return "hook added"

    def global_hook(self):
        if self.global_hooks:
            self.global_hooks.pop().remove()
            return "global hook removed"
        # One layer's output scaled, through a hook every module runs.
        _, target = self.rng.choice(list(self.model.named_modules()))
        factor = self._factor()
        self.global_hooks.append(torch.nn.modules.module.register_module_forward_hook(
            lambda mod, i, o: o * factor if mod is target and isinstance(o, torch.Tensor) else o))
        return "global hook added"

    def mode(self):
        _, m = self.rng.choice(list(self.model.named_modules()))
        m.train(not m.training)
        self.inplace()
        return "train/eval"

    def forward_method(self):
        _, m = self.rng.choice([(n, m) for n, m in self.model.named_modules() if n])
        if "forward" in vars(m):
            del m.forward
            return "forward restored"
        original, factor = type(m).forward, self._factor()

        def scaled(self, *a, **kw):
            out = original(self, *a, **kw)
            return out * factor if isinstance(out, torch.Tensor) else out

        m.forward = types.MethodType(scaled, m)
        return "forward assigned"

    KINDS = [
        "inplace", "load_state_dict", "data", "set_", "memory_format", "dtype", "parameter",
        "buffer", "submodule", "parametrization", "pruning", "hook", "global_hook", "mode",
        "forward_method",
    ]

    def random(self):
        kind = "dtype" if self.double else self.rng.choice(self.KINDS)
        return getattr(self, kind)()

    def undo_global(self):
        while self.global_hooks:
            self.global_hooks.pop().remove()


def _model(name):
    torch.manual_seed(0)
    if name == "encoder":
        model, x = Encoder().eval(), torch.randn(2, 6, 12)
    elif name == "small":
        model, x = SmallNet().eval(), torch.randn(2, 3, 8, 8)
    else:
        model, x = getattr(torchvision.models, name)(num_classes=10).eval(), torch.randn(2, 3, 32, 32)
    # Outputs of order one (torchvision's mobilenet_v3_small gives 1e-9 as initialised).
    return realistic_weights(model, lambda: model(torch.randn_like(x))), x


def _call(fast, model, x, sequence, applied, on_change, outcomes, tolerance) -> str:
    """One call after a sequence of changes, eager and replayed from the same random state
    (dropout in train mode draws alike): 'equal' or 'both failed'; anything else fails.
    Counts in outcomes["moved"] the calls where eager's output moved by at least 10x the
    tolerance since the last call that ran."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(sequence)
        try:
            with torch.no_grad():
                want = model(x)
            eager_error = None
        except Exception as e:  # the change broke the model for eager too
            eager_error = e
        torch.manual_seed(sequence)
        try:
            got = fast(x)
        except (nimble.StaleModelError, nimble.BadInputError) as e:
            assert on_change == "error" or eager_error is not None, (sequence, applied, e)
            outcomes["refused"] += 1
            if eager_error is not None:
                return "both failed"
            fast.prepare(x, streams=fast._options.streams, on_change=fast._options.on_change)
            torch.manual_seed(sequence)
            got = fast(x)
        except Exception as e:
            assert eager_error is not None, (sequence, applied, repr(e))
            return "both failed"
    assert eager_error is None, (sequence, applied, "the replay ran where eager failed", eager_error)
    # Judged as prepare's lowering check judges (lowering_fallback.py): where the model drifted
    # ill-conditioned (resnet18's batch norms, see TOLERANCE), a difference from eager passes
    # if the replay is within float32's own error of the model run in float64.
    assert_matches_eager(got, want, tolerance=tolerance, equal_nan=True,
                         what=f"sequence {sequence} {applied}", model=model, inputs=(x,))
    scale = float(want.nan_to_num().abs().max())
    outcomes["worst"] = max(outcomes["worst"], float((got - want).nan_to_num().abs().max()) / scale)
    last = outcomes.pop("last", None)
    if last is not None and last.shape == want.shape:
        moved = float((want - last).nan_to_num().abs().max()) >= 10 * tolerance * scale
        outcomes["moved"] += int(moved)
    outcomes["last"] = want
    return "equal"


# (model, streams, on_change, sequences)
CASES = [
    ("resnet18", 1, "reprepare", 300),
    ("mobilenet_v3_small", 2, "reprepare", 200),
    ("encoder", 1, "reprepare", 500),
    ("small", 2, "reprepare", 600),
    ("small", 3, "error", 400),
]


# resnet18's ~200 reprepares take ~750 s on a loaded 2-core machine, past pyproject's 900 s under
# more load (where the change being handled, "StaleModelError: ... removed", was read as the failure).
@pytest.mark.timeout(2400)
@pytest.mark.parametrize(
    "name,streams,on_change,count", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES]
)
def test_no_silent_difference_after_random_changes(name, streams, on_change, count):
    sequences = max(1, round(count * SCALE))
    rng = random.Random(f"{name}-{streams}-{on_change}")
    model, x = _model(name)
    fast = nimble.Nimble(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast.prepare(x, streams=streams, on_change=on_change)
    changes = Changes(model, rng)
    tally, outcomes = Counter(), Counter()
    try:
        for sequence in range(sequences):
            applied = [changes.random() for _ in range(rng.randint(1, 3))]
            tally.update(applied)
            outcomes[_call(fast, model, x, sequence, applied, on_change, outcomes,
                           TOLERANCE.get(name, TOLERANCE[None]))] += 1
    finally:
        changes.undo_global()
    outcomes.pop("last", None)
    outcomes["worst"] = float(f"{outcomes['worst']:.1e}")
    print(f"\n{name} streams={streams} on_change={on_change}: {dict(outcomes)}; changes {dict(tally)}")
    assert outcomes["equal"] + outcomes["both failed"] == sequences
    assert outcomes["equal"] >= sequences // 2  # the model stayed usable for most sequences
    # A stale replay would have shown on most calls: eager's output moved by 10x the tolerance.
    assert outcomes["moved"] >= 0.8 * outcomes["equal"], dict(outcomes)
