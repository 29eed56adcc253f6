#!/usr/bin/env bash
# One device visit, from the repository root on a machine with a GPU (written for this
# workplace's device tool, which sets $OUT and returns at most 8 files; elsewhere the results
# go to out/device_session/): with "sweep", the FP8 mma.sync sweep for both formats; then a
# time-limited deep hypothesis replay. Results are bundled into $OUT/results.tar and the log
# into $OUT/session.log. Uses the python3 on PATH (numpy, ml_dtypes, hypothesis, cupy).
# Usage: bash scripts/device_session.sh SEED CASES TIME_LIMIT_S [sweep]
set -u -o pipefail
: "${OUT:=out/device_session}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
seed=${1:-0}; cases=${2:-50000}; limit=${3:-420}; sweep=${4:-}
res=$(mktemp -d)
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import cupy, hypothesis, numpy, ml_dtypes; print('cupy', cupy.__version__, 'hypothesis', hypothesis.__version__, 'numpy', numpy.__version__, 'ml_dtypes', ml_dtypes.__version__)"
  nproc
  if [ -n "$sweep" ]; then
    for fmt in e4m3 e5m2; do python3 -m simulator measure mma_fp8_sweep --out "$res/sweep" --fmt $fmt; done
  fi
  python3 -m simulator measure hypothesis_replay --out "$res/deep_$seed" --cases "$cases" \
      --workers $(( $(nproc) - 1 )) --seed "$seed" --time-limit "$limit"
  echo "replay exit code $?"
} 2>&1 | tee "$OUT/session.log"
tar -C "$res" -cf "$OUT/results.tar" .
ls -la "$res"/*
