"""The backward's dS step of an m_block compiled as one call: from P and dP to the three
operands of the gradient GEMMs, decoded for the dot-add.

Per element, with the bits of ``simulator.flash.mainloop_bwd_sm90`` (hopper/
mainloop_bwd_sm90_tma_gmma_ws.hpp; docs/backward.md): ``dS = FMUL.FTZ(P, FADD.FTZ(dP,
-dPsum[row]))`` (the FSUB of the source), times ``dtanh`` (FMUL.FTZ) with softcap; then P and
dS converted to the input format (``cvt.rn``, :func:`.fused_softmax.narrow_bits`) and written
as decoded operands (the widened value and its exponent code): P^T [N, M] (A of dV = P^T dO),
dS [M, N] (A of dQ = dS K) and dS^T [N, M] (A of dK = dS^T Q). This replaces the NumPy
elementwise steps, the two conversions, the two transposed copies and three decodes.

Importing this module imports numba; the machine code is cached on disk (``cache=True``).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from .arguments import require_float32_shape
from .fused_softmax import code_of_bits, format_args, narrow_bits
from .launch import parallel_kernel
from .operands import Decoded
from .softmax import fadd_ftz, fmul_ftz


@parallel_kernel
def ds_step(p, dp, dpsum, dtanh, softcap, shift, sub_min, sub_big, max_finite, sat, nan_bits,
            code_emin, pt_vals, pt_codes, ds_vals, ds_codes, dst_vals, dst_codes):
    """p, dp float32 [A, M, N]; dpsum float32 [A, M]; dtanh float32 [A, M, N] (read with
    ``softcap``); P's format as :func:`.fused_softmax.narrow_bits` takes it, the codes at
    ``code_emin``; writes P^T (``pt_*`` [A, N, M]), dS (``ds_*`` [A, M, N]) and dS^T
    (``dst_*`` [A, N, M]), values float32 and codes int16. Per entry: the rows in loops that
    vectorise (P's values and codes into a scratch tile), then the two transposed copies."""
    rows, m, n = p.shape
    for a in prange(rows):
        pv = np.empty((m, n), dtype=np.int32)
        pc = np.empty((m, n), dtype=np.int16)
        dv, dc = ds_vals[a].view(np.int32), ds_codes[a]
        for i in range(m):
            neg = -dpsum[a, i]
            for j in range(n):
                x = fmul_ftz(p[a, i, j], fadd_ftz(dp[a, i, j], neg))
                x = fmul_ftz(x, dtanh[a, i, j]) if softcap else x
                db = narrow_bits(x, shift, sub_min, sub_big, max_finite, sat, nan_bits)
                dv[i, j] = db
                dc[i, j] = code_of_bits(db, code_emin)
            for j in range(n):
                pb = narrow_bits(p[a, i, j], shift, sub_min, sub_big, max_finite, sat, nan_bits)
                pv[i, j] = pb
                pc[i, j] = code_of_bits(pb, code_emin)
        ptv, dtv = pt_vals[a].view(np.int32), dst_vals[a].view(np.int32)
        for j in range(n):
            for i in range(m):
                ptv[j, i] = pv[i, j]
                pt_codes[a, j, i] = pc[i, j]
                dtv[j, i] = dv[i, j]
                dst_codes[a, j, i] = dc[i, j]


def run(p: np.ndarray, dp: np.ndarray, dpsum: np.ndarray, dtanh, fmt: str, emin: int):
    """:func:`ds_step` on an m_block (``simulator.engine.backward_ds``, which documents the
    arguments): returns ``(P^T, dS, dS^T)`` as :class:`.operands.Decoded`.

    Raises:
        ValueError: arguments of the wrong kind or shape; :func:`.fused_softmax.format_args`'
            errors.
    """
    require_float32_shape("p", p, (None,) * 3, "[A, M, N]")
    for name, x in (("dp", dp),) + ((("dtanh", dtanh),) if dtanh is not None else ()):
        require_float32_shape(name, x, p.shape, f"of p's shape {p.shape}")
    a, m, n = p.shape
    require_float32_shape("dpsum", dpsum, (a, m))
    args = format_args(fmt, emin)
    out = [np.empty(shape, dtype) for shape in ((a, n, m), (a, m, n), (a, n, m))
           for dtype in (np.float32, np.int16)]
    ds_step(np.ascontiguousarray(p), np.ascontiguousarray(dp), np.ascontiguousarray(dpsum),
            np.ascontiguousarray(dtanh) if dtanh is not None else p, dtanh is not None, *args,
            *out)
    index = np.arange(a, dtype=np.int64)
    return tuple(Decoded(out[2 * k], out[2 * k + 1], index) for k in range(3))
