"""Random stacks of the ops the CPU lowering and its layout plan touch, against eager.

Each program comes from one seed: convolutions of every kind (groups, depthwise, dilation,
stride, padding, 1x1, transposed), batch norms, activations (in place or not), poolings
(adaptive ones that upsample too), channel splits and chunks whose pieces are convolved and
concatenated, elementwise ops with broadcasting (squeeze-excitation, parameters, residuals),
views and permutes of 4-d values, and a head of flatten/view/reshape and linear layers; at small
(1-8 pixels) and large (16-48 pixels) spatial sizes. A program passes when the lowered replay
(`prepare`'s default) equals eager relative to the output's scale without a fallback warning.

    python -m tests.python.layout_fuzz --programs 5000 [--seed 0] [--threads 2] [--calls 3]
    python -m tests.python.layout_fuzz --program 1234 --show

One torch thread unless `--threads` says otherwise: with two, nimble's kernels share their
work with the helper thread (whose GEMM claims run backwards); `--calls N` replays N times, a
second input between the example's calls, each against eager, so that the helper takes pieces.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import warnings

import torch
from torch import nn

import nimble
import nimble._C  # noqa: F401  (the helper threads' piece count)

TOLERANCE = 1e-4  # of the output's largest magnitude
ACTIVATIONS = ["relu", "relu_", "hardswish", "silu", "sigmoid", "gelu", "leaky_relu", "hardtanh",
               "clamp", "tanh", "elu", "mish"]


def activate(x: torch.Tensor, name: str) -> torch.Tensor:
    if name == "relu_":
        return x.relu_()
    if name == "hardtanh":
        return nn.functional.hardtanh(x, -1.0, 1.0)
    if name == "clamp":
        return x.clamp(-0.5, 2.0)
    if name == "leaky_relu":
        return nn.functional.leaky_relu(x, 0.1)
    return getattr(nn.functional, name)(x) if hasattr(nn.functional, name) else getattr(x, name)()


def conv_out(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


class Program(nn.Module):
    """A stack of steps, each a (description, function of the running value) pair; the
    modules the steps use are registered so that parameters and buffers are state."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[tuple[str, object]] = []
        self.extra_outputs: list[int] = []

    def add(self, description: str, function, *modules: nn.Module) -> None:
        for m in modules:
            self.add_module(f"m{len(self._modules)}", m)
        self.steps.append((description, function))

    def forward(self, x: torch.Tensor):
        kept = []
        for index, (_, function) in enumerate(self.steps):
            x = function(x)
            if index in self.extra_outputs:
                kept.append(x)
        return (x, *kept) if kept else x

    def describe(self) -> str:
        return "\n".join(f"{i}: {d}" for i, (d, _) in enumerate(self.steps))


class Generator:
    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.seed = seed

    def program(self) -> tuple[Program, torch.Tensor]:
        r = self.r
        large = r.random() < 0.4
        h = r.randint(16, 48) if large else r.randint(1, 8)
        w = h if r.random() < 0.7 else (r.randint(16, 48) if large else r.randint(1, 8))
        c = r.choice([1, 3, 4, 8, 12, 16])
        batch = r.choice([1, 1, 2])
        p = Program()
        shape = [c, h, w]
        for _ in range(r.randint(2, 9)):
            shape = self.step(p, shape)
            if r.random() < 0.1:
                p.extra_outputs.append(len(p.steps) - 1)
        if r.random() < 0.6:
            self.head(p, shape)
        realistic_weights_(p, seed=self.seed)
        x = torch.randn(batch, c, h, w, generator=torch.Generator().manual_seed(self.seed))
        return p.eval(), x

    def conv(self, c: int, h: int, w: int) -> tuple[nn.Conv2d, list[int]]:
        r = self.r
        for _ in range(20):
            kernel = r.choice([1, 1, 3, 3, 5, 7])
            stride = r.choice([1, 1, 2, 3])
            dilation = r.choice([1, 1, 1, 2])
            padding = r.randint(0, (kernel // 2) * dilation)
            kind = r.choice(["dense", "dense", "depthwise", "grouped"])
            groups = 1
            out = r.choice([1, 4, 8, 16, 24, 32])
            if kind == "depthwise":
                groups, out = c, c * r.choice([1, 1, 2])
            elif kind == "grouped":
                groups = r.choice([g for g in (2, 3, 4, 8) if c % g == 0] or [1])
                out = groups * r.choice([1, 2, 4])
            oh, ow = (conv_out(s, kernel, stride, padding, dilation) for s in (h, w))
            if oh >= 1 and ow >= 1:
                conv = nn.Conv2d(c, out, kernel, stride, padding, dilation, groups,
                                 bias=r.random() < 0.6)
                return conv, [out, oh, ow]
        return nn.Conv2d(c, c, 1), [c, h, w]

    def step(self, p: Program, shape: list[int]) -> list[int]:
        r = self.r
        c, h, w = shape
        kind = r.choices(
            ["conv", "conv_bn_act", "act", "pool", "adaptive", "mean_mul", "split", "residual",
             "broadcast", "view", "permute_linear", "transposed", "bn"],
            [6, 6, 2, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1])[0]
        if kind in ("conv", "conv_bn_act"):
            conv, out = self.conv(c, h, w)
            if kind == "conv":
                p.add(f"{conv}", conv, conv)
                return out
            bn, act = nn.BatchNorm2d(out[0]), r.choice(ACTIVATIONS)
            p.add(f"{conv} bn {act}", lambda x: activate(bn(conv(x)), act), conv, bn)
            return out
        if kind == "act":
            act = r.choice(ACTIVATIONS)
            p.add(act, lambda x: activate(x, act))
            return shape
        if kind == "bn":
            bn = nn.BatchNorm2d(c)
            p.add("bn", bn, bn)
            return shape
        if kind == "pool":
            k = r.randint(1, 3)
            stride = r.randint(1, 3)
            padding = r.randint(0, k // 2)
            ceil = r.random() < 0.3
            if r.random() < 0.5:
                dilation = r.choice([1, 1, 2])
                pool = nn.MaxPool2d(k, stride, padding, dilation, ceil_mode=ceil)
            else:
                pool = nn.AvgPool2d(k, stride, padding, ceil_mode=ceil,
                                    count_include_pad=r.random() < 0.5)
            try:
                size = list(pool(torch.empty(1, 1, h, w)).shape[2:])
            except RuntimeError:  # a window larger than the padded map
                return shape
            p.add(f"{pool}", pool, pool)
            return [c, *size]
        if kind == "adaptive":
            size = (r.randint(1, 8), r.randint(1, 8))  # larger than the map too (upsampling)
            pool = (nn.AdaptiveAvgPool2d if r.random() < 0.7 else nn.AdaptiveMaxPool2d)(size)
            p.add(f"{pool}", pool, pool)
            return [c, *size]
        if kind == "mean_mul":  # squeeze-excitation
            hidden = max(1, c // 2)
            down, up = nn.Conv2d(c, hidden, 1), nn.Conv2d(hidden, c, 1)
            p.add("se", lambda x: x * torch.sigmoid(up(torch.relu(down(x.mean((2, 3), keepdim=True))))),
                  down, up)
            return shape
        if kind == "split" and c >= 2:
            pieces = r.randint(2, min(4, c))
            cuts = sorted(r.sample(range(1, c), pieces - 1))
            sizes = [b - a for a, b in zip([0, *cuts], [*cuts, c])]
            chunk = r.random() < 0.3 and c % pieces == 0
            if chunk:
                sizes = [c // pieces] * pieces
            convs = nn.ModuleList()
            for s in sizes:
                k = r.choice([1, 3, 5, 7])
                convs.append(nn.Conv2d(s, s, k, 1, k // 2, groups=s if r.random() < 0.6 else 1))

            def mixed(x, sizes=sizes, chunk=chunk, convs=convs, pieces=pieces):
                parts = x.chunk(pieces, 1) if chunk else x.split(sizes, 1)
                return torch.cat([conv(part) for conv, part in zip(convs, parts)], 1)

            p.add(f"{'chunk' if chunk else 'split'} {sizes} mixed convs", mixed, convs)
            return shape
        if kind == "residual":
            conv = nn.Conv2d(c, c, 3, 1, 1, groups=r.choice([1, c]))
            act = r.choice(ACTIVATIONS)
            p.add(f"residual {act}", lambda x: activate(x + conv(x), act), conv)
            return shape
        if kind == "broadcast":
            form = r.choice(["channel", "row", "column", "scalar", "nchw"])
            extent = {"channel": (c, 1, 1), "row": (1, h, 1), "column": (1, 1, w), "scalar": (1,),
                      "nchw": (1, c, h, w)}[form]
            param = nn.Parameter(torch.randn(extent))
            holder = nn.ParameterList([param])
            op = r.choice(["add", "mul", "sub", "div", "maximum"])
            if op == "div":
                fn = lambda x: x / (param.abs() + 0.5)
            else:
                fn = lambda x: getattr(torch, op)(x, param)
            p.add(f"{op} {form} {list(extent)}", fn, holder)
            return shape
        if kind == "view":
            form = r.choice(["flatten_hw", "reshape_c", "transpose_hw", "contiguous_permute"])
            if form == "flatten_hw":
                p.add(form, lambda x: x.flatten(2).view(x.shape[0], c, h, w))
            elif form == "reshape_c":
                p.add(form, lambda x: x.reshape(x.shape[0], c, h * w).reshape(x.shape[0], c, h, w))
            elif form == "transpose_hw":
                p.add(form, lambda x: x.transpose(2, 3))
                return [c, w, h]
            else:
                p.add(form, lambda x: x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2))
            return shape
        if kind == "permute_linear":  # convnext's block: a linear layer over channels
            linear = nn.Linear(c, c)
            p.add("permute linear", lambda x: linear(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2),
                  linear)
            return shape
        if kind == "transposed":
            conv = nn.ConvTranspose2d(c, c, 2, 2)
            p.add("conv_transpose", conv, conv)
            return [c, 2 * h, 2 * w]
        return shape

    def head(self, p: Program, shape: list[int]) -> None:
        r = self.r
        c, h, w = shape
        features = c * h * w
        form = r.choice(["flatten", "view", "reshape", "mean"])
        if form == "mean":
            features = c
            p.add("mean flatten", lambda x: x.mean((2, 3)))
        elif form == "flatten":
            p.add("flatten", lambda x: torch.flatten(x, 1))
        elif form == "view":
            p.add("view", lambda x: x.view(x.shape[0], -1))
        else:
            p.add("reshape", lambda x: x.reshape(x.shape[0], -1))
        for _ in range(r.randint(1, 2)):
            out = r.choice([3, 10, 32])
            linear, act = nn.Linear(features, out), r.choice(ACTIVATIONS)
            p.add(f"linear {features}->{out} {act}",
                  lambda x, linear=linear, act=act: activate(linear(x), act), linear)
            features = out


def realistic_weights_(model: nn.Module, seed: int = 0) -> nn.Module:
    """Weights that keep activations of order one (default init shrinks them layer by layer)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear, nn.ConvTranspose2d)):
                fan_in = m.weight[0].numel()
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) / fan_in**0.5)
                if m.bias is not None:
                    m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
            elif isinstance(m, nn.modules.batchnorm._BatchNorm):
                n = m.num_features
                if m.affine:
                    m.weight.copy_(1 + 0.2 * torch.randn(n, generator=g))
                    m.bias.copy_(0.2 * torch.randn(n, generator=g))
                m.running_mean.copy_(0.2 * torch.randn(n, generator=g))
                m.running_var.copy_(0.5 + torch.rand(n, generator=g))
    return model


def finite_scale(t: torch.Tensor) -> float:
    finite = t[torch.isfinite(t)]
    return finite.abs().max().item() if finite.numel() else 0.0


def assert_close_to_scale(out, ref, tol: float = TOLERANCE) -> None:
    """max |out - ref| <= tol * max |ref| over eager's finite entries; NaN and infinities
    where eager has them, and nowhere else."""
    outs = out if isinstance(out, (tuple, list)) else [out]
    refs = ref if isinstance(ref, (tuple, list)) else [ref]
    assert len(outs) == len(refs)
    for o, e in zip(outs, refs):
        assert o.shape == e.shape, f"shape {tuple(o.shape)}, eager {tuple(e.shape)}"
        finite = torch.isfinite(e)
        assert torch.equal(finite, torch.isfinite(o)), "NaN or infinities where eager has none"
        assert torch.equal(o[~finite].nan_to_num(), e[~finite].nan_to_num()), "other infinities"
        scale = finite_scale(e)
        assert scale > 1e-6, f"reference output near zero (max {scale}): the check cannot see"
        err = (o[finite] - e[finite]).abs().max().item() if finite.any() else 0.0
        assert err <= tol * scale, f"max |out - ref| = {err:.3g}, {err / scale:.3g} of the scale"


def check(seed: int, calls: int = 1) -> str | None:
    """None if program `seed` replays lowered equal to eager; else what went wrong. `calls` > 1:
    the replay runs that many times, a second input between the example's calls."""
    model, x = Generator(seed).program()
    other = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed + 1))
    with torch.no_grad():
        try:
            ref = model(x)
            ref_other = model(other) if calls > 1 else None
        except RuntimeError:
            return None  # eager refuses it: nothing to compare
        refs = ref if isinstance(ref, tuple) else (ref,)
        if any(finite_scale(r) <= 1e-6 for r in refs):
            return None  # a program whose output vanishes says nothing
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fast = nimble.Nimble(model).prepare(x, streams=1)
                out = fast(x)
        except Exception as error:  # noqa: BLE001 - every raise is a failure here
            return f"raised {type(error).__name__}: {str(error).splitlines()[0]}"
        fallback = [str(w.message) for w in caught if "lowering failed" in str(w.message)]
        if fallback:
            return f"fell back: {fallback[0]}"
        try:
            assert_close_to_scale(out, ref)
        except AssertionError as error:
            return f"differs: {error}"
        for call in range(1, calls):
            given, want = (other, ref_other) if call % 2 else (x, ref)
            if any(finite_scale(w) <= 1e-6 for w in (want if isinstance(want, tuple) else (want,))):
                continue
            try:
                out = fast(given)
            except Exception as error:  # noqa: BLE001
                return f"call {call} raised {type(error).__name__}: {str(error).splitlines()[0]}"
            try:
                assert_close_to_scale(out, want)
            except AssertionError as error:
                return f"call {call} differs: {error}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--programs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--program", type=int, default=None)
    parser.add_argument("--show", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    pieces = nimble._C._kernel_helper_pieces()
    seeds = [args.program] if args.program is not None else range(args.seed, args.seed + args.programs)
    failures, start = 0, time.perf_counter()
    for seed in seeds:
        if args.show:
            model, x = Generator(seed).program()
            print(f"input {list(x.shape)}\n{model.describe()}")
        problem = check(seed, args.calls)
        if problem:
            failures += 1
            print(f"program {seed}: {problem}", flush=True)
    print(f"{len(seeds)} programs (seeds {seeds[0]}-{seeds[-1]}), {failures} failed, "
          f"{time.perf_counter() - start:.0f} s; torch threads {torch.get_num_threads()}, "
          f"{args.calls} calls each, helper pieces {nimble._C._kernel_helper_pieces() - pieces}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
