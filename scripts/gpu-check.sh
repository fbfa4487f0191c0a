#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU (at most 8 minutes on an
# H100 or H200): builds ridge (release) with its CUDA kernels, then on
# cuda:0 runs the conformance suite and the cuda tests, `ridge profile`
# (its calibrated class written to build-gpu/profile-cuda0.yaml), and the
# decode/prefill benchmark of the 1b test model's matmuls against the GPU's
# measured HBM bandwidth and cuBLAS bf16 peak (bench/bench_cuda.c).
#
# Anywhere else it still builds (so it checks that the kernels compile),
# says "no CUDA device: <reason>" and exits 0. It exits non-zero only when
# the build fails or a test fails on the GPU. Output: this terminal, and
# the same lines in build-gpu/gpu-check.log.
#
#   scripts/gpu-check.sh            build in build-gpu/, run everything
#   BUILD=dir scripts/gpu-check.sh  another build folder
#   SKIP_BENCH=1 ...                everything but the benchmark (a dry run
#                                   on the CPU emulator of the kernels:
#                                   RIDGE_CUDA_LIBRARY=build-gpu/libridge_cuda_emu.so)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
JOBS=$(nproc 2>/dev/null || echo 2)
mkdir -p "$BUILD"
LOG="$BUILD/gpu-check.log"
: >"$LOG"
say() { printf '%s\n' "$*" | tee -a "$LOG"; }
step() { say ""; say "== $* ($(date -u +%H:%M:%S))"; }
START=$(date +%s)

step "build (release, $JOBS jobs)"
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  say "nvcc: $( (command -v nvcc || echo /usr/local/cuda/bin/nvcc) | head -1)"
else
  say "nvcc not found: ridge builds without CUDA kernels (every op on cuda:0 will be refused)"
fi
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >>"$LOG" 2>&1 ||
  { say "configure failed: see $LOG"; exit 1; }
timeout 300 cmake --build "$BUILD" -j"$JOBS" >>"$LOG" 2>&1 ||
  { tail -30 "$LOG"; say "build failed: see $LOG"; exit 1; }
say "built in $(( $(date +%s) - START )) s; kernel images:"
ls -l "$BUILD"/gpu-kernels/*.fatbin 2>/dev/null | awk '{print "  " $NF ": " $5 " bytes"}' | tee -a "$LOG" ||
  say "  none (no nvcc at configure time)"

step "devices"
"$BUILD/ridge" devices 2>&1 | tee -a "$LOG"
if ! "$BUILD/ridge" devices --json 2>/dev/null | grep -q '"id":[[:space:]]*"cuda:0"'; then
  reason=$("$BUILD/ridge" devices 2>&1 | awk '$1 == "cuda" {$1 = ""; sub(/^ +/, ""); print; exit}')
  say ""
  say "no CUDA device: ${reason:-cuda:0 not listed}"
  say "(built and compiled the kernels; nothing to run on a GPU here)"
  exit 0
fi

FAILED=0
step "conformance suite and cuda tests on cuda:0"
# conformance_cuda_*: every op against ops/ref; cuda_gpu_*: prefill-sized
# matmuls through cuBLAS, split attention, clamped metadata, events.
if ! timeout 240 "$BUILD/ridge_tests" conformance_cuda_ cuda_ 2>&1 | tee -a "$LOG"; then
  FAILED=1
  say "tests FAILED on cuda:0"
fi

step "ridge profile --device cuda:0"
if "$BUILD/ridge" profile --help >/dev/null 2>&1; then
  # The calibrated class goes into the build folder, never configs/, and into
  # the log. A GPU without a catalog class in `ridge devices` (an H100 PCIe,
  # the emulator) is profiled as h100-sxm; the dry run profiles quickly.
  cls=$("$BUILD/ridge" devices --json 2>/dev/null |
        awk '/"id":[[:space:]]*"cuda:0"/ {f = 1} f && /"class":/ {print; exit}')
  flags=()
  case "$cls" in *null*|"") flags+=(--class h100-sxm); say "cuda:0 has no catalog class: profiled as h100-sxm" ;; esac
  [ "${SKIP_BENCH:-0}" = 1 ] && flags+=(--quick)
  rm -f "$BUILD/profile-cuda0.yaml"
  timeout 120 "$BUILD/ridge" profile --device cuda:0 ${flags[@]+"${flags[@]}"} -o "$BUILD/profile-cuda0.yaml" 2>&1 |
    tee -a "$LOG" || say "ridge profile failed"
  if [ -f "$BUILD/profile-cuda0.yaml" ]; then
    say ""
    say "calibrated class ($BUILD/profile-cuda0.yaml):"
    tee -a "$LOG" <"$BUILD/profile-cuda0.yaml"
  fi
else
  say "skipped: this build has no 'ridge profile' yet ($("$BUILD/ridge" profile --help 2>&1 | head -1))"
fi

step "bench_cuda: the 1b test model's matmuls against the GPU's own limits"
if [ "${SKIP_BENCH:-0}" = 1 ]; then
  say "skipped (SKIP_BENCH=1)"
else
  timeout 180 "$BUILD/bench_cuda" 2>&1 | tee -a "$LOG" || say "bench_cuda failed or ran out of time"
fi

say ""
say "gpu-check done in $(( $(date +%s) - START )) s; log: $LOG"
exit $FAILED
