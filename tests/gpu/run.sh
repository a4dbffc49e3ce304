#!/usr/bin/env bash
# The whole GPU check in one command, for a fresh GPU machine with torch and nvcc but no
# package registry (docs/gpu.md):
#
#   bash tests/gpu/run.sh OUTDIR          the GPU pytest suites; `python -m nimble bench
#                                         --device cuda` at batch 1 on the zoo and batch 8 on
#                                         four models, --compile on googlenet and inception_v3;
#                                         the CUDA training bench (resnet18, mobilenet_v2,
#                                         googlenet; batch 32, 32x32; SGD with momentum, Adam);
#                                         torch.compile(backend="nimble") on BERT with a mask
#   bash tests/gpu/run.sh --asan OUTDIR   nimble._C built with AddressSanitizer, the GPU
#                                         suites run under it
#   bash tests/gpu/run.sh --tune OUTDIR   the CUDA tuned-kernel slot (docs/cuda-kernels.md):
#                                         mobilenet_v2 and resnet18's CUDA graphs tuned,
#                                         the winners bound, tuned against untuned and eager
#                                         (tests/gpu/tune_check.py)
#
# Builds nimble._C first (../shared/gpu/build.sh) when it is missing or older than the
# sources. Each part runs under its own time limit inside a 9-minute budget. Writes
# OUTDIR/report.md and OUTDIR/report.json (tests/gpu/report.py) and prints the report last.
# Exit: 0 when every part passed, 1 when one did not, 2 for bad arguments, 3 when there is
# no CUDA device (one line, nothing run). PYTHON (default python3) runs everything.
set -uo pipefail

usage() {
  echo "usage: bash tests/gpu/run.sh [--asan | --tune] OUTDIR"
}

ASAN=0
TUNE=0
OUT=""
for arg in "$@"; do
  case $arg in
    --asan) ASAN=1 ;;
    --tune) TUNE=1 ;;
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

mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 2
rm -f "$OUT/parts.tsv"
cd "$ROOT"
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu:/opt/deps/usr/lib:${LD_LIBRARY_PATH:-}
export PYTHONPATH=$ROOT PYTHONUNBUFFERED=1
DEADLINE=$((SECONDS + 540))
FAILED=0

# part NAME SECONDS STDOUT_FILE COMMAND...: runs COMMAND for at most SECONDS (less if the
# budget is nearly spent), stdout to STDOUT_FILE (or the log), stderr to OUTDIR/NAME.log.
part() {
  local name=$1 limit=$2 stdout=$3
  shift 3
  local left=$((DEADLINE - SECONDS))
  [ "$limit" -gt "$left" ] && limit=$left
  local start=$SECONDS code
  if [ "$limit" -le 5 ]; then
    code=124
  else
    timeout -k 10 "$limit" "$@" >"${stdout:-$OUT/$name.log}" 2>>"$OUT/$name.log"
    code=$?
  fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$code" "$((SECONDS - start))" "$*" >>"$OUT/parts.tsv"
  echo "tests/gpu/run.sh: $name: exit $code after $((SECONDS - start)) s" >&2
  [ "$code" -eq 0 ] || FAILED=1
}

build_sh() {
  local candidate
  for candidate in "${NIMBLE_GPU_BUILD:-}" "$ROOT/../shared/gpu/build.sh" \
    "$ROOT/shared/gpu/build.sh"; do
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

BUILD=$(build_sh) || BUILD=""
if [ ! -d /opt/deps/usr/include ] || module_is_stale; then
  if [ -z "$BUILD" ]; then
    echo "tests/gpu/run.sh: nimble._C must be built and no build.sh was found (set" \
      "NIMBLE_GPU_BUILD, or put shared/gpu/ beside or inside the checkout)" >&2
    exit 1
  fi
  part build 240 "" bash "$BUILD" "$ROOT"
fi

GPU_SUITES=(tests/python/test_cuda.py tests/python/test_graph_inference.py
  tests/python/test_graph_training.py tests/python/test_multi_return_ops.py)

if [ "$ASAN" -eq 1 ]; then
  # The recipe of ../shared/gpu/README.md, in a build tree of its own; the package as it
  # is in the tree, with the instrumented nimble._C beside it.
  CXX_BIN=/usr/bin/g++
  [ -x "$CXX_BIN" ] || CXX_BIN=$(command -v g++)
  export CXX=$CXX_BIN CUDAHOSTCXX=$CXX_BIN TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
  part asan-build 300 "" bash -c "
    cmake -S . -B build-asan-gpu -G Ninja -DPython3_EXECUTABLE=$(command -v "$PYTHON") \
      -DNIMBLE_CUDA=ON -DNIMBLE_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DNIMBLE_MODULE_DIR=$ROOT/build-asan-gpu/python/nimble \
      '-DCMAKE_CXX_FLAGS=-fsanitize=address -fno-omit-frame-pointer' \
      -DCMAKE_MODULE_LINKER_FLAGS=-fsanitize=address \
      -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=address \
      '-DCMAKE_PREFIX_PATH=/opt/deps/usr;/opt/deps/usr/lib/x86_64-linux-gnu/cmake;/opt/deps/usr/share/eigen3/cmake' \
      -DBoost_INCLUDE_DIR=/opt/deps/usr/include &&
    cmake --build build-asan-gpu --target _C -j $(nproc)"
  PKG=build-asan-gpu/python/nimble
  mkdir -p "$PKG"
  find "$PKG" -mindepth 1 -maxdepth 1 ! -name '_C.*.so' -exec rm -rf {} +
  for entry in nimble/*; do
    case $entry in nimble/_C.*.so | nimble/__pycache__) ;; *) ln -s "$ROOT/$entry" "$PKG/" ;; esac
  done
  part pytest-asan 400 "" env \
    LD_PRELOAD="$($CXX_BIN -print-file-name=libasan.so) $($CXX_BIN -print-file-name=libstdc++.so.6)" \
    ASAN_OPTIONS=detect_leaks=0:protect_shadow_gap=0:halt_on_error=1 PYTHONMALLOC=malloc \
    PYTHONPATH="$ROOT/build-asan-gpu/python:$ROOT/tests/python" \
    "$PYTHON" -m pytest -q -p no:cacheprovider -k "not cpu-graph" \
    --junitxml="$OUT/pytest-asan.xml" "${GPU_SUITES[@]}"
elif [ "$TUNE" -eq 1 ]; then
  # Two models, 200 s of tuning each, then the tuned and untuned graphs timed side by side.
  part tune_check 520 "" "$PYTHON" tests/gpu/tune_check.py --budget-seconds 200 \
    --database "$OUT/tune_cuda.db" --json "$OUT/tune_check.json"
else
  part pytest 170 "" "$PYTHON" -m pytest -q -p no:cacheprovider -k "not cpu-graph" \
    --junitxml="$OUT/pytest.xml" "${GPU_SUITES[@]}"
  BENCH=("$PYTHON" -m nimble bench --device cuda --json --runs 20 --warmup 5)
  TRAIN_MODELS=(--model torchvision:resnet18 --model torchvision:mobilenet_v2
    --model torchvision:googlenet)
  for optimizer in sgd adam; do
    part "train_$optimizer" 60 "$OUT/train_$optimizer.json" "${BENCH[@]}" --train \
      --optimizer "$optimizer" --batch 32 --image-size 32 --runs 10 --warmup 3 "${TRAIN_MODELS[@]}"
  done
  part bench_b1 110 "$OUT/bench_b1.json" "${BENCH[@]}" --batch 1 --model all
  part bench_b8 50 "$OUT/bench_b8.json" "${BENCH[@]}" --batch 8 \
    --model torchvision:googlenet --model torchvision:inception_v3 \
    --model torchvision:resnet50 --model torchvision:mobilenet_v2
  part bench_compile 70 "$OUT/bench_compile.json" "${BENCH[@]}" --batch 1 --compile \
    --model torchvision:googlenet --model torchvision:inception_v3
  part bert 40 "" "$PYTHON" tests/gpu/bert_compile.py "$OUT/bert.json"
fi

"$PYTHON" "$ROOT/tests/gpu/report.py" "$OUT" || FAILED=1
exit "$FAILED"
