#!/usr/bin/env bash
# Everything the test suite needs, then every test: C++ (CTest) and Python (pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/bootstrap
cmake --build build
ctest --test-dir build --output-on-failure
.venv/bin/python -m pytest tests/python -q "$@"
