#!/usr/bin/env bash
# One device visit measuring FlashAttention-3's exp2f(x * scale_log2 - max_scaled) against expf
# and __expf (simulator.measure.exp2_throughput; probe kernels/probes/exp2_throughput.cu), from
# the repository root on an H200 host with CuPy (this workplace's device tool: $OUT; elsewhere
# out/device_exp2_session/). Runs in well under 3 minutes: NVRTC compiles of one small probe,
# 2^26 elements x 128 exponentials per kernel, 7 timed runs of 6 kernels, the one-element
# kernels on 2^20 inputs against the emulator. Writes $OUT/exp2_throughput.json (commit it as
# simulator/data/device/exp2_throughput.json, then python scripts/make_manifest.py), and, where
# nvcc and cuobjdump are on PATH, $OUT/exp2_sass.json (the device toolkit's SASS counts, to set
# beside simulator/data/sass/exp2_sass.json), and $OUT/session.log.
# Usage: bash scripts/device_exp2_session.sh [exp2_throughput options, e.g. --reps 256]
set -u -o pipefail
: "${OUT:=out/device_exp2_session}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
rc_file=$(mktemp)
echo 1 > "$rc_file"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  timeout 150 python3 -m simulator measure exp2_throughput --out "$OUT" "$@"
  rc=$?
  echo "$rc" > "$rc_file"
  echo "exp2_throughput exit code $rc"
  if command -v nvcc >/dev/null && command -v cuobjdump >/dev/null; then
    timeout 20 python3 -m simulator measure exp2_throughput --sass --out "$OUT" \
      || echo "exp2_throughput --sass failed (the GPU result above stands)"
  fi
} 2>&1 | tee "$OUT/session.log"
ls -la "$OUT"
exit "$(cat "$rc_file")"
