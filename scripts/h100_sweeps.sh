#!/usr/bin/env bash
# One device visit that re-runs the repository's own bit-level measurement runs on whatever GPU
# the host has (written for the H100 of this workplace's device tool, to check that the H200's
# calibration holds there; $OUT, at most 8 files come back; elsewhere out/h100_sweeps/):
#   hw_probe, mma_probe validate, mma_fp8_probe, mma_fp8_sweep (e4m3, e5m2), reduce_add_probe,
#   numerics_sweep (float32 ops, every conversion's 2^32 inputs), and the MUFU calibration
#   (python -m simulator calibrate: the tables re-measured into a scratch folder, never over the
#   shipped ones, then all 2^32 inputs of every form; its digests are compared with the H200's).
# Each run writes under $RES/<run>/ and is cut by `timeout` so the whole visit ends inside
# BUDGET seconds (a run that no longer fits is skipped and says so). Then
# scripts/h100_compare.py sets every recording beside the H200's (simulator/data/device/) and
# prints the summary table last. Back in $OUT: session.log, gpu.json (nvidia-smi, CuPy and
# torch device properties, before and after the runs), compare.json, h100_reports.tar.gz (every
# JSON, log and nvidia-smi -q) and h100_npz.tar.gz (the .npz recordings and re-measured tables).
# Usage: bash scripts/h100_sweeps.sh [BUDGET_S (default 540)] [RUNS, comma-separated (default all)]
set -u -o pipefail
: "${OUT:=out/h100_sweeps}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
budget=${1:-540}
only=${2:-all}
res=${RES:-/tmp/h100_sweeps}
rm -rf "$res"
mkdir -p "$res"
start=$(date +%s)

gpu_info() {  # add nvidia-smi's and the frameworks' view of GPU 0 under key $1 of gpu.json
  timeout 60 python3 - "$res/gpu.json" "$1" <<'PY'
import datetime, json, os, platform, subprocess, sys
path, tag = sys.argv[1], sys.argv[2]
doc = json.load(open(path)) if os.path.exists(path) else {}
fields = ("name,pci.device_id,pci.bus_id,vbios_version,driver_version,memory.total,clocks.sm,"
          "clocks.max.sm,clocks.mem,clocks.max.mem,clocks.applications.graphics,power.draw,"
          "power.limit,power.max_limit,temperature.gpu,persistence_mode,compute_mode,"
          "mig.mode.current,ecc.mode.current,clocks_throttle_reasons.active").split(",")
def smi(args):
    try:
        r = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None
smi_q = {}
for f in fields:
    smi_q[f] = smi([f"--query-gpu={f}", "--format=csv,noheader"])
head = smi([]) or ""
cuda = head.split("CUDA Version:")[1].split()[0] if "CUDA Version:" in head else None
entry = {"date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
         "nvidia_smi": smi_q, "nvidia_smi_cuda_version": cuda}
try:
    import cupy
    p = cupy.cuda.runtime.getDeviceProperties(0)
    entry["cupy"] = {"version": cupy.__version__, "name": p["name"].decode(),
                     "compute_capability": f"{p['major']}.{p['minor']}",
                     "multiprocessors": int(p["multiProcessorCount"]),
                     "total_global_mem": int(p["totalGlobalMem"]),
                     "l2_cache_bytes": int(p["l2CacheSize"]),
                     "clock_rate_khz": int(p.get("clockRate", 0) or 0),
                     "memory_clock_rate_khz": int(p.get("memoryClockRate", 0) or 0),
                     "memory_bus_width": int(p.get("memoryBusWidth", 0) or 0),
                     "cuda_driver_api": cupy.cuda.runtime.driverGetVersion(),
                     "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion()}
except Exception as exc:
    entry["cupy"] = f"{type(exc).__name__}: {exc}"
if tag == "before":
    try:
        import torch
        q = torch.cuda.get_device_properties(0)
        entry["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda,
                          "name": q.name, "multi_processor_count": q.multi_processor_count,
                          "total_memory": q.total_memory,
                          "l2_cache_size": getattr(q, "L2_cache_size", None)}
    except Exception as exc:
        entry["torch"] = f"{type(exc).__name__}: {exc}"
    vers = {}
    for mod in ("numpy", "ml_dtypes", "numba", "hypothesis"):
        try:
            vers[mod] = __import__(mod).__version__
        except Exception as exc:
            vers[mod] = f"{type(exc).__name__}: {exc}"
    entry["host"] = {"python": platform.python_version(), "kernel": platform.release(),
                     "cpus": os.cpu_count(), **vers}
doc[tag] = entry
json.dump(doc, open(path, "w"), indent=1)
print(tag, json.dumps({k: entry["nvidia_smi"].get(k) for k in
                       ("name", "driver_version", "clocks.sm", "clocks.max.sm")}),
      "CUDA", cuda, "SMs", entry["cupy"]["multiprocessors"] if isinstance(entry["cupy"], dict) else "?")
PY
}

step() {  # NAME CAP_S COMMAND...: run COMMAND, at most CAP_S and what is left of the budget
  local name=$1 cap=$2 t t0 rc
  shift 2
  if [ "$only" != all ] && [[ ",$only," != *",$name,"* ]]; then return; fi
  t=$(( budget - ($(date +%s) - start) - 45 ))
  (( t > cap )) && t=$cap
  if (( t < 15 )); then
    echo "$name skipped: ${t} s left of the budget" | tee -a "$res/status.txt"
    return
  fi
  mkdir -p "$res/$name"
  echo "=== $name (limit $t s): $*"
  t0=$(date +%s)
  timeout -k 5 "$t" "$@" 2>&1 | tee "$res/$name/run.log"
  rc=${PIPESTATUS[0]}
  echo "$name exit $rc in $(( $(date +%s) - t0 )) s (limit $t s$( (( rc == 124 || rc == 137 )) && echo ', CUT BY THE LIMIT'))" \
    | tee -a "$res/status.txt"
}

{
  nproc
  gpu_info before
  nvidia-smi -q > "$res/nvidia-smi-q.txt" 2>&1
  step hw_probe 90 python3 -m simulator measure hw_probe --out "$res/hw_probe"
  step mma_probe 150 python3 -m simulator measure mma_probe validate --out "$res/mma_probe"
  step mma_fp8_probe 60 python3 -m simulator measure mma_fp8_probe --out "$res/mma_fp8_probe"
  step mma_fp8_sweep 90 bash -c 'for f in e4m3 e5m2; do
      python3 -m simulator measure mma_fp8_sweep --out "$0" --fmt "$f" || exit; done' "$res/mma_fp8_sweep"
  step reduce_add_probe 60 python3 -m simulator measure reduce_add_probe --out "$res/reduce_add_probe"
  step numerics_sweep 240 python3 -m simulator measure numerics_sweep --out "$res/numerics_sweep"
  step mufu_calibrate 330 python3 -m simulator calibrate --arch sm90 \
      --out "$res/mufu_calibrate/tables" --evidence-out "$res/mufu_calibrate"
  gpu_info after
  timeout 120 python3 scripts/h100_compare.py "$res" --json "$res/compare.json" > "$res/compare.txt" 2>&1
  echo "compare exit $?"
} 2>&1 | tee "$OUT/session.log"

cp "$res/gpu.json" "$OUT/gpu.json" 2>/dev/null
cp "$res/compare.json" "$OUT/compare.json" 2>/dev/null
(cd "$res" && find . -name '*.npz' | sort > /tmp/h100_npz.list
 tar -czf "$OUT/h100_npz.tar.gz" -T /tmp/h100_npz.list
 find . -type f ! -name '*.npz' | sort > /tmp/h100_rest.list
 tar -czf "$OUT/h100_reports.tar.gz" -T /tmp/h100_rest.list)
ls -la "$OUT"
echo "=== elapsed $(( $(date +%s) - start )) s of $budget"
cat "$res/status.txt"
cat "$res/compare.txt"
