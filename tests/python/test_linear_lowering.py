"""Linear layers in the CPU lowering (csrc/passes/linear_lowering.h): `addmm`/`mm` with a
constant weight become `nimble::linear_prepacked` calls, nimble's product or oneDNN on a
weight packed once (kernels/cpu/torch_ops/prepacked_linear.h), with the residual add and the
activation after them fused; results stay eager's (relative 1e-4), weights changed after
prepare are seen, and linear layers the pass cannot lower keep ATen's op.

CI runs a fixed sample of the random layers; NIMBLE_FULL_LOWERING=1 runs all of them."""

import os
import random

import pytest
import torch
import torch.nn.functional as F

import nimble
from nimble.testing import assert_matches_eager
import nimble._C  # noqa: F401  (registers torch.classes.nimble)
from fused_epilogues import ACTIVATIONS, RESIDUALS, add_residual
from nimble.zoo import build

FULL = os.environ.get("NIMBLE_FULL_LOWERING") == "1"
LOWERED = "nimble::linear_prepacked"


def lowered(fast) -> list[str]:
    return [name for name in fast.schedule["ops"] if name.startswith(LOWERED)]


def close(got, want):
    assert_matches_eager(got, want)


class LinearLayer(torch.nn.Module):
    """One linear layer (nn.Linear, or `x @ W` on a weight of [in, out]), optionally a
    residual add, then an activation."""

    def __init__(self, features_in, features_out, bias, matmul, residual, activation):
        super().__init__()
        self.linear = torch.nn.Linear(features_in, features_out, bias=bias)
        self.matmul, self.residual, self.activation = matmul, residual, activation
        if matmul:
            self.weight = torch.nn.Parameter(torch.randn(features_in, features_out) / 20)

    def forward(self, x, skip):
        y = x @ self.weight if self.matmul else self.linear(x)
        return ACTIVATIONS[self.activation](add_residual(y, skip, self.residual))


def random_case(rng: random.Random):
    # Weights of at least 128 Ki elements, several panels and row blocks of nimble's product.
    features_in = rng.choice([384, 512, 640])
    features_out = rng.choice([384, 512, 1000])
    leading = rng.choice([(1,), (3,), (16,), (2, 5), (1, 17), ()])
    return features_in, features_out, leading


CASES = 120 if FULL else 26


@pytest.mark.parametrize("case", range(CASES))
def test_random_linear_layers_with_every_epilogue_match_eager(case):
    rng = random.Random(2000 + case)
    torch.manual_seed(case)
    features_in, features_out, leading = random_case(rng)
    activation = list(ACTIVATIONS)[case % len(ACTIVATIONS)]
    residual = rng.choice(RESIDUALS)
    matmul, bias = rng.random() < 0.25, rng.random() < 0.6
    model = LinearLayer(features_in, features_out, bias, matmul, residual, activation).eval()
    x = torch.randn(*leading, features_in)
    skip = torch.randn(*leading, features_out)
    fast = nimble.Nimble(model).prepare((x, skip))
    # The add and the activation are fused: one lowered op, and at most the views that
    # flatten the input remain. Not fused: in-place ops on the view of the product that
    # the program returns (the pass cannot tell that view from the product it views, both
    # on an output's storage), and what follows the `squeeze_` of a 1-d `mm`.
    in_place = residual == "add_" or activation in ("relu_", "relu6")
    fused = len(leading) == 1 or not (in_place or (leading == () and (matmul or not bias)))
    assert len(lowered(fast)) == 1, fast.schedule["ops"]
    assert not fused or all(name.startswith(LOWERED) or "view" in name or "unsqueeze" in name
                            for name in fast.schedule["ops"]), fast.schedule["ops"]
    for _ in range(2):
        x2, skip2 = torch.randn_like(x), torch.randn_like(skip)
        with torch.no_grad():
            expected = model(x2, skip2)
        got = fast(x2, skip2)
        assert got.shape == expected.shape
        close(got, expected)


@pytest.mark.parametrize("kernel", ["nimble_gemm", "onednn_prepacked"])
@pytest.mark.parametrize("bias", [True, False])
def test_both_kernels_with_every_activation_match_eager(kernel, bias):
    torch.manual_seed(0)
    weight, b = torch.randn(96, 80), torch.randn(96) if bias else None
    x = torch.randn(7, 80)
    activations = {"none": ACTIVATIONS["none"], "relu": F.relu, "gelu": F.gelu, "swish": F.silu,
                   "hardswish": F.hardswish, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
                   "hardsigmoid": F.hardsigmoid}
    for name, activation in activations.items():
        for transposed in (True, False):
            source = weight if transposed else weight.t().contiguous()
            packed = torch.classes.nimble.PrepackedLinear.make(source, transposed, b, name, 7, kernel)
            assert packed.describe().startswith(kernel)
            close(torch.ops.nimble.linear_prepacked(x, None, packed), activation(F.linear(x, weight, b)))
    with pytest.raises(RuntimeError, match="expected the kernel 'nimble_gemm' or 'onednn_prepacked'"):
        torch.classes.nimble.PrepackedLinear.make(weight, True, b, "none", 7, "blas")


def test_an_intermediate_read_elsewhere_is_not_fused():
    class Both(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(512, 384)

        def forward(self, x):
            y = self.linear(x)
            return F.gelu(y), y

    model, x = Both().eval(), torch.randn(2, 9, 512)
    fast = nimble.Nimble(model).prepare(x)
    assert len(lowered(fast)) == 1 and "aten::gelu" in fast.schedule["ops"]
    with torch.no_grad():
        for got, want in zip(fast(x), model(x)):
            close(got, want)


def test_what_the_pass_cannot_lower_keeps_the_aten_op():
    class Unlowerable(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.standardized = torch.nn.Linear(512, 512)
            self.batched = torch.nn.Parameter(torch.randn(2, 512, 256))
            self.scaled = torch.nn.Linear(512, 256)

        def forward(self, x, other):
            w = self.standardized.weight
            y = F.linear(x, (w - w.mean()) / (w.std() + 1e-5))  # a weight the trace computes
            b = torch.bmm(y.unsqueeze(0).expand(2, -1, -1), self.batched)  # a 3-d weight
            s = torch.addmm(self.scaled.bias, y, self.scaled.weight.t(), beta=0.5)  # beta 0.5
            return y, b, s, x @ other, F.linear(x.double(), w.double())  # an input; double

    model = Unlowerable().eval()
    x, other = torch.randn(4, 512), torch.randn(512, 512)
    fast = nimble.Nimble(model).prepare((x, other))
    assert lowered(fast) == [], fast.schedule["ops"]
    assert fast.memory["prepacked_weight_bytes"] == 0
    with torch.no_grad():
        for got, want in zip(fast(x, other), model(x, other)):
            assert_matches_eager(got, want, tolerance=1e-5)


def _mlp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(384, 512), torch.nn.GELU(),
                                torch.nn.Linear(512, 384, bias=False), torch.nn.ReLU(),
                                torch.nn.Linear(384, 1000)).eval()
    return model, torch.randn(1, 6, 384)


def _check(fast, model, x):
    with torch.no_grad():
        close(fast(x), model(x))


def test_weights_changed_after_prepare_are_seen():
    model, x = _mlp()
    fast = nimble.Nimble(model).prepare(x)
    assert len(lowered(fast)) == 3
    _check(fast, model, x)
    with torch.no_grad():
        model[0].weight.mul_(-2)  # like an optimizer step
        model[0].bias.add_(1)
        model[4].bias.uniform_()
    _check(fast, model, x)
    other, _ = _mlp()
    with torch.no_grad():
        for p in other.parameters():
            p.uniform_(-0.1, 0.1)
    model.load_state_dict(other.state_dict())
    _check(fast, model, x)
    # `.data =` keeps the parameter object and swaps its storage.
    model[2].weight.data = torch.randn_like(model[2].weight)
    _check(fast, model, x)


def test_prepacked_weight_bytes_count_linear_layers():
    model, x = _mlp()
    fast = nimble.Nimble(model).prepare(x)
    linear_bytes = sum(m.weight.nbytes for m in model if isinstance(m, torch.nn.Linear))
    # oneDNN may pad its blocked layout; the product's transposed copy is the weight's size.
    assert linear_bytes <= fast.memory["prepacked_weight_bytes"] <= 1.25 * linear_bytes
    plain = nimble.Nimble(model).prepare(x, lower_for_cpu=False)
    assert plain.memory["prepacked_weight_bytes"] == 0 and lowered(plain) == []


@pytest.mark.parametrize("spec", ["transformer:encoder", "torchvision:vit_b_16"])
def test_transformers_match_eager(spec):
    model, example = build(spec, batch=2, image_size=32)
    fast = nimble.Nimble(model).prepare(example)
    if spec == "torchvision:vit_b_16":  # 5 tokens of 768: every product is lowered
        assert len(lowered(fast)) == 12 * 4 + 1
    assert any("_scaled_dot_product" in name for name in fast.schedule["ops"])
    x = torch.randn_like(example)
    with torch.no_grad():
        assert (fast(x) - model(x)).abs().max().item() <= 1e-3


def test_a_nan_weight_keeps_eagers_nan_through_the_fused_activation():
    # oneDNN's relu post-op turns NaN into 0; eager's relu keeps it.
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU()).eval()
    x = torch.randn(8, 512)
    fast = nimble.Nimble(model).prepare(x)
    assert lowered(fast) == [LOWERED]
    with torch.no_grad():
        model[0].weight[0, 0] = float("nan")
        assert_matches_eager(fast(x), model(x), tolerance=1e-5, equal_nan=True)


# Where the non-finite value sits: the first and the last of the weight's 262144 floats (the
# check reads them in parallel chunks), in the bias; a NaN with its sign bit set too.
NON_FINITE_PLACES = {
    "first weight": ("weight", (0, 0), float("nan")),
    "last weight, negative nan": ("weight", (511, 511), -float("nan")),
    "bias": ("bias", (7,), float("nan")),
}


@pytest.mark.parametrize("where", list(NON_FINITE_PLACES))
def test_onednns_kernel_with_a_non_finite_weight_runs_the_activation_as_eager(where):
    weight, bias = torch.randn(512, 512), torch.randn(512)
    name, index, value = NON_FINITE_PLACES[where]
    {"weight": weight, "bias": bias}[name][index] = value
    x = torch.randn(8, 512)
    packed = torch.classes.nimble.PrepackedLinear.make(weight, True, bias, "relu", 8, "onednn_prepacked")
    want = F.relu(F.linear(x, weight, bias))
    assert want.isnan().any()
    torch.testing.assert_close(torch.ops.nimble.linear_prepacked(x, None, packed), want, rtol=1e-4,
                               atol=1e-4, equal_nan=True)
