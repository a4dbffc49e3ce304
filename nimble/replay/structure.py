"""The structure of a call and of its result: a pytree spec with the tensors taken out.

A replay reads and returns flat lists of tensors; everything else about a call (the
nesting, keyword names, non-tensor arguments) is fixed at prepare. These types remember
that structure, check later calls against it and put results back into it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten


def describe(value: Any) -> str:
    """A value as error messages show it: a tensor by shape, dtype and device."""
    if isinstance(value, torch.Tensor):
        shape = "x".join(str(s) for s in value.shape) or "scalar"
        return f"Tensor[{shape}, {str(value.dtype).replace('torch.', '')}, {value.device}]"
    return repr(value)


def describe_all(values: list) -> str:
    return "(" + ", ".join(describe(v) for v in values) + ")"


def _tensor_positions(leaves: list) -> list[int]:
    return [i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor)]


def _without_tensors(leaves: list) -> list:
    return [None if isinstance(v, torch.Tensor) else v for v in leaves]


class CallStructure:
    """The arguments of prepare's example call minus its tensors: what every later call
    must match (it keeps no tensor of the example alive)."""

    def __init__(self, spec: Any, leaves: list, positional_tensors_only: bool) -> None:
        self.spec = spec
        self.leaves = _without_tensors(leaves)
        self.tensor_positions = _tensor_positions(leaves)
        self._is_tensor = set(self.tensor_positions)
        # The common call, positional tensors only, skips the pytrees (see `Nimble.forward`).
        self.positional_tensors_only = positional_tensors_only

    def tensors(self, args: tuple, kwargs: dict) -> list[torch.Tensor]:
        """The tensors of a call structured as the example, in the example's order."""
        leaves, spec = tree_flatten((args, kwargs))
        if spec != self.spec:
            expected = tree_unflatten(
                ["Tensor" if i in self._is_tensor else v for i, v in enumerate(self.leaves)],
                self.spec,
            )
            raise ValueError(
                f"expected the arguments structured as at prepare, {expected}, "
                f"got {describe_all(leaves)}"
            )
        for i, (got, expected) in enumerate(zip(leaves, self.leaves)):
            if i in self._is_tensor:
                if not isinstance(got, torch.Tensor):
                    raise ValueError(f"argument leaf {i}: expected a tensor, got {describe(got)}")
            elif got != expected:
                raise ValueError(
                    f"argument leaf {i}: expected {expected!r} (as at prepare), got {got!r}; "
                    f"non-tensor arguments are part of the captured trace"
                )
        return [leaves[i] for i in self.tensor_positions]


@dataclass
class ExampleCall:
    """The example call of prepare as the capture runs it: on static copies of its tensors
    (the replay reads its inputs from buffers of its own)."""

    structure: CallStructure
    static_args: tuple
    static_kwargs: dict
    static_inputs: list[torch.Tensor]

    @classmethod
    def of(
        cls, example_inputs: Any, example_kwargs: dict | None, track_gradients: bool
    ) -> "ExampleCall":
        """`track_gradients`: a static copy requires grad where the example's tensor does
        (its gradient is then part of the captured backward)."""
        args = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
        kwargs = dict(example_kwargs or {})
        leaves, spec = tree_flatten((tuple(args), kwargs))
        positions = _tensor_positions(leaves)
        static = list(leaves)
        for i in positions:
            static[i] = leaves[i].detach().clone()
            if track_gradients and leaves[i].requires_grad:
                static[i].requires_grad_()
        positional_only = not kwargs and len(positions) == len(leaves) == len(args)
        static_args, static_kwargs = tree_unflatten(static, spec)
        return cls(
            CallStructure(spec, leaves, positional_only),
            static_args,
            static_kwargs,
            [static[i] for i in positions],
        )


class OutputStructure:
    """The structure of the module's output at prepare; `rebuild` puts a replay's output
    tensors back into it (it keeps no tensor of the example output alive)."""

    def __init__(self, leaves: list, spec: Any, single_tensor: bool) -> None:
        self.spec = spec
        self.leaves = _without_tensors(leaves)
        self.tensor_positions = _tensor_positions(leaves)
        self.single_tensor = single_tensor

    @classmethod
    def split(cls, output: Any) -> tuple["OutputStructure", list[torch.Tensor]]:
        """The structure of `output`, and its tensors in the order `rebuild` takes them."""
        leaves, spec = tree_flatten(output)
        structure = cls(leaves, spec, isinstance(output, torch.Tensor))
        return structure, [leaves[i] for i in structure.tensor_positions]

    def rebuild(self, tensors) -> Any:
        leaves = list(self.leaves)
        for position, tensor in zip(self.tensor_positions, tensors):
            leaves[position] = tensor
        return tree_unflatten(leaves, self.spec)
