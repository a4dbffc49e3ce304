"""`--torch-threads N` runs the suite with torch.set_num_threads(N) (and OMP_NUM_THREADS=N
for the processes tests start): results and memory promises must not depend on the
machine's core count. tests/run.sh runs the memory and stream suites with 1 and 4."""

import os
import random
import zlib

import pytest
import torch


def pytest_addoption(parser):
    parser.addoption("--torch-threads", type=int, default=None,
                     help="torch.set_num_threads for the whole run (default: torch's own)")


def pytest_configure(config):
    threads = config.getoption("--torch-threads")
    if threads is not None:
        if threads < 1:
            raise ValueError(f"--torch-threads must be at least 1, got {threads}")
        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)


def pytest_report_header(config):
    return f"torch threads: {torch.get_num_threads()}"


@pytest.fixture(autouse=True)
def _seed_from_the_test_name(request):
    """Each test draws the same random numbers whether it runs alone or after others (CI once
    failed a test whose unseeded weights depended on the files collected before it); the seed
    differs between tests, so property tests still see varied inputs."""
    seed = zlib.crc32(request.node.nodeid.encode())
    torch.manual_seed(seed)
    random.seed(seed)
