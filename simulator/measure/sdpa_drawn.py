"""``sdpa_record --drawn N``: PyTorch SDPA's flash backend on the drawn calls of
:func:`simulator.replay.sdpa_cases.drawn_cases` (digests of each output; the replay is
:mod:`simulator.replay.sdpa_drawn`). Called by :mod:`.sdpa_record`'s ``main``."""

from __future__ import annotations

import time

import numpy as np

from ..replay import sdpa_cases as sc
from ..replay.common import digest
from .jax_ffi import first_line as _first_line


def _hex(bits: np.ndarray) -> str:
    return digest(bits).hex()


def record_drawn(r, n: int, log, deadline: float, backward_runs) -> tuple[dict, dict]:
    """``n`` drawn calls (:func:`simulator.replay.sdpa_cases.drawn_cases`: 3n/4 forward, n/4
    backward): digests of out / LSE, and of each of the backward's six runs (three
    deterministic, three default); arrays: the default runs' dQ where it left the first
    deterministic run (``b{i}_dq_r{j}_idx`` / ``_val``, j = 0-2). ``r``: the recorder's
    :class:`.sdpa_record.Recorder`; ``backward_runs``: its six-run backward
    (``sdpa_record._backward_runs``)."""
    fwd, bwd = sc.drawn_cases(n - n // 4), sc.drawn_cases(n // 4, backward=True)
    rep, arrays = {"forward": [], "backward": []}, {}
    for i, case in enumerate(fwd):
        if time.time() > deadline:
            log(f"drawn forward: stopped at {i} (time budget)")
            break
        rec = {"index": i, "case": case}
        try:
            q, k, v = (r.tensor(x, case["dtype"]) for x in sc.make_input_bits(case))
            res = r.flash(q, k, v, case)
            rec.update(out=_hex(r.bits16(res[0])), lse=_hex(r.f32(res[1]).view(np.uint32)))
        except Exception as exc:
            rec["error"] = _first_line(exc)
        rep["forward"].append(rec)
    for i, case in enumerate(bwd):
        if time.time() > deadline:
            log(f"drawn backward: stopped at {i} (time budget)")
            break
        rec = {"index": i, "case": case}
        try:
            q, k, v, dout = (r.tensor(x, case["dtype"]) for x in
                             (*sc.make_input_bits(case), sc.grad_bits(case)))
            fwd_res = r.flash(q, k, v, case)
            rec.update(out=_hex(r.bits16(fwd_res[0])),
                       lse=_hex(r.f32(fwd_res[1]).view(np.uint32)))
            args = (dout, q, k, v, fwd_res[0], fwd_res[1], fwd_res[2], fwd_res[3], fwd_res[4],
                    fwd_res[5], 0.0, case["causal"], fwd_res[6], fwd_res[7])
            runs, _ = backward_runs(r, args, case)
            for j, name in enumerate(("dq", "dk", "dv")):
                rec[name] = [_hex(run[j]) for run in runs]
            det0 = runs[0][0].ravel()
            for j, run in enumerate(runs[3:]):
                idx = np.flatnonzero(run[0].ravel() != det0).astype(np.int32)
                arrays[f"b{i}_dq_r{j}_idx"], arrays[f"b{i}_dq_r{j}_val"] = idx, run[0].ravel()[idx]
        except Exception as exc:
            rec["error"] = _first_line(exc)
            r.torch.use_deterministic_algorithms(False)
        rep["backward"].append(rec)
    log(f"drawn: {len(rep['forward'])} forward, {len(rep['backward'])} backward calls, "
        f"{sum('error' in x for x in rep['forward'] + rep['backward'])} refused")
    return rep, arrays
