#!/usr/bin/env bash
# The GPU tuning run of docs/cuda-kernels.md, for tests/gpu/run.sh to call where a GPU is at
# hand: tune mobilenet_v2 and resnet18's CUDA graphs (batch 1), bind the winners, compare
# tuned and untuned replays and eager. Extra arguments go to tune_check.py
# (e.g. --budget-seconds 120 --json out.json).
set -euo pipefail
cd "$(dirname "$0")/../.."
# The CUDA kernels' own checks first: every config compiles for sm_80/sm_90 and fits, the
# bodies agree with ATen on the CPU (these need no GPU and run in CI too).
ctest --test-dir build -R 'Cuda' --output-on-failure
.venv/bin/python tests/gpu/tune_check.py "$@"
