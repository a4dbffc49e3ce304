"""nimble's helper threads (csrc/runtime/cpu/work_sharing.cpp) as the operating system sees
them: named `nimble-helper`, and on Linux 6.12 or later asking the scheduler for a 0.1 ms slice
(`NIMBLE_HELPER_SLICE_US`), so that a helper woken for a replay's op takes a core another
runtime's spinning thread holds at once rather than after that thread's slice."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.uname().machine not in ("x86_64", "aarch64"),
    reason="Linux threads; sched_getattr's number is known for x86_64 and aarch64",
)

# Prints {"main": slice of the calling thread, "helpers": [slice of each helper]}, in ns, as
# sched_getattr reports them (0 where the kernel keeps no slice per thread).
_PROBE = r"""
import ctypes, json, os, torch, torchvision, nimble
libc = ctypes.CDLL(None, use_errno=True)
class Attr(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("policy", ctypes.c_uint32), ("flags", ctypes.c_uint64),
                ("nice", ctypes.c_int32), ("priority", ctypes.c_uint32), ("runtime", ctypes.c_uint64),
                ("deadline", ctypes.c_uint64), ("period", ctypes.c_uint64),
                ("util_min", ctypes.c_uint32), ("util_max", ctypes.c_uint32)]
SYS_sched_getattr = {"x86_64": 315, "aarch64": 275}[os.uname().machine]
def slice_ns(tid):
    attr = Attr()
    assert libc.syscall(SYS_sched_getattr, tid, ctypes.byref(attr), ctypes.sizeof(attr), 0) == 0
    return attr.runtime
torch.set_num_threads(2)
model = torchvision.models.resnet18().eval()
x = torch.randn(1, 3, 64, 64)
with torch.no_grad():
    fast = nimble.Nimble(model).prepare(x)
    fast(x)
helpers = [int(t) for t in os.listdir("/proc/self/task")
           if open(f"/proc/self/task/{t}/comm").read().strip() == "nimble-helper"]
print(json.dumps({"main": slice_ns(os.getpid()), "helpers": [slice_ns(t) for t in helpers]}))
"""


def _probe(**env: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env={**os.environ, "OMP_NUM_THREADS": "2", **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_helpers_are_named_and_ask_for_a_short_slice():
    seen = _probe()
    assert seen["helpers"], "a two-thread lowered replay started no helper named nimble-helper"
    if seen["main"] == 0:
        pytest.skip("this kernel keeps no scheduler slice per thread (before Linux 6.12)")
    assert all(s == 100_000 for s in seen["helpers"]), seen


def test_the_slice_can_be_left_to_the_kernel():
    seen = _probe(NIMBLE_HELPER_SLICE_US="0")
    assert seen["helpers"]
    if seen["main"] == 0:
        pytest.skip("this kernel keeps no scheduler slice per thread (before Linux 6.12)")
    assert all(s == seen["main"] for s in seen["helpers"]), seen
