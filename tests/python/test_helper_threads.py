"""nimble's helper threads (csrc/threads/work_sharing.cpp) as the operating system shows
them: named `nimble-helper`, so that top, perf and a debugger tell them from ATen's threads."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")

_PROBE = r"""
import os, torch, torchvision, nimble
torch.set_num_threads(2)
model = torchvision.models.resnet18().eval()
x = torch.randn(1, 3, 64, 64)
with torch.no_grad():
    nimble.Nimble(model).prepare(x)(x)
names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
print(names.count("nimble-helper"))
"""


def test_a_two_thread_replays_helper_is_named():
    result = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env={**os.environ, "OMP_NUM_THREADS": "2", "NIMBLE_KERNEL_HELPERS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert int(result.stdout.strip().splitlines()[-1]) == 1
