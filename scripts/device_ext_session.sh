#!/usr/bin/env bash
# One device visit recording the real FlashAttention-3 library (fa3-fwd 0.0.3) on qv (MLA),
# varlen KV-cache calls and scheduler_metadata (simulator.measure.fa3_ext_record), from the
# repository root on an H200 host with torch (this workplace's device tool: $OUT; elsewhere
# out/device_ext_session/). The wheel travels in .fa3fwd/ (its two .py files and dist-info,
# _C.abi3.so compressed with xz -9). The drawn calls come from the committed plan
# simulator/data/device/fa3_ext_drawn_plan.json.gz (written here, gzipped, by `python -m
# simulator measure fa3_ext_record --out . --draw 2000 --seed 1 --write-plan FILE`: the device
# has no hypothesis); PLAN=FILE runs another.
set -u -o pipefail
: "${OUT:=out/device_ext_session}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
site=$(mktemp -d)
mkdir -p "$site/fa3_fwd"
xz -dc .fa3fwd/_C.abi3.so.xz > "$site/fa3_fwd/_C.abi3.so" || exit 2
cp -r .fa3fwd/fa3_fwd_interface.py .fa3fwd/fa3_fwd_config.py .fa3fwd/fa3_fwd-0.0.3.dist-info "$site/"
export PYTHONPATH="$site:$PWD"
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import numba" 2>/dev/null && echo "numba present" || echo "numba absent: NumPy engine"
  python3 -m simulator measure fa3_ext_record --out "$OUT"
  python3 -m simulator measure fa3_ext_record --out "$OUT" \
      --plan "${PLAN:-simulator/data/device/fa3_ext_drawn_plan.json.gz}" \
      --workers $(( $(nproc) - 1 )) --time-limit "${TIME_LIMIT_S:-360}"
  echo "drawn exit code $?"
  python3 - <<'PY'
# does this build compute attention_chunk? (FLASHATTENTION_DISABLE_LOCAL is set in fa3-fwd)
import torch, fa3_fwd_interface as lib
q = torch.randn(1, 256, 2, 64, dtype=torch.bfloat16, device="cuda")
try:
    lib.flash_attn_func(q, q, q, attention_chunk=64)
    print("attention_chunk: accepted")
except Exception as exc:
    print("attention_chunk:", type(exc).__name__, str(exc).splitlines()[0][:200])
PY
} 2>&1 | tee "$OUT/session.log"
ls -la "$OUT"
