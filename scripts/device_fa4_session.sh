#!/usr/bin/env bash
# FlashAttention-4 (PyPI flash-attn-4 4.0.0b36, flash_attn.cute) on the device's sm_90 GPU, in
# two calls while the machine is held: its CuTe DSL compiler wheel (nvidia-cutlass-dsl-libs-cu13
# 4.8.1, 92 MB; its unpacked tree as `tar | xz -9` is 63.6 MB) and the working tree do not fit
# the 64 MiB that one call carries.
#
# Here (network), once:   bash scripts/device_fa4_session.sh prepare
#   downloads the wheels (cp312, manylinux) into /tmp/fa4whl, packs the cu13 tree as one xz
#   stream and splits it: .fa4a/ (first 50 MB) and .fa4b/ (the rest + the small wheels:
#   flash-attn-4, quack-kernels 0.6.5, nvidia-cutlass-dsl 4.8.1 + -libs-base + -libs-core,
#   apache-tvm-ffi 0.1.15.post2, torch-c-dlpack-ext 0.1.5, cuda-bindings 13.5.0). Both folders
#   are ignored (.git/info/exclude); simulator/data/device/ is moved out of the tree for the
#   calls (the recorders never read it).
# Device call 1 (carry .fa4a):  bash scripts/device_fa4_session.sh stage1
#   keeps the first part in /tmp/fa4parts (the machine's /tmp stays while it is held).
# Device call 2 (carry .fa4b):  bash scripts/device_fa4_session.sh record [DRAWN] [DRAWN_BWD] [ARGS]
#   (ARGS pass on to fa4_record, e.g. --no-chosen --drawn-from 737 for a drawn-only visit)
#   unpacks the tree, installs the wheels into a private folder on PYTHONPATH and runs
#   `python -m simulator measure fa4_record` (8 workers); results under $OUT (at most 8 files).
set -u -o pipefail
stage=${1:?usage: device_fa4_session.sh prepare|stage1|record [DRAWN] [DRAWN_BWD]}
: "${OUT:=out/device_fa4}"
whl=/tmp/fa4whl

prepare() {
  mkdir -p "$whl" .fa4a .fa4b
  grep -qx '/.fa4a/' .git/info/exclude || echo '/.fa4a/' >> .git/info/exclude
  grep -qx '/.fa4b/' .git/info/exclude || echo '/.fa4b/' >> .git/info/exclude
  for p in flash-attn-4==4.0.0b36 nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1 \
      nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1 \
      quack-kernels==0.6.5 apache-tvm-ffi==0.1.15.post2 torch-c-dlpack-ext==0.1.5 \
      cuda-bindings==13.5.0; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$whl" "$p"
  done
  tree=$(mktemp -d)
  (cd "$tree" && unzip -q "$whl"/nvidia_cutlass_dsl_libs_cu13-4.8.1-*.whl)
  (cd "$tree" && tar cf - .) | xz -9 -T4 > "$whl/cu13.tar.xz"
  rm -rf "$tree" .fa4a/* .fa4b/*
  (cd .fa4a && split -b 50000000 -d "$whl/cu13.tar.xz" cu13.tar.xz.part)
  mv .fa4a/cu13.tar.xz.part0[1-9] .fa4b/
  for w in "$whl"/*.whl; do
    case "$w" in *libs_cu13*) ;; *) cp "$w" .fa4b/ ;; esac
  done
  du -sh .fa4a .fa4b
}

stage1() {
  mkdir -p /tmp/fa4parts && cp .fa4a/* /tmp/fa4parts/ && ls -la /tmp/fa4parts
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
}

record() {
  local drawn=${1:-0} drawn_bwd=${2:-0} site res=/tmp/fa4res
  shift 2 2>/dev/null || true
  site=$(mktemp -d /tmp/fa4site.XXXX)
  mkdir -p "$OUT" "$res"
  cp .fa4b/cu13.tar.xz.part* /tmp/fa4parts/
  [ -f /tmp/fa4parts/cu13.tar.xz.part00 ] || { echo "no first part: run stage1 first"; exit 2; }
  wheels=$(ls .fa4b/*.whl | grep -v cuda_bindings)
  if ! python3 -c "import cuda.bindings" 2>/dev/null; then wheels="$wheels $(ls .fa4b/cuda_bindings*.whl)"; fi
  # the small wheels first, in one pip call (pip --target skips a top-level folder that exists,
  # and three of them share nvidia_cutlass_dsl/), then the cu13 tree merged in by tar
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" $wheels || exit 4
  cat /tmp/fa4parts/cu13.tar.xz.part* | xz -T8 -dc | tar xf - -C "$site" || exit 3
  # pip --target runs no .pth file: the one nvidia-cutlass-dsl installs adds dsl_packages/
  export PYTHONPATH="$PWD:$site:$site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}"
  export PYTHONUNBUFFERED=1
  python3 -c "import flash_attn.cute, cutlass; print('flash_attn.cute', flash_attn.cute.__file__)" || exit 5
  timeout -k 10 "${FA4_LIMIT_S:-500}" python3 -m simulator measure fa4_record --out "$res" \
    --workers "${FA4_WORKERS:-8}" --drawn "$drawn" --drawn-backward "$drawn_bwd" \
    --time-limit "$(( ${FA4_LIMIT_S:-500} - 60 ))" "$@" 2>&1 | tee "$res/session.log"
  for f in fa4_report.json fa4_forward.npz fa4_backward.npz fa4_ptx.tar.xz; do
    [ -f "$res/$f" ] && cp "$res/$f" "$OUT/"
  done
  (cd "$res" && tar -czf "$OUT/logs.tar.gz" session.log fa4_ptx.json worker*.log 2>/dev/null)
  ls -la "$OUT"
}

"$stage" "${@:2}"
