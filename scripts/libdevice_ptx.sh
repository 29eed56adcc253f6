#!/usr/bin/env bash
# The PTX nvcc inlines for CUDA's accurate logf / expf on sm_90 (no --use_fast_math): the
# sequences simulator/numerics/libdevice.py follows step by step. Needs nvcc (no GPU).
set -euo pipefail
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/m.cu" <<'CU'
extern "C" __global__ void k_log(const float* a, float* o) { o[threadIdx.x] = logf(a[threadIdx.x]); }
extern "C" __global__ void k_exp(const float* a, float* o) { o[threadIdx.x] = expf(a[threadIdx.x]); }
CU
nvcc --version | tail -n 2
nvcc -ptx -arch=sm_90 "$dir/m.cu" -o "$dir/m.ptx"
grep -vE '^\s*//|^\s*$' "$dir/m.ptx"
