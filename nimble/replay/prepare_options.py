"""`PrepareOptions`: `Nimble.prepare`'s keywords, spelled once. prepare takes them as
keywords (its signature is made from these fields), checks them here, keeps them to prepare
again after a change, and makes C++'s half, `_C.BuildOptions` (`build_options()`), which the
hand-over gives the program builder (`ProgramBuilder.finish`, nimble/replay/build_replay.py)."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import inspect
from typing import Any

import torch

_ON_CHANGE = ("reprepare", "error")
_SIDE_EFFECTS = ("warn", "error")


@dataclasses.dataclass(frozen=True)
class PrepareOptions:
    """What each keyword does is in `Nimble.prepare`'s docstring. The three with a leading
    underscore are internal: `_watch_model` (off in the torch.compile backend, where dynamo
    guards the module), `_graph_twin` (tests: a CPU model replayed with a CUDA graph's
    semantics) and `_lowered_with` ((database, any_device) whose kernels the lowering runs,
    set by `use_tuned` and kept by a prepare after a change)."""

    copy_outputs: bool = True
    streams: int | str = 1
    fold_batchnorm: bool = False
    lower_for_cpu: bool = True
    plan_memory: bool = True
    use_out_variants: bool = True
    out_variant_max_bytes: int = 0
    precompute_views: bool = True
    drop_noop_ops: bool = True
    training: bool = False
    loss_fn: Any = None
    optimizer: torch.optim.Optimizer | None = None
    tuned: str | None = None
    on_change: str = "reprepare"
    side_effects: str = "warn"
    _watch_model: bool = True
    _graph_twin: bool = False
    _lowered_with: tuple | None = None

    @classmethod
    def of(cls, keywords: dict) -> "PrepareOptions":
        """From prepare's keywords; an unknown one is a TypeError naming the closest."""
        known = [f.name for f in dataclasses.fields(cls)]
        for name in keywords:
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise TypeError(f"prepare() got an unexpected keyword argument {name!r}{hint}")
        return cls(**keywords)

    def __post_init__(self) -> None:
        streams = self.streams
        if not (streams == "auto" or (isinstance(streams, int) and not isinstance(streams, bool)
                                      and streams >= 1)):
            raise ValueError(f"streams must be 'auto' or a positive int, got {streams!r}")
        if self.on_change not in _ON_CHANGE:
            raise ValueError(f"on_change must be one of {_ON_CHANGE}, got {self.on_change!r}")
        if self.side_effects not in _SIDE_EFFECTS:
            raise ValueError(
                f"side_effects must be one of {_SIDE_EFFECTS}, got {self.side_effects!r}")
        if self.training and self.fold_batchnorm:
            raise ValueError(
                "fold_batchnorm is an inference pass; it cannot be used with training=True"
            )

    def check_whole_step(self, example_targets: Any) -> None:
        """The whole step needs loss_fn, optimizer and example targets together."""
        parts = [self.loss_fn is not None, self.optimizer is not None, example_targets is not None]
        if any(parts) and not (self.training and all(parts)):
            raise ValueError(
                "the whole-step mode needs training=True with loss_fn, optimizer and "
                "example_targets together"
            )

    @property
    def lowers(self) -> bool:
        """Whether the CPU lowering runs: an inference pass."""
        return self.lower_for_cpu and not self.training

    @property
    def lowered_with(self) -> tuple | None:
        """(database, any_device) whose kernels the lowering runs, or None."""
        if not self.lowers:
            return None
        return (self.tuned, False) if self.tuned is not None else self._lowered_with

    def build_options(self):
        """C++'s half of these options (`_C.BuildOptions`, csrc/program/build_options.h), which
        the stages after the capture read (csrc/pipeline/replay_pipeline.h)."""
        from .. import _C

        return with_changes(
            _C.BuildOptions(),
            use_out_variants=self.use_out_variants,
            out_variant_max_bytes=self.out_variant_max_bytes,
            precompute_views=self.precompute_views,
            plan_memory=self.plan_memory,
            fold_batchnorm=self.fold_batchnorm,
            lower_for_cpu=self.lowers,
            # An inference pass: training programs keep every copy they captured.
            drop_noop_ops=self.drop_noop_ops and not self.training,
            # The same for every device: the backend decides what a stream count means.
            streams=1 if self.streams == "auto" else self.streams,
            graph_twin=self._graph_twin,
        )

    def replace(self, **changes) -> "PrepareOptions":
        return dataclasses.replace(self, **changes)


def with_changes(options, **changes):
    """A copy of a `_C.BuildOptions` with `changes` (field names) set; an unknown name is an
    AttributeError."""
    changed = copy.copy(options)
    for name, value in changes.items():
        if not hasattr(changed, name):
            raise AttributeError(f"BuildOptions has no field {name!r}")
        setattr(changed, name, value)
    return changed


def keyword_signature(prepare) -> inspect.Signature:
    """prepare's signature with PrepareOptions' fields as its keywords (help(), editors)."""
    head = [p for p in inspect.signature(prepare).parameters.values()
            if p.kind is not inspect.Parameter.VAR_KEYWORD]
    keywords = [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                          annotation=f.type)
        for f in dataclasses.fields(PrepareOptions)
    ]
    return inspect.Signature(head + keywords, return_annotation="Nimble")
