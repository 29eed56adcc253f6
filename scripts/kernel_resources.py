"""Compile kernels/fa3_forward.cu for sm_90a with FA3's flags in several configurations and
record the ``-Xptxas -v`` resource report (registers, spills, shared memory) beside the source.

Run after changing the kernel: ``python scripts/kernel_resources.py`` (needs nvcc, no GPU).
Writes ``kernels/fa3_forward.resources.json`` atomically; a test checks it belongs to the
current source (sha256).
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.device import forward as dev  # noqa: E402
from simulator.device import runtime  # noqa: E402
from simulator.io import write_json_atomic  # noqa: E402

CONFIGS = [  # (dtype, head_dim, kblock_m, kblock_n, softcap, schedule)
    ("bf16", 64, 128, 128, False, "intra_wg_overlap"),
    ("bf16", 128, 128, 128, False, "intra_wg_overlap"),
    ("bf16", 128, 128, 128, True, "plain"),
    ("f16", 256, 64, 80, True, "intra_wg_overlap"),
    ("e4m3", 128, 128, 128, False, "intra_wg_overlap"),
    ("e4m3", 128, 192, 160, True, "intra_wg_overlap"),
    ("bf16", 128, 192, 176, False, "plain"),
]


def compile_one(config) -> dict:
    opts = [o for o in dev.kernel_options(*config) if o.startswith("-D")]
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["nvcc", "-gencode=arch=compute_90a,code=sm_90a", "--use_fast_math", "-std=c++17",
               "-Xptxas", "-v", "-c", str(runtime.KERNELS_DIR / dev.KERNEL),
               "-o", str(Path(tmp) / "k.o"), *opts]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode:
        raise SystemExit(f"nvcc failed for {config}:\n{proc.stderr[-4000:]}")
    log = proc.stderr
    regs = re.findall(r"Used (\d+) registers", log)
    spill_st = re.findall(r"(\d+) bytes spill stores", log)
    spill_ld = re.findall(r"(\d+) bytes spill loads", log)
    stack = re.findall(r"(\d+) bytes stack frame", log)
    return {"config": dict(zip(["dtype", "head_dim", "kblock_m", "kblock_n", "softcap", "schedule"],
                               config, strict=True)),
            "registers": int(regs[-1]) if regs else None,
            "spill_store_bytes": int(spill_st[-1]) if spill_st else 0,
            "spill_load_bytes": int(spill_ld[-1]) if spill_ld else 0,
            "stack_frame_bytes": int(stack[-1]) if stack else 0,
            "ptxas": [ln.strip() for ln in log.splitlines() if "ptxas info" in ln][-3:]}


def main() -> int:
    source = runtime.KERNELS_DIR / dev.KERNEL
    rows = []
    for config in CONFIGS:
        row = compile_one(config)
        rows.append(row)
        print(f"{row['config']}: {row['registers']} registers, spills "
              f"{row['spill_store_bytes']}/{row['spill_load_bytes']} B", flush=True)
    out = source.with_suffix(".resources.json")
    nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip()
    write_json_atomic(out, {"kernel": f"kernels/{dev.KERNEL}",
                            "kernel_sha256": hashlib.sha256(source.read_bytes()).hexdigest(),
                            "nvcc": nvcc.splitlines()[-1], "flags": "-gencode=arch=compute_90a,"
                            "code=sm_90a --use_fast_math -std=c++17 -Xptxas -v",
                            "configs": rows})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
