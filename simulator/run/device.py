"""``python -m simulator run --device``: the same launch on the GPU, through the real FA3
library and the twin kernel, and the bit diff of each against the emulator."""

from __future__ import annotations

import numpy as np

from ..errors import UsageError
from .emulation import one_sequence
from .report import f32_text, plural
from .workload import Workload, varlen_lengths


def check_device() -> None:
    """Raise DeviceUnavailable (exit 2) naming what is missing: CuPy, a GPU, the twin."""
    from ..device import runtime

    runtime.require_gpu()


def run_device(work: Workload, kwargs: dict, out, lse, trace, trace_ctas, kblock_m) -> tuple[bool, str]:
    """The real FA3 library (when installed) and the twin kernel on the same input:
    ``(identical to both, report)``."""
    from .. import compare
    from ..device import fa3_library
    from ..device import forward as device_forward

    lines, same = [], True
    ok, why = fa3_library.available()
    if ok:
        tiles = ("kblock_m", "kblock_n", "schedule")
        lib = {k: v for k, v in kwargs.items() if k not in tiles}
        if any(kwargs.get(k) is not None for k in tiles):
            lines.append("library   (FA3 chooses its own tiles: --kblock-m/--kblock-n/--schedule "
                         "apply to the emulator and the twin only)")
        try:
            l_out, l_lse = fa3_library.forward(work.q, work.k, work.v, **lib)
        except (RuntimeError, ValueError) as exc:
            raise UsageError(f"--device: the FA3 library refused the call: {exc}") from None
        rep_o, rep_l = compare.diff(out, l_out), compare.diff(lse, l_lse)
        lines += [f"library   O:   {rep_o}", f"          LSE: {rep_l}"]
        same = rep_o.identical and rep_l.identical
    else:
        lines.append(f"library   not run: {why}")
    d_out, d_lse, _ = _device_call(device_forward, work, kwargs)
    rep_o = compare.diff(out, d_out)
    rep_l = compare.diff(lse, d_lse)
    lines += [f"twin      O:   {rep_o}", f"          LSE: {rep_l}"]
    if not (rep_o.identical and rep_l.identical):
        same = False
        lines.append("          first divergence: " + _first_divergence(
            work, kwargs, out, lse, d_out, d_lse, trace, trace_ctas, kblock_m))
    return same, "\n".join(lines)


def run_device_varlen(work: Workload, kwargs: dict, out, lse) -> tuple[bool, str]:
    """A varlen workload on the device: the real FA3 library's ``flash_attn_varlen_func`` on
    the packed sequences (one launch), and the twin kernel one sequence at a time (it has no
    varlen launch); both compared with the emulator on every row of every sequence."""
    from .. import compare
    from ..device import fa3_library
    from ..device import forward as device_forward

    rows, keys = varlen_lengths(work)
    B = work.q.shape[0]
    lines, same = [], True
    pack = lambda x, n: np.concatenate([x[b, : n[b]] for b in range(B)])  # noqa: E731
    # the emulator's rows as the library lays them out: out [total_q, H, d], lse [H, total_q]
    e_out = pack(out, rows)
    e_lse = np.concatenate([lse[b, :, : rows[b]] for b in range(B)], axis=1)

    ok, why = fa3_library.available()
    if ok:
        if any(kwargs.get(k) is not None for k in ("kblock_m", "kblock_n", "schedule")):
            lines.append("library   (FA3 chooses its own tiles: --kblock-m/--kblock-n/--schedule "
                         "apply to the emulator and the twin only)")
        args = {"q": pack(work.q, rows), "k": pack(work.k, keys), "v": pack(work.v, keys),
                "cu_seqlens_q": np.concatenate([[0], np.cumsum(rows)]).astype(np.int32),
                "cu_seqlens_k": np.concatenate([[0], np.cumsum(keys)]).astype(np.int32),
                "max_seqlen_q": int(rows.max()), "max_seqlen_k": int(keys.max()),
                "softmax_scale": kwargs["softmax_scale"], "causal": kwargs["causal"],
                "window_size": tuple(kwargs["window"]), "softcap": kwargs["softcap"],
                "return_attn_probs": True}
        args.update({n: kwargs[n] for n in ("q_descale", "k_descale", "v_descale") if n in kwargs})
        try:
            got = fa3_library.call("flash_attn_varlen_func", args)
        except (RuntimeError, ValueError) as exc:
            raise UsageError(f"--device: the FA3 library refused the call: {exc}") from None
        rep_o = compare.diff(e_out, got["out"], labels=("emulator", "library"))
        rep_l = compare.diff(e_lse, got["lse"], labels=("emulator", "library"))
        lines += ["library   flash_attn_varlen_func, one launch of "
                  f"{plural(B, 'sequence')}", f"          O:   {rep_o}", f"          LSE: {rep_l}"]
        same = rep_o.identical and rep_l.identical
    else:
        lines.append(f"library   not run: {why}")
    t_out, t_lse = [], []
    for b in range(B):
        a = one_sequence(work, kwargs, b)
        kw = {n: x for n, x in a["kw"].items() if not n.startswith("max_seqlen")}
        try:
            r = device_forward.forward(a["q"], a["k"], a["v"], **kw)
        except ValueError as exc:
            raise UsageError(f"--device: {exc}") from None
        parts = list(r)
        t_out.append(parts[0][0])
        t_lse.append(parts[1][0])
    rep_o = compare.diff(e_out, np.concatenate(t_out), labels=("emulator", "twin"))
    rep_l = compare.diff(e_lse, np.concatenate(t_lse, axis=1), labels=("emulator", "twin"))
    lines += ["twin      one launch per sequence (the twin has no varlen launch)",
              f"          O:   {rep_o}", f"          LSE: {rep_l}"]
    same = same and rep_o.identical and rep_l.identical
    return same, "\n".join(lines)


def _device_call(device_forward, work: Workload, kwargs: dict, trace=None):
    """``(out, lse, trace)`` of the device twin (a tuple or a ForwardResult); its argument
    errors (e.g. shared memory a configuration would need) are usage errors here."""
    try:
        r = device_forward.forward(work.q, work.k, work.v, **kwargs, trace=trace)
    except ValueError as exc:
        raise UsageError(f"--device: {exc}") from None
    parts = list(r)
    return parts[0], parts[1], getattr(r, "trace", parts[2] if len(parts) > 2 else None)


def _first_divergence(work, kwargs, out, lse, d_out, d_lse, trace, trace_ctas, kblock_m) -> str:
    """In the trace when the device records one for the first differing CTA, else the first
    differing output element in CTA order."""
    from .. import compare
    from ..device import forward as device_forward
    from ..trace import Trace

    bo = out.view(np.uint16) != d_out.view(np.uint16)                      # [B, S, H, d]
    bl = lse.view(np.uint32) != d_lse.view(np.uint32)                      # [B, H, S]
    bad_rows = bo.any(axis=3).transpose(0, 2, 1) | bl                      # [B, H, S]
    b, h, r = (int(i) for i in np.argwhere(bad_rows)[0])
    cta = (b, h, r // kblock_m)
    where = (f"CTA (batch {b}, head {work.heads[h]}, m_block {cta[2]}), row {r}: O "
             f"{_hex(out[b, r, h])} vs {_hex(d_out[b, r, h])}, LSE {f32_text(lse[b, h, r])} vs "
             f"{f32_text(d_lse[b, h, r])}")
    emu = trace.for_cta((b, work.heads[h], cta[2])) if trace is not None else []
    if not emu:
        return where + f" (rerun with --trace-cta {b},{work.heads[h]},{cta[2]} for the step)"
    try:
        _, _, got = _device_call(device_forward, work, kwargs, trace=[cta])
    except NotImplementedError:
        got = None
    if got is None:
        return where + " (the device records no trace yet)"
    dev_trace = Trace()
    for e in got:  # the device numbers the selected heads 0..; the emulator's trace does not
        e.cta = (e.cta[0], work.heads[e.cta[1]], e.cta[2])
        dev_trace.events.append(e)
    return str(compare.first_divergence(Trace(emu), dev_trace)) + "; " + where


def _hex(x) -> str:
    bits = np.asarray(x).view(np.uint16 if x.dtype.itemsize == 2 else np.uint32).ravel()
    return "0x" + "".join(f"{int(v):04x}" for v in bits[:2]) + ("..." if bits.size > 2 else "")
