#!/usr/bin/env bash
# The first run of opforge's CUDA side on a GPU, in one command, from the repository root:
#
#   bash benchmarks/gpu_check.sh              # every step, in order; stops at the first failure
#   bash benchmarks/gpu_check.sh --from race  # from one step on (after a fix)
#   bash benchmarks/gpu_check.sh --only fp16  # one step
#   bash benchmarks/gpu_check.sh --dry-run    # on a machine without a GPU: the CPU side of each
#                                             # step (syntax, models, reference results, --help)
#
# Expects nvcc, cupy-cuda13x, onnx, onnxruntime, torch and pytest installed, and no network:
# opforge is installed with `pip install --no-deps --no-build-isolation -e .`. Everything a
# later reader needs is printed: paste the whole output into the issue.
set -euo pipefail

STEPS=(install gpu cupy tests example race fp16 stream memcheck bench)
from="" only="" dry=0
while [ $# -gt 0 ]; do
  case "$1" in
    --from) from="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --dry-run) dry=1; shift ;;
    -h|--help) sed -n '2,12p' "$0"; echo "steps: ${STEPS[*]}"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
for name in $from $only; do
  [[ " ${STEPS[*]} " == *" $name "* ]] || { echo "no step '$name'; steps: ${STEPS[*]}" >&2; exit 2; }
done

cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
export OPFORGE_BUILD_JOBS=${OPFORGE_BUILD_JOBS:-$(nproc)}
# one cache for every step and for reruns (--from), so nothing is built twice
export OPFORGE_CACHE_DIR=${OPFORGE_CACHE_DIR:-${TMPDIR:-/tmp}/opforge-gpu-check}
export OPFORGE_TEST_CACHE_DIR=${OPFORGE_TEST_CACHE_DIR:-$OPFORGE_CACHE_DIR}
started=$SECONDS
reached=$([ -z "$from" ] && echo 1 || echo 0)

# Runs step $1 (the function step_$1) when --from/--only select it, with a header and its time.
run_step() {
  local name=$1
  [ "$name" = "$from" ] && reached=1
  if [ "$reached" = 0 ] || { [ -n "$only" ] && [ "$name" != "$only" ]; }; then return 0; fi
  echo
  echo "=== $name ($(date -u +%H:%M:%S) UTC, ${SECONDS}s in)"
  local t0=$SECONDS rc
  set +e
  ( set -e; "step_$name" )   # a subshell outside any condition, so that -e holds inside the step
  rc=$?
  set -e
  if [ "$rc" != 0 ]; then
    echo "=== $name FAILED (exit $rc) after $((SECONDS - t0)) s: stopping (rerun with --from $name)"
    exit 1
  fi
  echo "=== $name passed in $((SECONDS - t0)) s"
}

# On a dry run, echoes the command instead of running it.
gpu() {
  if [ "$dry" = 1 ]; then echo "  (dry run) would run: $*"; else "$@"; fi
}

step_install() {
  git log -1 --format='commit %H %s' 2>/dev/null || true
  git status --short 2>/dev/null | head -20 || true
  "$PY" --version
  "$PY" -c 'import numpy, onnx; print("numpy", numpy.__version__, "onnx", onnx.__version__)'
  "$PY" -c 'import onnxruntime as o; print("onnxruntime", o.__version__, o.get_available_providers())' || true
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' || true
  command -v nvcc && nvcc --version | tail -2
  gpu "$PY" -m pip install --no-deps --no-build-isolation -e . -q
  "$PY" -c 'import opforge; print("opforge from", opforge.__file__)'
}

step_gpu() {
  gpu nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.total --format=csv
  gpu nvidia-smi -L
}

step_cupy() {
  if [ "$dry" = 1 ]; then "$PY" -m benchmarks.gpu_probe cupy --dry-run; else "$PY" -m benchmarks.gpu_probe cupy; fi
}

step_tests() {
  # every cuda-marked test, with the reason of each skip (a skipped cuda test on a GPU is a bug)
  if [ "$dry" = 1 ]; then
    "$PY" -m pytest -q --no-header -p no:cacheprovider -m cuda --collect-only tests | tail -3
  else
    "$PY" -m pytest -q --no-header -p no:cacheprovider -m cuda -rs tests
  fi
}

step_example() {
  gpu "$PY" examples/cuda/swish_model.py
}

probe() {
  if [ "$dry" = 1 ]; then "$PY" -m benchmarks.gpu_probe "$1" --dry-run; else "$PY" -m benchmarks.gpu_probe "$1"; fi
}
step_race() { probe race; }
step_fp16() { probe fp16; }
step_stream() { probe stream; }

step_memcheck() {
  local sanitizer
  sanitizer=$(command -v compute-sanitizer || true)
  for root in ${CUDA_HOME:-} /usr/local/cuda /usr/local/cuda-*; do
    [ -z "$sanitizer" ] && [ -x "$root/bin/compute-sanitizer" ] && sanitizer="$root/bin/compute-sanitizer"
  done
  if [ -z "$sanitizer" ]; then
    [ "$dry" = 1 ] && { echo "  (dry run) compute-sanitizer not found here"; return 0; }
    echo "compute-sanitizer not found (looked on PATH, in \$CUDA_HOME/bin and /usr/local/cuda*/bin)"
    return 1
  fi
  # the example's own kernels and cupy's; --leak-check would report cupy's pooled memory
  gpu "$sanitizer" --tool memcheck --error-exitcode 1 --print-limit 20 "$PY" examples/cuda/swish_model.py
}

step_bench() {
  if [ "$dry" = 1 ]; then "$PY" -m benchmarks.bench_cuda --help | head -3; else "$PY" -m benchmarks.bench_cuda; fi
}

for step in "${STEPS[@]}"; do run_step "$step"; done
echo
echo "=== all selected steps passed in ${SECONDS}s$([ "$dry" = 1 ] && echo ' (dry run: nothing ran on a GPU)')"
