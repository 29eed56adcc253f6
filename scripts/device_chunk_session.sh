#!/usr/bin/env bash
# One device visit recording the real FlashAttention-3 forward with attention_chunk
# (flash-attn3-jax 0.2.3's FFI; simulator.measure.fa3_chunk_record), from the repository root
# on an H200 host with jax (this workplace's device tool: $OUT; elsewhere out/device_chunk/).
# The wheel travels unpacked in .fa3bwd/site with its extension compressed (xz -9):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 flash-attn3-jax==0.2.3
#   unzip the wheel into .fa3bwd/site; xz -9 .fa3bwd/site/flash_attn3_jax_lib/*.so
set -u -o pipefail
: "${OUT:=out/device_chunk}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
site=$(mktemp -d)
cp -r .fa3bwd/site/. "$site/"
xz -d "$site"/flash_attn3_jax_lib/*.so.xz || exit 2
export PYTHONPATH="$site:$PWD"
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -m simulator measure fa3_chunk_record --out "$OUT"
} 2>&1 | tee "$OUT/session.log"
ls -la "$OUT"
