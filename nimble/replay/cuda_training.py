"""Training replays on a CUDA device: what prepare checks before capturing.

Forward and backward (the paper's mode) and the whole step run as CUDA graphs the same way
the CPU replays them; the graph executor itself makes that safe (csrc/runtime/):
- its warm-up runs under a snapshot of every parameter, buffer, optimizer state, input
  and generator (`StateSnapshot`), so prepare applies no optimizer step and moves no
  running statistic;
- scalars a graph bakes in (SGD's learning rate, betas, eps) are refreshed by building the
  graph again when they change (`Replay::set_scalars`): a scheduler between steps is
  honoured. Adam and AdamW are recorded in torch's capturable form (optimizer_scalars.py):
  step counts and bias corrections on the device, the learning rate in a device tensor, so
  that one capture serves every step;
- ops on CPU tensors inside a CUDA step run on the host before each launch (a capture
  would run them once, at capture time);
- random ops draw from generators registered with the graph, as `torch.cuda.graph` does,
  and prepare puts back every device's generator (model_snapshot.py).

What is refused here, with the reason: devices other than the CPU and one CUDA device,
and `torch.autocast` around prepare (its casts would be baked into the trace and replayed
whether or not the caller's later steps run under autocast).
"""

from __future__ import annotations

import torch

from ..errors import UnsupportedOpError
from .structure import ExampleCall


def check_training_devices(module: torch.nn.Module, example: ExampleCall) -> None:
    """Refuses, before anything runs, a training prepare nimble cannot replay."""
    devices = {t.device for t in example.static_inputs + list(module.parameters())}
    kinds = {d.type for d in devices}
    if kinds - {"cpu", "cuda"}:
        raise UnsupportedOpError(
            f"training replays run on the CPU backend and as CUDA graphs; got tensors on "
            f"{sorted(kinds)}"
        )
    gpus = sorted(str(d) for d in devices if d.type == "cuda")
    if len(set(gpus)) > 1:
        raise UnsupportedOpError(
            f"a training replay runs on one CUDA device; got tensors on {gpus}"
        )
    autocast = [k for k in ("cpu", "cuda") if torch.is_autocast_enabled(k)]
    if autocast:
        raise UnsupportedOpError(
            f"prepare(training=True) under torch.autocast ({autocast[0]}) is not replayed: "
            "the casts would be baked into the trace. Prepare and train in one precision "
            "(a float16 or bfloat16 model, or float32); torch.amp.GradScaler works with the "
            "paper's mode (scale the loss, call backward, step through the scaler)"
        )
