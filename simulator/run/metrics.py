"""What ``python -m simulator run`` measures: O and LSE of the emulator against the float64
reference, in units in the last place of the output format, over the rows that have keys."""

from __future__ import annotations

import math

import numpy as np

#: significand bits (implicit one included) and smallest normal exponent of the output formats
_PRECISION = {"bf16": (8, -126), "f16": (11, -14)}


def ulp(ref: np.ndarray, fmt: str) -> np.ndarray:
    """Spacing of ``fmt`` (bf16 or f16) at each reference value: ``2^(max(e, emin) - p + 1)``
    with ``e = floor(log2 |ref|)`` (the subnormal spacing at 0)."""
    p, emin = _PRECISION[fmt]
    _, ex = np.frexp(np.abs(ref))
    e = np.where(ref != 0, ex.astype(np.int64) - 1, emin)
    return np.ldexp(1.0, np.maximum(e, emin) - (p - 1))


def no_key_rows(cfg) -> np.ndarray:
    """``[batch, seqlen_q]``: True where the mask (``seqlens_k``, causal / window) leaves a query
    row no key at all. From the mask alone, whatever the values (a NaN row still sees keys).

    Row ``i`` of batch ``b`` sees the keys ``j`` with ``j < seqlens_k[b]`` and
    ``i + offset - left <= j <= i + offset + right`` (``offset = seqlens_k[b] - seqlen_q``,
    -1 = unbounded), as :func:`simulator.flash.masks.allowed`.
    """
    left, right = (int(w) for w in cfg.window)
    sk = np.asarray(cfg.seqlens_k, dtype=np.int64)[:, None]          # [B, 1]
    rows = np.arange(cfg.seqlen_q, dtype=np.int64)[None, :]          # [1, Sq]
    diag = rows + sk - cfg.seqlen_q
    lo = np.maximum(0, diag - left) if left >= 0 else np.zeros_like(diag)
    hi = np.minimum(sk - 1, diag + right) if right >= 0 else np.broadcast_to(sk - 1, diag.shape)
    return lo > hi


def _nonfinite_counts(x: np.ndarray) -> dict:
    return {"nan": int(np.isnan(x).sum()), "posinf": int(np.isposinf(x).sum()),
            "neginf": int(np.isneginf(x).sum())}


def measure(out: np.ndarray, lse: np.ndarray, ref_out: np.ndarray, ref_lse: np.ndarray,
            out_fmt: str, no_key: np.ndarray | None = None) -> dict:
    """Error of O (in output ulps and relative Frobenius) and LSE (absolute) vs the reference.

    Statistics cover only the elements where both the emulator and the reference are finite
    (``None`` when there are none); the others are counted by kind. ``no_key`` ``[batch,
    seqlen_q]`` marks the rows the mask leaves without a key (:func:`no_key_rows`); without
    it, the rows whose reference LSE is -inf.
    """
    o = out.astype(np.float64)
    ref_out = np.asarray(ref_out, dtype=np.float64)
    ref_lse = np.asarray(ref_lse, dtype=np.float64)
    fin = np.isfinite(o) & np.isfinite(ref_out)
    n_fin = int(fin.sum())
    err = np.where(fin, np.abs(o - np.where(fin, ref_out, 0.0)), 0.0)
    eu = np.where(fin, err / ulp(np.where(fin, ref_out, 0.0), out_fmt), 0.0)
    m: dict = {"out_elements": int(o.size), "out_pairs": n_fin,
               "out_excluded": int(o.size - n_fin),
               "out_nan": int(np.isnan(o).sum()), "out_inf": int(np.isinf(o).sum()),
               "ref_out_nan": int(np.isnan(ref_out).sum()),
               "ref_out_inf": int(np.isinf(ref_out).sum())}
    if n_fin:
        worst = np.unravel_index(int(np.argmax(eu)), eu.shape)
        num = float(np.sqrt(np.sum(err**2)))
        denom = float(np.sqrt(np.sum(np.where(fin, ref_out, 0.0) ** 2)))
        m.update({
            "out_max_ulp": float(eu[worst]), "out_mean_ulp": float(eu[fin].mean()),
            "out_p99_ulp": float(np.percentile(eu[fin], 99)),
            "out_within_half_ulp": float((eu[fin] <= 0.5).mean()),
            "out_worst": tuple(int(i) for i in worst),
            "out_worst_values": (float(o[worst]), float(ref_out[worst])),
            "out_rel_frobenius": num / denom if denom > 0 else (0.0 if num == 0 else math.inf),
            "out_ref_rms": denom / math.sqrt(n_fin),
        })
        per_head = np.where(fin.any(axis=(0, 1, 3)), eu.max(axis=(0, 1, 3)), np.nan)
        m["per_head_max_ulp"] = [None if np.isnan(x) else float(x) for x in per_head]
        m.update(_row_scaled(err, eu, np.where(fin, ref_out, 0.0), fin, worst))
    else:
        m.update({k: None for k in ("out_max_ulp", "out_mean_ulp", "out_p99_ulp",
                                    "out_within_half_ulp", "out_worst", "out_worst_values",
                                    "out_rel_frobenius", "out_max_row_rel", "out_worst_row_rel",
                                    "out_worst_row_rel_error",
                                    "out_max_ulp_significant", "out_worst_row_max")})
        m["per_head_max_ulp"] = m["per_head_max_ulp_significant"] = [None] * o.shape[2]
    lse64 = lse.astype(np.float64)
    le_fin, lr_fin = np.isfinite(lse64), np.isfinite(ref_lse)
    lf = le_fin & lr_fin
    n_lf = int(lf.sum())
    m.update({"lse_rows": int(lse.size), "lse_pairs": n_lf,
              "lse_nonfinite_emu_only": int((~le_fin & lr_fin).sum()),
              "lse_nonfinite_ref_only": int((le_fin & ~lr_fin).sum()),
              "lse_nonfinite_both": int((~le_fin & ~lr_fin).sum())})
    if n_lf:
        le = np.where(lf, np.abs(lse64 - np.where(lf, ref_lse, 0.0)), 0.0)
        lworst = np.unravel_index(int(np.argmax(le)), le.shape)
        m.update({"lse_max_abs": float(le[lworst]), "lse_mean_abs": float(le[lf].mean()),
                  "lse_worst": tuple(int(i) for i in lworst)})
    else:
        m.update({"lse_max_abs": None, "lse_mean_abs": None, "lse_worst": None})
    emu = _nonfinite_counts(lse64)
    ref = _nonfinite_counts(ref_lse)
    m.update({"lse_nan": emu["nan"], "lse_posinf": emu["posinf"], "lse_neginf": emu["neginf"],
              "ref_lse_nan": ref["nan"], "ref_lse_posinf": ref["posinf"],
              "ref_lse_neginf": ref["neginf"]})
    # rows that see no key: from the mask, not from NaN or -inf values
    B, S, H, _ = o.shape
    if no_key is None:
        nk = np.isneginf(ref_lse)
    else:
        nk = np.broadcast_to(np.asarray(no_key, dtype=bool)[:, None, :], (B, H, S))
    lse_neg = np.isneginf(lse64)
    o_zero = np.all(o == 0, axis=3).transpose(0, 2, 1)                # [B, H, Sq]
    m.update({"rows": int(lse.size), "rows_no_key": int(nk.sum()),
              "rows_no_key_lse_neginf": int((nk & lse_neg).sum()),
              "rows_no_key_out_zero": int((nk & o_zero).sum()),
              "rows_with_keys_lse_neginf": int((~nk & lse_neg).sum())})
    return m


#: an output element counts as significant where |ref| is at least this share of its row's
#: largest |ref| (a row: one query's head_dim outputs of one head): below it an ulp is tiny
#: next to the row's other values, and an ulp count says little
SIGNIFICANT = 0.01


def _row_scaled(err, eu, ref, fin, raw_worst) -> dict:
    """The errors measured against each output row's scale (its largest finite |ref|): the
    largest ``|O - ref| / max|ref|`` and where, the ulp maxima (all, per head) over the
    significant elements (|ref| >= :data:`SIGNIFICANT` x the row's max), and the scale of the
    row of ``raw_worst`` (the element of the largest ulp count)."""
    scale = np.abs(ref).max(axis=-1, keepdims=True)                  # [B, S, H, 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(scale > 0, err / scale, np.where(err > 0, np.inf, 0.0))
    rel = np.where(fin, rel, 0.0)
    worst = np.unravel_index(int(np.argmax(rel)), rel.shape)
    sig = fin & (np.abs(ref) >= SIGNIFICANT * scale) & (scale > 0)
    eu_sig = np.where(sig, eu, 0.0)
    per_head = np.where(sig.any(axis=(0, 1, 3)), eu_sig.max(axis=(0, 1, 3)), np.nan)
    return {"out_max_row_rel": float(rel[worst]), "out_worst_row_rel": tuple(int(i) for i in worst),
            "out_worst_row_rel_error": float(err[worst]),
            "out_worst_row_max": float(scale[raw_worst[:-1]][0]),
            "out_max_ulp_significant": float(eu_sig.max()) if sig.any() else None,
            "per_head_max_ulp_significant": [None if np.isnan(x) else float(x) for x in per_head]}


def measure_varlen(out, lse, ref_out, ref_lse, out_fmt: str, rows: np.ndarray,
                   no_key: np.ndarray | None = None) -> dict:
    """:func:`measure` over the rows of a varlen workload only (``rows`` [batch] per sequence;
    ``out`` [batch, seqlen, heads, d] padded, ``no_key`` [batch, seqlen]). The worst elements
    are reported in (sequence, row, ...) coordinates."""
    sel = [(b, r) for b in range(len(rows)) for r in range(int(rows[b]))]
    bi = np.array([b for b, _ in sel], dtype=np.int64)
    ri = np.array([r for _, r in sel], dtype=np.int64)
    pack_o = lambda x: np.asarray(x)[bi, ri][None]                       # noqa: E731
    pack_l = lambda x: np.asarray(x)[bi, :, ri].T[None]                 # noqa: E731
    m = measure(pack_o(out), pack_l(lse), pack_o(ref_out), pack_l(ref_lse), out_fmt,
                no_key=None if no_key is None else np.asarray(no_key)[bi, ri][None])
    for key in ("out_worst", "out_worst_row_rel"):
        if m.get(key) is not None:
            _, t, h, c = m[key]
            m[key] = (int(bi[t]), int(ri[t]), h, c)
    if m.get("lse_worst") is not None:
        _, h, t = m["lse_worst"]
        m["lse_worst"] = (int(bi[t]), h, int(ri[t]))
    return m


def no_key_rows_varlen(cfgs: list, seqlen: int) -> np.ndarray:
    """[batch, seqlen] :func:`no_key_rows` of each sequence's own launch (False past its rows)."""
    out = np.zeros((len(cfgs), seqlen), dtype=bool)
    for b, c in enumerate(cfgs):
        out[b, : c.seqlen_q] = no_key_rows(c)[0]
    return out
