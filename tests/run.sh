#!/usr/bin/env bash
# Everything the test suite needs, then every test: C++ (CTest) and Python (pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/bootstrap
cmake --build build
ctest --test-dir build --output-on-failure
.venv/bin/python -m pytest tests/python -q "$@"
# The memory and stream suites again with other torch thread counts: their promises
# (memory no more than eager's on the same ops, results equal to eager's) must hold on any
# machine, whatever its core count.
for threads in 1 4; do
  .venv/bin/python -m pytest tests/python/test_memory_plan.py tests/python/test_streams.py \
    tests/python/test_stream_stress.py -q --torch-threads "$threads"
done
