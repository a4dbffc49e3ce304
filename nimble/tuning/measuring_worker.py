"""What runs on a Ray worker (nimble/tuning/distributed.py): a model's description, the
measurers a worker rebuilds from it, and the actor that measures batches on its own cores."""

from __future__ import annotations

import os
import time


def simulated_model(seed: int, tasks: int, peak_gflops: float = 1000.0,
                    sleep_scale: float = 0.0) -> dict:
    """A simulated model's description. With `sleep_scale`, a worker sleeps that fraction of
    each batch's simulated measurement time, as if it were measuring (for throughput tests)."""
    return {"kind": "simulated", "seed": seed, "tasks": tasks, "peak_gflops": peak_gflops,
            "sleep_scale": sleep_scale}


def zoo_model(name: str, batch: int = 1, image_size: int = 64, streams: int = 1,
              min_repeat_seconds: float = 2e-3, timeout_seconds: float = 2.0, seed: int = 0,
              threads: int | None = None, device: str = "cpu") -> dict:
    """A zoo model's description: a worker builds and prepares the same model on `device`
    ("cuda": the GPU its actor was given, see WorkerGroup's gpus_per_worker) and measures its
    tunable ops' candidates (nimble._C.kernels) with torch on `threads` threads (default this
    process's count: the kernel spaces and the records' device key depend on it)."""
    import torch

    return {"kind": "zoo", "name": name, "batch": batch, "image_size": image_size,
            "streams": streams, "min_repeat_seconds": min_repeat_seconds,
            "timeout_seconds": timeout_seconds, "seed": seed,
            "threads": threads or torch.get_num_threads(), "device": device}


def _build_measurer(description: dict):
    """What a worker measures with: an object with measure(signature, configs, repeats)."""
    if description["kind"] == "simulated":
        from .._C import tuning

        return tuning.SimulatedModelMeasurer(description["seed"], description["tasks"],
                                             description["peak_gflops"])
    if description["kind"] == "zoo":
        import torch

        from .. import zoo
        from .._C import kernels
        from ..replay.wrapper import Nimble

        torch.set_num_threads(description["threads"])
        model, example = zoo.build(description["name"], batch=description["batch"],
                                   image_size=description["image_size"])
        device = description.get("device", "cpu")
        model, example = model.to(device), example.to(device)
        # ATen's convolutions, as the driver's prepare for tuning (tuning/tune.py).
        fast = Nimble(model).prepare(example, streams=description["streams"], lower_for_cpu=False)
        return _ZooMeasurer(fast, kernels.ReplayMeasurer(
            fast.replay, description["min_repeat_seconds"], description["timeout_seconds"],
            description["seed"]))
    raise ValueError(f"unknown model description kind {description['kind']!r}")


class _ZooMeasurer:
    """A prepared model's measurers, with the model kept alive as long as they are."""

    def __init__(self, fast, measurer) -> None:
        self._fast = fast
        self._measurer = measurer

    def measure(self, signature: str, configs: list, repeats: dict) -> list:
        return self._measurer.measure(signature, configs, repeats)


class Worker:
    """A Ray actor: measures batches on its own cores."""

    def __init__(self, cores: list[int] | None) -> None:
        if cores:
            os.sched_setaffinity(0, cores)
        self._measurers: dict[str, object] = {}

    def pid(self) -> int:
        return os.getpid()

    def measure(self, description: dict, signature: str, configs: list, repeats: dict) -> list:
        key = repr(sorted(description.items()))  # one measurer per model, built once
        if key not in self._measurers:
            self._measurers[key] = _build_measurer(description)
        results = self._measurers[key].measure(signature, configs, repeats)
        if description.get("sleep_scale"):
            time.sleep(description["sleep_scale"] * sum(r[3] for r in results))
        return results
