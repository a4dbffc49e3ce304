#!/usr/bin/env bash
# The GPU check in one command, for a fresh GPU machine with torch and nvcc but no package
# registry (docs/gpu.md). At most 8 minutes, the build included; the most valuable parts
# first, so that a run cut short still says the most:
#
#   bash tests/gpu/run.sh OUTDIR          1. build nimble._C (when missing or stale)
#                                         2. the GPU correctness suites (pytest)
#                                         3. `python -m nimble bench --device cuda` at batch 1
#                                            on googlenet, inception_v3, resnet50, mobilenet_v2
#                                         4. the training bench (resnet18, mobilenet_v2,
#                                            googlenet; batch 32, 32x32; SGD with momentum,
#                                            then AdamW), as time allows
#                                         5. tests/gpu/train_gap.py: where the one-stream
#                                            step's time goes against the hand graph
#   bash tests/gpu/run.sh --asan OUTDIR   nimble._C built with AddressSanitizer, the GPU
#                                         suites run under it
#   bash tests/gpu/run.sh --tune OUTDIR   the CUDA tuned-kernel slot (docs/cuda-kernels.md):
#                                         mobilenet_v2 and resnet18's CUDA graphs tuned,
#                                         the winners bound, tuned against untuned and eager
#                                         (tests/gpu/tune_check.py)
#   bash tests/gpu/run.sh --dry-run OUTDIR  no device needed: lists the parts, their time
#                                         limits and commands (and the build script found)
#                                         in OUTDIR/parts.tsv and on stdout, running none
#
# The build script: $NIMBLE_GPU_BUILD, else gpu-kit/build.sh inside the checkout (made by
# tests/gpu/make_kit.sh: the workplace's kit plus the .debs it lacks; git-ignored, and a GPU
# machine may get only the checkout). A build that fails is
# tried once more with -U_FORTIFY_SOURCE (Ubuntu's g++ defines it; the report says so).
# Each bench prints one JSON line per model as it goes (OUTDIR/*.jsonl). What comes back:
# OUTDIR/report.md (tests/gpu/report.py: parts, tests, failure messages, benches, targets)
# and OUTDIR/results.tar.gz (every log, JSON and JUnit file); the report is printed last.
# Exit: 0 when every part passed, 1 when one did not, 2 for bad arguments, 3 when there is
# no CUDA device (one line, nothing run). PYTHON (default python3) runs everything.
set -uo pipefail

usage() {
  echo "usage: bash tests/gpu/run.sh [--asan | --tune | --dry-run] OUTDIR"
}

ASAN=0
TUNE=0
DRY=0
OUT=""
for arg in "$@"; do
  case $arg in
    --asan) ASAN=1 ;;
    --tune) TUNE=1 ;;
    --dry-run) DRY=1 ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "tests/gpu/run.sh: unknown option '$arg'" >&2; usage >&2; exit 2 ;;
    *)
      if [ -n "$OUT" ]; then
        echo "tests/gpu/run.sh: one OUTDIR expected, got '$OUT' and '$arg'" >&2
        usage >&2
        exit 2
      fi
      OUT=$arg
      ;;
  esac
done
if [ "$ASAN" -eq 1 ] && [ "$TUNE" -eq 1 ]; then
  echo "tests/gpu/run.sh: --asan and --tune are separate runs (each has its own budget)" >&2
  usage >&2
  exit 2
fi
if [ -z "$OUT" ]; then
  echo "tests/gpu/run.sh: no OUTDIR given" >&2
  usage >&2
  exit 2
fi

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PYTHON=${PYTHON:-python3}
START=$SECONDS
if [ "$DRY" -eq 0 ]; then
  NO_DEVICE=$("$PYTHON" -c '
import torch
if torch.version.cuda is None:
    print(f"torch {torch.__version__} was built without CUDA")
elif not torch.cuda.is_available():
    print("torch.cuda.is_available() is False")
' 2>&1)
  if [ -n "$NO_DEVICE" ]; then
    echo "tests/gpu/run.sh: no CUDA device ($(echo "$NO_DEVICE" | tail -1)): nothing run"
    exit 3
  fi
fi

mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 2
rm -f "$OUT/parts.tsv" "$OUT"/*.jsonl
cd "$ROOT"
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu:/opt/deps/usr/lib:${LD_LIBRARY_PATH:-}
export PYTHONPATH=$ROOT PYTHONUNBUFFERED=1
# cuBLAS reads it when it makes its first handle: the deterministic training tests need it.
export CUBLAS_WORKSPACE_CONFIG=${CUBLAS_WORKSPACE_CONFIG:-:4096:8}
BUDGET=${NIMBLE_GPU_BUDGET:-480}  # seconds for everything, the build included
DEADLINE=$((START + BUDGET - 15))  # the report and the archive take the rest
FAILED=0
SPENT=0

# part NAME SECONDS STDOUT_FILE COMMAND...: runs COMMAND for at most SECONDS (less if the
# budget is nearly spent; not at all, as a timeout, when it is), stdout to STDOUT_FILE (or
# the log), stderr to OUTDIR/NAME.log.
part() {
  local name=$1 limit=$2 stdout=$3
  shift 3
  local now=$SECONDS
  [ "$DRY" -eq 1 ] && now=$((START + SPENT))  # as if every part before took its whole limit
  local left=$((DEADLINE - now))
  [ "$limit" -gt "$left" ] && limit=$left
  local start=$SECONDS code
  if [ "$DRY" -eq 1 ]; then
    [ "$limit" -lt 0 ] && limit=0
    echo "$name: at most $limit s, from +$SPENT s: $*"
    SPENT=$((SPENT + limit))
    code=0
  elif [ "$limit" -le 5 ]; then
    echo "not started: the ${BUDGET} s budget was spent" >>"$OUT/$name.log"
    code=124
  else
    # SIGINT first: pytest still writes its JUnit file and summary, a bench its traceback.
    timeout -s INT -k 10 "$limit" "$@" >"${stdout:-$OUT/$name.log}" 2>>"$OUT/$name.log"
    code=$?
  fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$code" "$((SECONDS - start))" "$*" >>"$OUT/parts.tsv"
  [ "$DRY" -eq 1 ] || echo "tests/gpu/run.sh: $name: exit $code after $((SECONDS - start)) s" >&2
  [ "$code" -eq 0 ] || FAILED=1
  return "$code"
}

build_sh() {
  local candidate
  for candidate in "${NIMBLE_GPU_BUILD:-}" "$ROOT/gpu-kit/build.sh"; do
    [ -n "$candidate" ] && [ -f "$candidate" ] && { echo "$candidate"; return 0; }
  done
  return 1
}

module_is_stale() {
  local module
  module=$(ls "$ROOT"/nimble/_C*.so 2>/dev/null | head -1)
  [ -z "$module" ] && return 0
  [ -n "$(find csrc tuning CMakeLists.txt -newer "$module" -print -quit)" ] && return 0
  ! "$PYTHON" -c 'import nimble._C' 2>/dev/null
}

# bench_lines FILE PART: after a bench part, its JSON (one row or a list) as one line per
# model, appended to FILE and printed as it goes.
bench_lines() {
  local file=$1 name=$2
  [ -s "$OUT/$name.json" ] || return 0
  "$PYTHON" -c '
import json, sys
data = json.load(open(sys.argv[1]))
for row in data if isinstance(data, list) else [data]:
    print(json.dumps(row), flush=True)
' "$OUT/$name.json" | tee -a "$OUT/$file" && rm -f "$OUT/$name.json"  # kept when unreadable
}

BUILD=$(build_sh) || BUILD=""
[ "$DRY" -eq 1 ] && echo "build script: ${BUILD:-none found}"
if [ "$DRY" -eq 1 ] || [ ! -d /opt/deps/usr/include ] || module_is_stale; then
  if [ -z "$BUILD" ]; then
    echo "tests/gpu/run.sh: nimble._C must be built and no build.sh was found (set" \
      "NIMBLE_GPU_BUILD, or run tests/gpu/make_kit.sh where a registry is reachable and carry gpu-kit/)" >&2
    [ "$DRY" -eq 1 ] || exit 1
  fi
  if ! part build 150 "" bash "$BUILD" "$ROOT" && [ "$DRY" -eq 0 ]; then
    # Ubuntu's g++ defines _FORTIFY_SOURCE (issue 45): the rest of the check is worth more
    # than a stop here; the first build's failure stays in the report.
    rm -rf "$ROOT/build-gpu"
    part build-without-fortify 150 "" env "CXXFLAGS=${CXXFLAGS:-} -U_FORTIFY_SOURCE" \
      bash "$BUILD" "$ROOT"
  fi
fi

GPU_SUITES=(tests/python/test_cuda.py tests/python/test_graph_training.py
  tests/python/test_graph_inference.py tests/python/test_multi_return_ops.py)
INFERENCE_MODELS=(googlenet inception_v3 resnet50 mobilenet_v2)
TRAIN_MODELS=(resnet18 mobilenet_v2 googlenet)

if [ "$ASAN" -eq 1 ]; then
  # The recipe of shared/gpu/README.md, in a build tree of its own; the package as it is in
  # the tree, with the instrumented nimble._C beside it.
  CXX_BIN=/usr/bin/g++
  [ -x "$CXX_BIN" ] || CXX_BIN=$(command -v g++)
  export CXX=$CXX_BIN CUDAHOSTCXX=$CXX_BIN TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
  part asan-build 240 "" bash -c "
    cmake -S . -B build-asan-gpu -G Ninja -DPython3_EXECUTABLE=$(command -v "$PYTHON") \
      -DNIMBLE_CUDA=ON -DNIMBLE_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DNIMBLE_MODULE_DIR=$ROOT/build-asan-gpu/python/nimble \
      '-DCMAKE_CXX_FLAGS=-fsanitize=address -fno-omit-frame-pointer -U_FORTIFY_SOURCE' \
      -DCMAKE_MODULE_LINKER_FLAGS=-fsanitize=address \
      -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=address \
      '-DCMAKE_PREFIX_PATH=/opt/deps/usr;/opt/deps/usr/lib/x86_64-linux-gnu/cmake;/opt/deps/usr/share/eigen3/cmake' \
      -DBoost_INCLUDE_DIR=/opt/deps/usr/include &&
    cmake --build build-asan-gpu --target _C -j $(nproc)"
  PKG=build-asan-gpu/python/nimble
  if [ "$DRY" -eq 0 ]; then
    mkdir -p "$PKG"
    find "$PKG" -mindepth 1 -maxdepth 1 ! -name '_C.*.so' -exec rm -rf {} +
    for entry in nimble/*; do
      case $entry in nimble/_C.*.so | nimble/__pycache__) ;; *) ln -s "$ROOT/$entry" "$PKG/" ;; esac
    done
  fi
  part pytest-asan 400 "" env \
    LD_PRELOAD="$($CXX_BIN -print-file-name=libasan.so) $($CXX_BIN -print-file-name=libstdc++.so.6)" \
    ASAN_OPTIONS=detect_leaks=0:protect_shadow_gap=0:halt_on_error=1 PYTHONMALLOC=malloc \
    PYTHONPATH="$ROOT/build-asan-gpu/python:$ROOT/tests/python" \
    "$PYTHON" -m pytest -q -p no:cacheprovider -k "not cpu-graph" \
    --junitxml="$OUT/pytest-asan.xml" "${GPU_SUITES[@]}"
elif [ "$TUNE" -eq 1 ]; then
  # Two models, 150 s of tuning each, then the tuned and untuned graphs timed side by side.
  part tune_check 420 "" "$PYTHON" tests/gpu/tune_check.py --budget-seconds 150 \
    --database "$OUT/tune_cuda.db" --json "$OUT/tune_check.json"
else
  # Correctness first: the CUDA suite (inference, the training reproductions of issue 45),
  # then the graph suites' CUDA cases.
  # The training reproductions of issue 45 first: new, and what the benches rely on.
  PYTEST=("$PYTHON" -m pytest -v -p no:cacheprovider)
  TRAINING="whole_step or generator or step_returns"
  part pytest_training 90 "" "${PYTEST[@]}" -k "$TRAINING" \
    --junitxml="$OUT/pytest-training.xml" "${GPU_SUITES[0]}"
  part pytest_cuda 100 "" "${PYTEST[@]}" -k "not ($TRAINING)" \
    --junitxml="$OUT/pytest-cuda.xml" "${GPU_SUITES[0]}"
  part pytest_graph 70 "" "${PYTEST[@]}" -k "not cpu-graph" \
    --junitxml="$OUT/pytest-graph.xml" "${GPU_SUITES[@]:1}"
  BENCH=("$PYTHON" -m nimble bench --device cuda --json)
  for model in "${INFERENCE_MODELS[@]}"; do
    part "bench_b1_$model" 35 "$OUT/bench_b1_$model.json" "${BENCH[@]}" --runs 30 --warmup 5 \
      --batch 1 --model "torchvision:$model"
    bench_lines bench_b1.jsonl "bench_b1_$model"
  done
  for optimizer in sgd adamw; do
    for model in "${TRAIN_MODELS[@]}"; do
      part "train_${optimizer}_$model" 45 "$OUT/train_${optimizer}_$model.json" "${BENCH[@]}" \
        --train --optimizer "$optimizer" --batch 32 --image-size 32 --runs 15 --warmup 3 \
        --model "torchvision:$model"
      bench_lines "train_$optimizer.jsonl" "train_${optimizer}_$model"
    done
  done
  # Where the one-stream step loses to the hand graph: host time of a call, device time,
  # the kernels of one call (docs/gpu.md, "Where the training gap is").
  part step_gap 60 "$OUT/step_gap.log" "$PYTHON" tests/gpu/train_gap.py --runs 10 \
    --json "$OUT/step_gap.json"
fi

[ "$DRY" -eq 1 ] && exit 0
"$PYTHON" "$ROOT/tests/gpu/report.py" "$OUT" >/dev/null || FAILED=1
# Two files come back: report.md and one archive of everything else.
(cd "$OUT" && find . -mindepth 1 -maxdepth 1 ! -name report.md ! -name results.tar.gz \
  -printf '%P\n' | tar czf results.tar.gz --remove-files -T -) || FAILED=1
cat "$OUT/report.md"
exit "$FAILED"
