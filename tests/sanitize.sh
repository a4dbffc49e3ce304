#!/usr/bin/env bash
# The C++ suites and the Python suite under sanitizers (docs/testing.md, "Sanitizers"):
#
#   bash tests/sanitize.sh [asan] [tsan] [python]     (no argument: all three)
#
#   asan    every C++ suite built with AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/)
#   tsan    the suites with threads built with ThreadSanitizer (build-tsan/): the CPU
#           streams and their events, the replay pool, the tuner's threads, the kernels'
#           helper threads
#   python  the Python suite's CPU tests against nimble._C from build-asan/
#
# Each build tree is its own CMake configuration (NIMBLE_SANITIZE); ccache makes a rerun
# rebuild only what changed. libtorch, libgomp and xgboost are not instrumented.
# Environment: PYTHON (default .venv/bin/python), JOBS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PYTHON=${PYTHON:-.venv/bin/python}
# Absolute, since CMake runs it from the build tree; not resolved, since a venv's python is a
# link to the base interpreter, which has no torch.
[[ $PYTHON = /* ]] || PYTHON=$ROOT/$PYTHON
JOBS=${JOBS:-2}
PARTS=("$@")
[ ${#PARTS[@]} -eq 0 ] && PARTS=(asan tsan python)

configure() {  # build dir, sanitizers
  cmake -S . -B "$1" -G Ninja -DPython3_EXECUTABLE="$PYTHON" -DNIMBLE_CUDA=OFF \
    "-DNIMBLE_SANITIZE=$2" -DNIMBLE_MODULE_DIR="$ROOT/$1/python/nimble" >/dev/null
}

declare -A TIMES
timed() {  # part name, command...
  local name=$1 start=$SECONDS
  shift
  "$@"
  TIMES[$name]=$((SECONDS - start))
}

# A finding fails the test that triggers it, with every frame in the report. No
# suppressions: none of these runs reports anything (docs/testing.md); should one be needed for
# a library we do not build, it goes in a file here with a comment saying why.
export ASAN_OPTIONS="halt_on_error=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"

build_asan() {
  configure build-asan "address;undefined"
  cmake --build build-asan -j"$JOBS"
}

run_asan() {
  ctest --test-dir build-asan --output-on-failure -j"$JOBS"
}

# What runs threads of ours: the CPU executor's streams and events, the pool (replay
# arena), the tuner's parallel runs (compare_schedulers) and database, and the helper threads
# nimble's channels-last kernels share their work with (threads/work_sharing.h).
TSAN_TARGETS=(runtime_test tuning_model_tuner_test tuning_database_test work_sharing_test)
TSAN_TESTS='^(Replay|ReplayArena|CpuStreams|WorkSharing)\.|^tuning\.'

build_tsan() {
  configure build-tsan thread
  cmake --build build-tsan -j"$JOBS" --target "${TSAN_TARGETS[@]}"
}

run_tsan() {
  # One OpenMP thread per team: libgomp is not instrumented, so TSan cannot see its
  # barriers and would report every parallel kernel's writes as races. Our streams are
  # threads of their own (std::thread) and stay fully checked.
  OMP_NUM_THREADS=1 ctest --test-dir build-tsan --output-on-failure -j"$JOBS" -R "$TSAN_TESTS"
}

run_python() {
  configure build-asan "address;undefined"
  cmake --build build-asan -j"$JOBS" --target _C
  # The package as it is in the tree, with build-asan's nimble._C beside it.
  local pkg=build-asan/python/nimble
  find "$pkg" -mindepth 1 -maxdepth 1 ! -name '_C.*.so' -exec rm -rf {} +
  for entry in nimble/*; do
    case $entry in nimble/_C.*.so | nimble/__pycache__) ;; *) ln -s "$ROOT/$entry" "$pkg/" ;; esac
  done
  # libasan first, as an instrumented module needs; libstdc++ too, or ASan's __cxa_throw
  # interceptor finds no real __cxa_throw (python itself does not link libstdc++) and every
  # C++ exception aborts. PYTHONMALLOC=malloc: ASan sees Python's objects too. Python and
  # libtorch keep memory until exit by design: no leak check here. allocator_may_return_null:
  # tests that run out of memory on purpose expect malloc's null (torch's OutOfMemoryError),
  # where ASan would stop the process.
  LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)" \
    PYTHONMALLOC=malloc ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0:allocator_may_return_null=1" \
    PYTHONPATH="$ROOT/build-asan/python" "$PYTHON" -m pytest -q -p no:cacheprovider \
    tests/python/test_replay_models.py tests/python/test_replay_contract.py \
    tests/python/test_streams.py tests/python/test_stream_stress.py \
    tests/python/test_memory_plan.py tests/python/test_training.py \
    tests/python/test_tuning.py tests/python/test_tuned_slot.py \
    tests/python/test_aliasing.py tests/python/test_errors.py tests/python/test_failures.py \
    tests/python/test_multi_return_ops.py tests/python/test_channels_last_ops.py \
    tests/python/test_channel_shuffle.py tests/python/test_nhwc_kernels.py
}

for part in "${PARTS[@]}"; do
  case $part in
    asan) timed asan-build build_asan; timed asan-ctest run_asan ;;
    tsan) timed tsan-build build_tsan; timed tsan-ctest run_tsan ;;
    python) timed python-asan run_python ;;  # timed with _C's build: none after asan
    *) echo "tests/sanitize.sh: unknown part '$part' (asan, tsan, python)" >&2; exit 2 ;;
  esac
done
for name in "${!TIMES[@]}"; do echo "sanitize: $name ${TIMES[$name]} s"; done | sort
