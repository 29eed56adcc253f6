#!/usr/bin/env bash
# One device visit recording the real FlashAttention-3 backward (flash-attn3-jax 0.2.3), from
# the repository root on an H200 host with jax (written for this workplace's device tool: $OUT;
# elsewhere the results go to out/device_bwd_session/). The wheel travels in .fa3bwd/ and is
# installed into a private site folder (jax, einops and ml_dtypes are the host's own).
# With PYTHONPATH already naming a folder that imports flash_attn3_jax (the wheel unpacked, e.g.
# .fa3bwd/site with its extension carried xz-compressed and unpacked first), nothing is installed.
#
# Usage: bash scripts/device_bwd_session.sh [recorder options, e.g. --time-limit 300]
set -u -o pipefail
: "${OUT:=out/device_bwd_session}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
if ! python3 -c "import flash_attn3_jax" 2>/dev/null; then
  site=$(mktemp -d)
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .fa3bwd/flash_attn3_jax-0.2.3-*.whl || exit 2
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -m simulator measure fa3_backward_record --out "$OUT" "$@"
} 2>&1 | tee "$OUT/session.log"
ls -la "$OUT"
