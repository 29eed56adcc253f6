"""Compile the softcap backward's arithmetic (``kernels/probes/softcap_bwd.cu``) with
FA3's flags and record the SASS float instructions nvcc makes of it.

Needs nvcc and cuobjdump (the device machine has both; no GPU is used)::

    python -m simulator measure softcap_sass --out OUTDIR

Writes ``softcap_sass.json`` atomically: the nvcc version, the flags, the probe's SHA-256 and
the FFMA / FMUL / FADD / MUFU lines of the SASS in order. It answers whether ``1.f - t * t``
(``calculate_dtanh``) becomes one FFMA (-t * t + 1, one rounding) or an FMUL and an FADD.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import tempfile
from pathlib import Path

from ..device.runtime import KERNELS_DIR
from ..io import write_json_atomic
from .common import out_parser

PROBE = KERNELS_DIR / "probes" / "softcap_bwd.cu"
#: hopper/setup.py's device flags that change arithmetic (-O3, --use_fast_math), for sm_90a
FLAGS = ["-O3", "--use_fast_math", "-gencode=arch=compute_90a,code=sm_90a", "-cubin"]
_FLOAT_OPS = re.compile(r"\b(FFMA|FMUL|FADD|MUFU)\S*\s+[^;]*;")


def float_instructions(sass: str) -> list[str]:
    """The float instructions of a SASS listing, in order, without addresses and encodings."""
    return [m.group(0) for line in sass.splitlines() for m in [_FLOAT_OPS.search(line)] if m]


def main(argv=None) -> int:
    args = out_parser("softcap_sass", __doc__.splitlines()[0]).parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "probe.cubin"
        subprocess.run(["nvcc", *FLAGS, "-o", str(cubin), str(PROBE)], check=True)
        sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], check=True,
                              capture_output=True, text=True).stdout
    version = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout
    ops = float_instructions(sass)
    report = {"nvcc": version.strip().splitlines()[-1], "flags": FLAGS,
              "probe_sha256": hashlib.sha256(PROBE.read_bytes()).hexdigest(),
              "instructions": ops,
              "dtanh_is_one_ffma": any(re.match(r"FFMA\S* R\d+, -R\d+, R\d+, 1", o) for o in ops)}
    write_json_atomic(f"{args.out}/softcap_sass.json", report)
    print("\n".join(ops))
    print(f"dtanh as one FFMA: {report['dtanh_is_one_ffma']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
