#!/usr/bin/env bash
# One device visit recording two JAX-packaged FlashAttention builds on the GPU at hand:
# flash-attn 2.x's kernels as PyPI flash-attn-jax 0.6.2 builds them (sm_80 PTX, JIT-compiled
# by the driver; carried as .fa2jax/: the package's Python files, flash_api.so.xz, the CUDA 12
# runtime it links) and FlashAttention-3 as dew-flash-attn-cu13 0.3.6 builds it (carried as
# .dew/libdew_flash_attn3.so.xz). Results under $OUT (elsewhere out/device_fa2_jax/): at most
# 8 files: the npz recordings and logs.tar.gz (reports, session and worker logs).
# Usage: bash scripts/device_fa2_jax_session.sh [RUNS (default dew,fa2)] [WORKERS (default 15)]
# With DEW_DRAWN=N / FA2_DRAWN=N in the environment, the runs record N drawn calls instead
# (digests; *_drawn_* files).
set -u -o pipefail
: "${OUT:=out/device_fa2_jax}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export CUDA_CACHE_MAXSIZE=4294967296
runs=${1:-dew,fa2}
workers=${2:-15}
site=$(mktemp -d)
res=$(mktemp -d)
start=$(date +%s)
{
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  nproc
  cp -r .fa2jax/flash_attn_jax "$site/"
  mkdir -p "$site/flash_attn_jax_lib" "$site/lib"
  xz -T4 -dc .fa2jax/flash_api.so.xz > "$site/flash_attn_jax_lib/flash_api.cpython-312-x86_64-linux-gnu.so"
  cp .fa2jax/libcudart.so.12 "$site/lib/" && ln -s libcudart.so.12 "$site/lib/libcudart.so"
  xz -dc .dew/libdew_flash_attn3.so.xz > "$site/lib/libdew_flash_attn3.so"
  cu13=$(python3 - <<'PY'
import glob, os, site
for d in site.getsitepackages():
    for p in glob.glob(os.path.join(d, "nvidia", "**", "libcudart.so.13*"), recursive=True):
        print(os.path.dirname(p)); raise SystemExit
PY
)
  echo "cuda 13 runtime: $cu13"
  export LD_LIBRARY_PATH="$site/lib${cu13:+:$cu13}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PYTHONPATH="$PWD:$site${PYTHONPATH:+:$PYTHONPATH}"
  export DEW_FA3_LIB="$site/lib/libdew_flash_attn3.so"
  if [[ ",$runs," == *",dew,"* ]]; then
    timeout -k 5 ${DEW_LIMIT_S:-240} python3 -m simulator measure dew_fa3_record --out "$res/dew" \
      --budget-s $(( ${DEW_LIMIT_S:-240} - 40 )) ${DEW_DRAWN:+--drawn $DEW_DRAWN}
    echo "dew exit $? at $(( $(date +%s) - start )) s"
  fi
  if [[ ",$runs," == *",fa2,"* ]]; then
    timeout -k 5 ${FA2_LIMIT_S:-420} python3 -m simulator measure fa2_jax_record --out "$res/fa2" \
      --workers "$workers" ${FA2_DRAWN:+--drawn $FA2_DRAWN}
    echo "fa2 exit $? at $(( $(date +%s) - start )) s"
  fi
} 2>&1 | tee "$res/session.log"
for f in "$res"/dew/*.npz "$res"/fa2/fa2_jax_*.npz; do [ -f "$f" ] && cp "$f" "$OUT/"; done
(cd "$res" && tar -czf "$OUT/logs.tar.gz" session.log $(ls dew/*.json fa2/*.json fa2/*.log 2>/dev/null))
ls -la "$OUT"
