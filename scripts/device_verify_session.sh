#!/usr/bin/env bash
# Replays every recording in simulator/data/device/ (python -m simulator verify, every topic,
# no --quick) through the compiled engine (SIMULATOR_ENGINE=numba) on a many-core host: the
# topics run side by side as separate processes, the backward's and the paged cache's calls
# over worker processes. No GPU is used; this workplace runs it on the H200 host for its
# 16 CPU cores ($OUT; elsewhere out/device_verify/). Each topic writes verify_<topic>.json
# (the rows of `verify --json`) and verify_<topic>.log; a topic cut by the time limit says so
# in its log and has no JSON. At the end verify_summary.json gathers them (rows, exit status,
# wall time, peak RSS) and replaces the per-topic files.
#   bash scripts/device_verify_session.sh [LIMIT_S]
set -u -o pipefail
: "${OUT:=out/device_verify}"
limit=${1:-540}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 SIMULATOR_ENGINE=numba NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1 \
       OPENBLAS_NUM_THREADS=1 PYTHONPATH="$PWD"
nproc; python3 -c "import numba, numpy; print('numba', numba.__version__, 'numpy', numpy.__version__)"
# compile the engine's kernels once (numba's on-disk cache), so the topics load them
start=$(date +%s)
python3 - <<'PY'
import ml_dtypes
import numpy as np
from simulator.flash import forward
rng = np.random.default_rng(0)
x = rng.standard_normal((3, 1, 256, 1, 128)).astype(np.float32)
for dt in (ml_dtypes.bfloat16, np.float16, ml_dtypes.float8_e4m3fn):
    q, k, v = x.astype(dt)
    forward(q, k, v)
print("engine warm")
PY
echo "warm-up $(( $(date +%s) - start )) s"
for t in numerics mufu hw mma forward fa3 ext paged backward; do
  w=1; case $t in backward) w=6;; paged) w=2;; esac
  ( /usr/bin/time -v timeout "$limit" python3 -m simulator verify --topic "$t" --json --workers "$w" \
      > "$OUT/verify_$t.json.part" 2> "$OUT/verify_$t.log"; rc=$?
    echo "rc $rc" >> "$OUT/verify_$t.log"
    [ "$rc" = 0 ] || [ "$rc" = 1 ] && mv "$OUT/verify_$t.json.part" "$OUT/verify_$t.json" ) &
done
wait
echo "total $(( $(date +%s) - start )) s"
for t in "$OUT"/verify_*.log; do echo "== $t"; grep -E "^rc|Elapsed|Maximum resident" "$t"; done
# one file back (the device tool returns few files): every topic's rows, exit status, time, peak RSS
python3 - "$OUT" <<'PY'
import glob, json, os, re, sys
out = sys.argv[1]
summary = {}
for log in sorted(glob.glob(os.path.join(out, "verify_*.log"))):
    topic = os.path.basename(log)[len("verify_"):-len(".log")]
    text = open(log).read()
    rc = re.search(r"^rc (\d+)", text, re.M)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    path = os.path.join(out, f"verify_{topic}.json")
    summary[topic] = {"rc": int(rc.group(1)) if rc else None, "wall": wall and wall.group(1),
                      "peak_rss_kb": int(rss.group(1)) if rss else None,
                      "rows": json.load(open(path)) if os.path.exists(path) else None}
tmp = os.path.join(out, "verify_summary.json.part")
with open(tmp, "w") as f:
    json.dump(summary, f, indent=1)
os.replace(tmp, os.path.join(out, "verify_summary.json"))
PY
rm -f "$OUT"/verify_*.json.part
# the summary holds every row: keep it alone (the device tool returns a few files)
[ -s "$OUT/verify_summary.json" ] && rm -f "$OUT"/verify_[!s]*.json "$OUT"/verify_*.log
