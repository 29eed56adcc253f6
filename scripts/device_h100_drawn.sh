#!/usr/bin/env bash
# One device visit with drawn calls on the GPU at hand (written for the H100): simulator.fa3
# against the real FA3 library (fa3-fwd 0.0.3, .fa3/) on hypothesis-drawn API calls, live, the
# emulator beside the library (python -m simulator measure fa3_api_replay), and the real FA3
# backward (flash-attn3-jax 0.2.3, .fa3bwd/) re-recorded on the H200's drawn backward cases
# (.h100cases/fa3_backward_hyp_cases.json, a copy of simulator/data/device/'s) for a digest
# comparison. Results under $OUT (elsewhere out/h100_drawn/).
# Usage: bash scripts/device_h100_drawn.sh [API_CASES (default 1500)] [SEED (default 11)]
set -u -o pipefail
: "${OUT:=out/h100_drawn}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
cases=${1:-1500}
seed=${2:-11}
site=$(mktemp -d)
res=$(mktemp -d)
start=$(date +%s)
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  mkdir -p "$site/fa3_fwd"
  xz -T4 -dc .fa3/_C.abi3.so.xz > "$site/fa3_fwd/_C.abi3.so" &
  cp -r .fa3/fa3_fwd_interface.py .fa3/fa3_fwd_config.py .fa3/fa3_fwd-0.0.3.dist-info "$site/"
  cp -r .fa3bwd/site/. "$site/"
  xz -T4 -dc .fa3bwd/flash_api.so.xz > "$site/flash_attn3_jax_lib/flash_api.cpython-312-x86_64-linux-gnu.so" &
  wait
  export PYTHONPATH="$PWD:$site${PYTHONPATH:+:$PYTHONPATH}"
  SIMULATOR_ENGINE=numpy timeout -k 5 230 python3 -m simulator measure fa3_api_replay \
    --out "$res/api" --cases "$cases" --seed "$seed" --workers 15 --time-limit 200
  echo "fa3_api_replay exit $? at $(( $(date +%s) - start )) s"
  timeout -k 5 200 python3 -m simulator measure fa3_backward_record --out "$res/backward" \
    --hyp .h100cases/fa3_backward_hyp_cases.json --jobs 8
  echo "fa3_backward_record --hyp exit $? at $(( $(date +%s) - start )) s"
} 2>&1 | tee "$res/session.log"
(cd "$res" && tar -czf "$OUT/reports.tar.gz" session.log $(find api backward -name '*.json' 2>/dev/null))
ls -la "$OUT"
