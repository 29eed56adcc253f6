"""Replay one part of the real FA3 backward's recordings (and the stress runs of its cases)
in N processes, printing running totals (for a many-core machine; ``verify --topic backward
--workers N`` is the same check for every part, totals at the end).

Usage: python scripts/replay_backward_pool.py PART WORKERS [START]   (PART: matrix, drawn,
extra, hyp; START: skip the part's first START calls)
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ProcessPoolExecutor

from simulator.io import read_json
from simulator.replay import fa3_backward as f


def main() -> int:
    part, workers = sys.argv[1], int(sys.argv[2])
    path = {"hyp": f.HYP_REPORT, "extra": f.EXT_REPORT}.get(part, f.REPORT)
    stress = dict(f.stress_entries(read_json(f.REPORT, f.REGENERATE)))
    todo = [(part, k, e, stress.get(k)) for k, e in f.entries(read_json(path, f.REGENERATE), part)]
    if part == "drawn":
        todo += [(part, k, e, None) for k, e in f.entries(read_json(f.EXT_REPORT, f.REGENERATE),
                                                          part)]
    todo = todo[int(sys.argv[3]) if len(sys.argv) > 3 else 0:]
    t0, calls, bad, values, outside, stressed = time.time(), 0, [], 0, 0, 0
    with ProcessPoolExecutor(workers) as pool:
        for (_, key, e, _), res in zip(todo, pool.map(f.check_task, todo, chunksize=1), strict=True):
            calls += 1
            for tag, r in zip(("", " (stress)"), res, strict=True):
                if r is None:
                    continue
                stressed += bool(tag)
                values += r["values"]
                outside += r["outside"]
                if r["mismatches"] or r["outside"]:
                    bad.append(f"{key}{tag} {e['case']['name']}: {r['mismatches']} "
                               f"{r['outside']} outside")
            if calls % 100 == 0 or calls == len(todo):
                print(f"{part}: {calls}/{len(todo)} calls ({stressed} with stress runs), "
                      f"{values:,} values, {len(bad)} bad, {outside} outside, "
                      f"{time.time() - t0:.0f} s", flush=True)
    for b in bad[:20]:
        print("BAD", b)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
