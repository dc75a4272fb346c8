#!/usr/bin/env bash
# Run the suite as the slowest CPU it may meet would: oneDNN and ATen capped at AVX2 (no
# AVX-512, no native bf16, so `auto` means fp32), every process pinned to one core with one
# torch thread, and with HOG=1 a busy loop on that same core (a neighbour taking half of it).
# A test that asserts a choice made from measured time, or a deadline too tight for such a
# machine, fails here before it fails on somebody's CI (README, "Tests").
#   bash tests/slow_cpu.sh [pytest arguments]      e.g. HOG=1 bash tests/slow_cpu.sh tests/gateway
set -euo pipefail
cd "$(dirname "$0")/.."
CORE=${CORE:-0}
export ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HEDGESPEC_TORCH_THREADS=1
# A cache of its own: kernels torch.compile builds under the AVX2 cap, loaded later by a run
# without it, aborted that run (tests/core/model/test_compile.py, seen 2026-12-05).
export TORCHINDUCTOR_CACHE_DIR="${TMPDIR:-/tmp}/hedgespec-slow-cpu-inductor"
if [[ "${HOG:-0}" == 1 ]]; then
  taskset -c "$CORE" python3 -c 'while True: pass' &
  hog=$!
  trap 'kill "$hog"' EXIT
fi
taskset -c "$CORE" .venv/bin/python -m pytest -q --durations=25 "$@"
