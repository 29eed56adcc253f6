#!/usr/bin/env bash
# One device visit against the real FlashAttention-3 library, from the repository root on an
# H200 host with torch (written for this workplace's device tool: $OUT, at most 8 files back;
# elsewhere the results go to out/device_fa3_session/). The library travels as .fa3/ (the
# fa3-fwd 0.0.3 wheel's two .py files, dist-info and _C.abi3.so compressed with xz -9) and is
# unpacked into a private site folder; with the wheel installed it is used as it is.
#
# Usage: bash scripts/device_fa3_session.sh STAGE
#   record   the library and the twin on the case matrix and the embedded input; the twin's
#            goldens, step traces and regression cases; the database replay (seed DB .fa3/seed_db)
#   library  a deep hypothesis replay against the library (CASES, TIME_LIMIT_S from the env)
#   twin     a deep hypothesis replay against the twin kernel (CASES, TIME_LIMIT_S)
set -u -o pipefail
: "${OUT:=out/device_fa3_session}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
stage=${1:?stage: record, library or twin}
cases=${CASES:-20000}; limit=${TIME_LIMIT_S:-420}; seed=${SEED:-0}
if ! python3 -c "import fa3_fwd_interface" 2>/dev/null; then
  site=$(mktemp -d)
  mkdir -p "$site/fa3_fwd"
  xz -dc .fa3/_C.abi3.so.xz > "$site/fa3_fwd/_C.abi3.so" || exit 2
  cp -r .fa3/fa3_fwd_interface.py .fa3/fa3_fwd_config.py .fa3/fa3_fwd-0.0.3.dist-info "$site/"
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
res=$(mktemp -d)
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  nproc
  case "$stage" in
    record)
      python3 -m simulator measure fa3_library_record --out "$res/library" --twin
      python3 -m simulator measure forward_goldens --out "$res/goldens"
      python3 -m simulator measure forward_trace --out "$res/traces"
      python3 -m simulator measure regressions --out "$res/regressions"
      cp -r .fa3/seed_db "$res/db"
      python3 -m simulator measure hypothesis_replay --out "$res/database" --database "$res/db" --cases 300
      ;;
    library|twin)
      python3 -m simulator measure hypothesis_replay --out "$res/deep_$stage" --cases "$cases" \
          --workers $(( $(nproc) - 1 )) --seed "$seed" --time-limit "$limit" --target "$stage"
      echo "replay exit code $?"
      ;;
    *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
} 2>&1 | tee "$OUT/session.log"
tar -C "$res" -cf "$OUT/results.tar" .
ls -la "$res"/*
