"""Record the real FlashAttention-3 forward with ``attention_chunk`` (flash-attn3-jax 0.2.3, its
FFI target called directly: the wheel's glue passes 0) on the H200.

    PYTHONUNBUFFERED=1 python3 -m simulator measure fa3_chunk_record --out OUTDIR

For every case of :func:`simulator.replay.chunk_cases.cases` the inputs are regenerated and the
library runs once. Written atomically to OUTDIR: ``fa3_chunk_report.json`` (provenance; per case
the case and BLAKE2b-128 digests of the out and softmax_lse bits, or the library's error) and
``fa3_chunk_sample.npz`` (full bits of the cases of at most ``SAMPLE_LIMIT`` output values).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ..device import fa3_jax
from ..io import save_npz_atomic, write_json_atomic
from ..replay import chunk_cases
from ..replay.common import digest
from .common import out_parser
from .fa3_paged_record import bits

REPORT_FILE = "fa3_chunk_report.json"
SAMPLE_FILE = "fa3_chunk_sample.npz"
SAMPLE_LIMIT = 40_000


def record(out_dir: Path) -> dict:
    entries, sample, t0 = [], {}, time.time()
    for i, case in enumerate(chunk_cases.cases()):
        a = chunk_cases.call_args(case)
        extra = {k: a[k] for k in ("cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k")
                 if k in a}
        entry = {"case": case}
        try:
            out, lse = fa3_jax.forward(a["q"], a["k"], a["v"], causal=a["causal"],
                                       window=a["window"], attention_chunk=a["attention_chunk"],
                                       **extra)
        except Exception as exc:  # noqa: BLE001 - the library's refusal, recorded
            entry["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
            entries.append(entry)
            continue
        entry.update(out=digest(bits(out)).hex(), lse=digest(bits(lse)).hex())
        if out.size <= SAMPLE_LIMIT:
            sample[f"c{i}_out"], sample[f"c{i}_lse"] = bits(out), bits(lse)
        entries.append(entry)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_npz_atomic(out_dir / SAMPLE_FILE, **sample)
    report = {"provenance": fa3_jax.provenance() | {"date": time.strftime("%Y-%m-%d")},
              "cases": entries, "seconds": round(time.time() - t0, 1),
              "regenerate": "python3 -m simulator measure fa3_chunk_record --out DIR"}
    write_json_atomic(out_dir / REPORT_FILE, report)
    return {"cases": len(entries), "refused": sum("error" in e for e in entries),
            "sampled": len(sample) // 2}


def main(argv=None) -> int:
    args = out_parser("fa3_chunk_record", __doc__.splitlines()[0]).parse_args(argv)
    print(record(Path(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
