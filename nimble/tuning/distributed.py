"""Measuring on Ray workers: the C++ tuner proposes, schedules and records; this module only
carries its batches to Ray actors and their results back.

One actor per device (here: per set of CPU cores, pinned with os.sched_setaffinity so that two
measurements never share a core). Each actor rebuilds a model's measurers from a description
(`simulated_model(...)`, `zoo_model(...)`) and measures a batch by task signature. The
`WorkerGroup` keeps a queue of batches, hands them to idle actors, and takes results back in
completion order for the tuner (through a `ModelPool`, the pool the C++ tuner sees).

A (task signature, config) is measured once per group: records are keyed by signature and
device, so when several models share an op shape (Trimmer's survey, nimble/tuning/survey.py), a
model whose tuner proposes a config another model has had measured, or has in flight, gets
that result at no cost (its tuner records it with cost 0) instead of measuring it again.

Faults: an actor that dies mid-batch has the batch retried once on another actor, then
recorded as failed; an actor that runs past `batch_timeout` is killed and replaced (its cores
are fine) and its batch handled the same way. Lost actors are announced on stderr; the run goes
on with the ones left and ends (stop reason "no-workers") only when none is left.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from dataclasses import dataclass, field

from .measuring_worker import Worker, simulated_model, zoo_model

RAY_EXTRA = "pip install nimble[ray]"
LOST_TWICE = "the worker measuring this batch was lost twice"


def require_ray():
    """The ray module, or an ImportError that names the extra to install."""
    try:
        import ray
    except ImportError as e:
        raise ImportError(f"measuring on workers needs Ray: {RAY_EXTRA}") from e
    return ray


@dataclass
class _Batch:
    """A tuner's batch: its configs' results come from its own request (`own`) or from other
    models' measurements of the same (signature, config) on this group."""
    model: str
    ticket: int
    keys: list[tuple]
    own: set[tuple]
    wall: float = 0.0


@dataclass
class _Request:
    """What the workers measure for a batch: its configs that nobody has measured yet."""
    batch: _Batch
    signature: str
    configs: list
    repeats: dict
    attempts: int = 0
    started: float = 0.0
    spent: float = 0.0  # wall seconds of failed attempts


@dataclass
class _Actor:
    index: int
    handle: object
    pid: int
    request: _Request | None = None
    ref: object = None


@dataclass
class _Model:
    description: dict
    signatures: list[str]
    done: queue.Queue = field(default_factory=queue.Queue)
    active: bool = True
    paused: bool = False


class WorkerGroup:
    """Ray actors measuring the batches of one or more models; a context manager.

    Without `ray_address`, starts a local Ray instance (loopback, no dashboard) and stops it on
    close; with one, joins that cluster and leaves it running. `cores_per_worker`: the CPU share
    of each actor; by default this machine's cores split evenly, a fraction of a core each when
    there are more workers than cores (then measurements share cores, as on a 2-core test
    machine, and their timings disturb each other). `gpus_per_worker`: each actor's share of
    the GPUs (1: one measuring actor per GPU, for models described with device="cuda").
    """

    def __init__(self, workers: int, ray_address: str | None = None,
                 batch_timeout: float = 600.0, cores_per_worker: float | None = None,
                 gpus_per_worker: float = 0.0) -> None:
        ray = require_ray()
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self._ray = ray
        self._started_ray = False
        if not ray.is_initialized():
            if ray_address:
                ray.init(address=ray_address, include_dashboard=False, log_to_driver=False)
            else:
                ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False,
                         log_to_driver=False, _node_ip_address="127.0.0.1")
                self._started_ray = True
        cpus = os.cpu_count() or 1
        self._cores_per_worker = cores_per_worker or (max(1, cpus // workers) if workers <= cpus
                                                      else cpus / workers)
        self._pinned = ray_address is None
        # Ray gives each actor its share of the GPUs (CUDA_VISIBLE_DEVICES): with 1, one
        # measuring actor per GPU, measuring CUDA models' kernels there.
        self._gpus_per_worker = gpus_per_worker
        self._remote = ray.remote(Worker)
        self.batch_timeout = batch_timeout
        self.lost = 0
        self._models: dict[str, _Model] = {}
        self._queue: list[_Request] = []
        self._measured: dict[tuple, tuple] = {}  # (signature, config) -> its result
        self._measuring: set[tuple] = set()
        self._batches: list[_Batch] = []  # waiting for some of their results
        self._lock = threading.Lock()
        self._closing = False
        self._actors = [self._spawn(i) for i in range(workers)]
        self._thread = threading.Thread(target=self._loop, name="nimble-workers", daemon=True)
        self._thread.start()

    # --- what the tuner and the survey coordinator see ----------------------------------------

    def pool(self, key: str, description: dict, signatures: list[str]) -> "ModelPool":
        with self._lock:
            self._models[key] = _Model(description, list(signatures))
        return ModelPool(self, key)

    def alive(self) -> int:
        return len(self._actors)

    def pids(self) -> list[int]:
        with self._lock:
            return [a.pid for a in self._actors]

    def pause(self, key: str, paused: bool) -> None:
        """A paused model submits nothing for now; its share goes to the others meanwhile."""
        with self._lock:
            self._models[key].paused = paused

    def suspend(self, key: str) -> None:
        """No more batches of this model: its tuner takes back what is in flight and stops."""
        with self._lock:
            self._models[key].active = False

    def capacity(self, key: str) -> int:
        """A model's share of the live actors: all of them for one model, an even split (at
        least one each) among the active ones otherwise; 0 once suspended or none is left."""
        with self._lock:
            if not self._models[key].active or not self._actors:
                return 0
            active = [k for k, m in self._models.items()
                      if m.active and (not m.paused or k == key)]
            alive = len(self._actors)
            i = active.index(key)
            return max(1, alive // len(active) + (1 if i < alive % len(active) else 0))

    def close(self) -> None:
        self._closing = True
        self._thread.join()
        for a in self._actors:
            self._ray.kill(a.handle)
        if self._started_ray:
            self._ray.shutdown()

    def __enter__(self) -> "WorkerGroup":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- the dispatcher thread -----------------------------------------------------------------

    def _spawn(self, index: int) -> _Actor:
        cores = None
        if self._pinned:
            available = sorted(os.sched_getaffinity(0))
            per = max(1, int(self._cores_per_worker))
            start = (index * per) % len(available)
            cores = available[start:start + per]
        handle = self._remote.options(num_cpus=self._cores_per_worker,
                                      num_gpus=self._gpus_per_worker).remote(cores)
        try:
            pid = self._ray.get(handle.pid.remote(), timeout=180)
        except self._ray.exceptions.GetTimeoutError:
            self._ray.kill(handle)
            raise RuntimeError(
                f"a worker needing {self._cores_per_worker:g} CPUs did not start within 180 s: "
                f"the Ray cluster has {self._ray.available_resources().get('CPU', 0):g} CPUs "
                f"free (give cores_per_worker a fraction to share cores)") from None
        return _Actor(index, handle, pid)

    def submit(self, model: str, ticket: int, signature: str, configs: list,
               repeats: dict) -> None:
        with self._lock:
            keys = [(signature, tuple(c)) for c in configs]
            fresh = [i for i, k in enumerate(keys)
                     if k not in self._measured and k not in self._measuring]
            batch = _Batch(model, ticket, keys, {keys[i] for i in fresh})
            self._measuring |= batch.own
            self._batches.append(batch)
            if fresh:
                self._queue.append(_Request(batch, signature, [configs[i] for i in fresh],
                                            repeats))
            else:
                self._settle()

    def _dispatch(self) -> None:
        for actor in self._actors:
            if actor.request is None and self._queue:
                r = self._queue.pop(0)
                m = self._models[r.batch.model]
                r.started = time.monotonic()
                actor.request = r
                actor.ref = actor.handle.measure.remote(m.description, r.signature, r.configs,
                                                        r.repeats)

    def _loop(self) -> None:
        ray = self._ray
        while not self._closing:
            with self._lock:
                self._dispatch()
                busy = {a.ref: a for a in self._actors if a.request is not None}
            if not busy:
                time.sleep(0.002)
                continue
            ready, _ = ray.wait(list(busy), num_returns=1, timeout=0.05)
            with self._lock:
                for ref in ready:
                    self._complete(busy[ref], ref)
                now = time.monotonic()
                for a in list(self._actors):
                    if a.request is not None and now - a.request.started > self.batch_timeout:
                        self._lose(a, f"ran past the batch timeout ({self.batch_timeout:g} s)",
                                   replace=True)

    def _complete(self, actor: _Actor, ref) -> None:
        request = actor.request
        wall = time.monotonic() - request.started
        try:
            results = self._ray.get(ref)
        except (self._ray.exceptions.RayActorError, self._ray.exceptions.WorkerCrashedError):
            self._lose(actor, "died", replace=False)
            return
        except Exception:  # the measurer itself failed: every config of the batch failed
            results = None
        actor.request = None
        actor.ref = None
        self._finish(request, results, wall + request.spent)

    def _finish(self, request: _Request, results: list | None, wall: float) -> None:
        """A request's results are in: kept for every batch that waits for one of them."""
        n = len(request.configs)
        if results is None or len(results) != n:
            results = [([], "runtime", "measurer failed for the whole batch", wall / n, False)] * n
        for config, result in zip(request.configs, results):
            key = (request.signature, tuple(config))
            self._measured[key] = tuple(result)
            self._measuring.discard(key)
        request.batch.wall += wall
        self._settle()

    def _settle(self) -> None:
        """Hands every batch whose results are all in to its tuner; a result measured for
        another batch costs it nothing."""
        for b in [b for b in self._batches if all(k in self._measured for k in b.keys)]:
            self._batches.remove(b)
            results = [self._measured[k] if k in b.own else self._measured[k][:3] + (0.0,) +
                       self._measured[k][4:] for k in b.keys]
            self._models[b.model].done.put((b.ticket, results, b.wall))

    def _lose(self, actor: _Actor, what: str, replace: bool) -> None:
        """An actor is gone mid-batch: retry the batch once elsewhere, else record it failed."""
        request = actor.request
        request.spent += time.monotonic() - request.started
        request.attempts += 1
        self._actors.remove(actor)
        self.lost += 1
        self._ray.kill(actor.handle)
        if replace:
            self._actors.append(self._spawn(actor.index))
        fate = ("retried on another worker" if request.attempts < 2
                else "recorded as failed")
        print(f"nimble: worker {actor.index} (pid {actor.pid}) {what}; {len(self._actors)} "
              f"worker(s) left; its batch is {fate}", file=sys.stderr, flush=True)
        if request.attempts < 2:
            self._queue.insert(0, request)
            return
        n = len(request.configs)
        error = "timeout" if replace else "runtime"
        failed = [([], error, f"{LOST_TWICE} ({what})", request.spent / n, False)] * n
        self._finish(request, failed, request.spent)
        if not self._actors:  # nothing left to measure what is queued: fail it too
            queued, self._queue = self._queue, []
            for r in queued:
                self._finish(r, [([], "runtime", "no worker left", 0.0, False)] * len(r.configs),
                             0.0)


class ModelPool:
    """The measure pool the C++ tuner of one model sees (nimble._C.tuning's `pool=`)."""

    def __init__(self, group: WorkerGroup, key: str) -> None:
        self._group = group
        self._key = key

    def capacity(self) -> int:
        return self._group.capacity(self._key)

    def submit(self, ticket: int, task: int, configs: list, repeats: dict) -> None:
        signature = self._group._models[self._key].signatures[task]
        self._group.submit(self._key, ticket, signature, configs, repeats)

    def take(self):
        done = self._group._models[self._key].done
        while True:  # in short waits, so that Ctrl-C is seen between them
            try:
                return done.get(timeout=0.2)
            except queue.Empty:
                continue


__all__ = ["LOST_TWICE", "RAY_EXTRA", "ModelPool", "WorkerGroup", "require_ray",
           "simulated_model", "zoo_model"]
