#!/usr/bin/env bash
# FlashAttention-4's sm90 kernels compiled here (no GPU needed) into PTX, cubin and SASS:
# flash-attn-4 4.0.0b36 with nvidia-cutlass-dsl 4.8.1 (its CUDA 13 compiler wheel), the same
# builds the device recordings ran (simulator/data/device/fa4/, provenance "versions"). The
# SASS is read with the cuobjdump that triton's wheel carries. Output: out/fa4_ptx/<variant>/
# (*.ptx, *.cubin, *.sass). Usage: bash scripts/fa4_ptx.sh [VARIANT ...], a variant being
# "fwd HEAD_DIM [causal] [softcap] [sink] [f16]" or "bwd HEAD_DIM [causal] [softcap] [sink] [f16]" (quoted);
# by default the forward at 128 (plain, softcap, sink) and the backward at 64, 96, 128, 192, 256.
set -euo pipefail
cd "$(dirname "$0")/.."
py=$(command -v python3)
venv=out/fa4_env
ver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv --system-site-packages "$venv"
  "$venv/bin/pip" install -q --no-deps --only-binary=:all: flash-attn-4==4.0.0b36 \
    nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1 \
    nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1 \
    quack-kernels==0.6.5 apache-tvm-ffi==0.1.15.post2 torch-c-dlpack-ext==0.1.5 \
    cuda-bindings==13.5.0 cuda-pathfinder einops protobuf typing_extensions triton
  # the CPU torch wheel .ci/run installs (a plain `torch` would fetch a CUDA build)
  "$venv/bin/python" -c "import torch" 2>/dev/null || "$venv/bin/pip" install -q torch==2.13.0
fi
echo "python $ver, venv $venv"
variants=("$@")
if [ ${#variants[@]} -eq 0 ]; then
  variants=("fwd 128" "fwd 128 softcap" "fwd 128 sink" "bwd 64" "bwd 96" "bwd 96 f16" "bwd 128"
            "bwd 192" "bwd 256")
fi
cuobjdump=$("$venv/bin/python" -c 'import triton, os; print(os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump"))')
for v in "${variants[@]}"; do
  dir="out/fa4_ptx/${v// /_}"
  rm -rf "$dir" && mkdir -p "$dir"
  FLASH_ATTENTION_ARCH=90 CUTE_DSL_ARCH=sm_90a FLASH_ATTENTION_NUM_SMS=132 \
    CUTE_DSL_KEEP=ptx,cubin CUTE_DSL_DUMP_DIR="$dir" \
    "$venv/bin/python" scripts/fa4_compile.py $v > "$dir/compile.log" 2>&1 || true
  for c in "$dir"/*.cubin; do [ -f "$c" ] && "$cuobjdump" -sass "$c" > "${c%.cubin}.sass"; done
  echo "$v: $(ls "$dir"/*.ptx 2>/dev/null | wc -l) kernels -> $dir"
done
