#!/usr/bin/env bash
# Everything the test suite needs, then every test: C++ (CTest) and Python (pytest). Ends with
# the number of tests this run ran, from CTest's and pytest's own summaries.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/bootstrap
cmake --build build
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
ctest --test-dir build --output-on-failure | tee "$logs/ctest"
.venv/bin/python -m pytest tests/python -q "$@" | tee "$logs/pytest"
# The memory and stream suites again with other torch thread counts: their promises
# (memory no more than eager's on the same ops, results equal to eager's) must hold on any
# machine, whatever its core count.
for threads in 1 4; do
  .venv/bin/python -m pytest tests/python/test_memory_plan.py tests/python/test_streams.py \
    tests/python/test_stream_stress.py -q --torch-threads "$threads" | tee "$logs/threads-$threads"
done
summary() { grep -E "^=* ?[0-9]+ (passed|failed)|tests failed out of" "$1" | tail -1 | tr -d '='; }
echo "tests/run.sh, counted by this run:"
echo "  C++ (CTest): $(summary "$logs/ctest")"
echo "  Python (pytest): $(summary "$logs/pytest")"
for threads in 1 4; do
  echo "  Python, memory and stream suites on $threads torch thread(s): $(summary "$logs/threads-$threads")"
done
