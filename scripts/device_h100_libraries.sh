#!/usr/bin/env bash
# One device visit re-recording the real FlashAttention-3 libraries on the GPU at hand (written
# for the H100 of this workplace's device tool), to set beside the H200's recordings
# (scripts/h100_library_compare.py): fa3-fwd 0.0.3's case matrix and API calls (carried as
# .fa3/: its Python files and _C.abi3.so.xz), flash-attn3-jax 0.2.3's backward matrix (.fa3bwd/:
# the unpacked package and flash_api.so.xz), and dew-flash-attn's GQA backward cases with every
# run's dK / dV in full (.dew/). Results under $OUT (elsewhere out/h100_libraries/): at most 8
# files. Usage: bash scripts/device_h100_libraries.sh
set -u -o pipefail
: "${OUT:=out/h100_libraries}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
site=$(mktemp -d)
res=$(mktemp -d)
start=$(date +%s)
{
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  mkdir -p "$site/fa3_fwd" "$site/lib"
  xz -T4 -dc .fa3/_C.abi3.so.xz > "$site/fa3_fwd/_C.abi3.so" &
  cp -r .fa3/fa3_fwd_interface.py .fa3/fa3_fwd_config.py .fa3/fa3_fwd-0.0.3.dist-info "$site/"
  cp -r .fa3bwd/site/. "$site/"
  xz -T4 -dc .fa3bwd/flash_api.so.xz > "$site/flash_attn3_jax_lib/flash_api.cpython-312-x86_64-linux-gnu.so" &
  xz -dc .dew/libdew_flash_attn3.so.xz > "$site/lib/libdew_flash_attn3.so"
  wait
  cu13=$(python3 -c "import glob,os,site
for d in site.getsitepackages():
    for p in glob.glob(os.path.join(d,'nvidia','**','libcudart.so.13*'),recursive=True): print(os.path.dirname(p)); raise SystemExit")
  export PYTHONPATH="$PWD:$site${PYTHONPATH:+:$PYTHONPATH}"
  LD_LIBRARY_PATH="$site/lib:$cu13" DEW_FA3_LIB="$site/lib/libdew_flash_attn3.so" timeout -k 5 120 \
    python3 -m simulator measure dew_fa3_record --out "$res/dew" --only-gqa
  echo "dew exit $? at $(( $(date +%s) - start )) s"
  timeout -k 5 150 python3 -m simulator measure fa3_library_record --out "$res/library"
  echo "fa3_library_record exit $? at $(( $(date +%s) - start )) s"
  timeout -k 5 90 python3 -m simulator measure fa3_library_record --out "$res/api" --api
  echo "fa3_library_record --api exit $? at $(( $(date +%s) - start )) s"
  left=$(( 540 - ($(date +%s) - start) ))
  (( left > 60 )) && timeout -k 5 "$left" python3 -m simulator measure fa3_backward_record \
    --out "$res/backward" --drawn 0 --time-limit $(( left - 40 ))
  echo "fa3_backward_record exit $? at $(( $(date +%s) - start )) s"
} 2>&1 | tee "$res/session.log"
cp "$res/dew/dew_fa3_gqa.npz" "$OUT/" 2>/dev/null
(cd "$res" && tar -czf "$OUT/reports.tar.gz" session.log $(find dew library api backward -name '*.json' 2>/dev/null))
(cd "$res" && tar -czf "$OUT/arrays.tar.gz" $(find library api backward -name '*.npz' 2>/dev/null))
ls -la "$OUT"
