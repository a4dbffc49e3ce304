"""Every epilogue the CPU lowering fuses after a convolution or a linear layer, as the
model would write it: name -> activation applied to the product's result (in place where
the name says so)."""

import torch
import torch.nn.functional as F

ACTIVATIONS = {
    "none": lambda y: y,
    "relu": F.relu,
    "relu_": lambda y: y.relu_(),
    "relu6": lambda y: F.relu6(y, inplace=True),
    "hardtanh": lambda y: F.hardtanh(y, -0.5, 0.25),
    "silu": F.silu,
    "hardswish": F.hardswish,
    "gelu": F.gelu,
    "gelu_tanh": lambda y: F.gelu(y, approximate="tanh"),
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "leaky_relu": lambda y: F.leaky_relu(y, 0.05),
    "hardsigmoid": F.hardsigmoid,
}

# The residual adds: how the model adds `skip` to the product's result `y`.
RESIDUALS = ["none", "add", "add_", "skip_first"]


def add_residual(y, skip, residual: str):
    if residual == "add":
        return y + skip
    if residual == "add_":
        y += skip
        return y
    if residual == "skip_first":
        return skip + y
    return y
