"""The H200 recordings the exercise checker runs a reader's function on.

Three kinds, all committed under ``simulator/data/device/`` and checked against
``MANIFEST.json`` when read (:mod:`simulator.io`):

* the step traces of the forward (``forward_traces.npz``: the twin kernel
  ``kernels/fa3_forward.cu`` built with ``-DFA_TRACE=1`` on the H200, every thread's state after
  every step of 1-2 CTAs of 7 configurations; bf16, f16, e4m3, both schedules, softcap,
  descales), decoded by :mod:`simulator.device.forward_trace` into :class:`simulator.trace.Trace`;
* the reduction probe (``hw_reduce.npz``, ``python -m simulator measure hw_probe``):
  softmax.h's ``thread_reduce_`` + ``quad_allreduce_`` on adversarial fragments (subnormals,
  +-0, +-inf, NaN), raw bits of 4 blocks and a digest of each of 32 blocks per variant;
* the real FA3 library's split-KV calls (``fa3_api_report.json`` / ``fa3_api_sample.npz``,
  ``python -m simulator measure fa3_library_record --api``): ``flash_attn_func`` calls whose
  Split kernel partials (``out_accum``, ``softmax_lse_accum``) and combined ``out`` /
  ``softmax_lse`` were kept in full, and direct ``flash_attn_combine`` calls (inputs
  regenerated from their seeds and checked against the recorded digest of the arguments).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..device import forward_trace as ft
from ..errors import RecordedDataError
from ..flash.config import make_config
from ..flash.constants import MAX_OFFSET
from ..flash.mainloop_fwd_sm90 import cta_scales
from ..hw import accumulator_layout, rowcol_view
from ..io import DEVICE_DATA_DIR, read_json, read_npz
from ..replay import forward_traces as traces
from ..replay import hw as hw_replay
from ..replay.fa3_api_cases import args_digest, call_args
from ..trace import Trace

#: the variants of the reduction probe an exercise reads: (shape name, zero_init); the
#: fast-math build (``max.ftz`` / ``add.ftz``, as FA3 is compiled)
PROBE_VARIANTS = (("n128", True), ("n128", False), ("n40", True), ("n40", False))
PROBE_BUILD = "fast"
API_REGENERATE = "python3 -m simulator measure fa3_library_record --api --out DIR (H200, fa3-fwd 0.0.3)"


@dataclass(frozen=True)
class TraceCase:
    """One recorded configuration: the H200's trace and what each CTA's softmax was given.

    Attributes:
        name: the configuration's name (``forward_traces.json``).
        fmt: input format ("bf16", "f16", "e4m3").
        max_offset: softmax.h's Max_offset of the kernel (8 for e4m3, else 0).
        device: the decoded H200 trace.
        scale_log2: per CTA ``(batch, head, m_block)``: float32 ``softmax_scale_log2`` after
            the FP8 descales are folded in (what the kernel's Softmax holds).
        final_scale: per CTA: float32 ``v_descale`` (1 unless FP8 with descales), finalize's
            ``final_scale``.
    """

    name: str
    fmt: str
    max_offset: int
    device: Trace
    scale_log2: dict
    final_scale: dict


@functools.lru_cache(maxsize=1)
def trace_cases() -> tuple[TraceCase, ...]:
    """The 7 recorded step traces, decoded, with each CTA's scales (cached).

    Raises:
        RecordedDataError: the recording is missing or altered.
    """
    _, rows = traces.load_traces(DEVICE_DATA_DIR / traces.TRACES_FILE)
    cases = []
    for rec, raw in rows:
        inputs = traces.make_inputs(rec)
        lcfg = traces.launch_config(rec, inputs)
        ctas = ft.trace_ctas([tuple(c) for c in rec["trace"]])
        device = ft.decode(raw, lcfg, ctas)
        kw = traces.call_kwargs(rec, inputs)
        kw.pop("trace")
        cfg = make_config(inputs["q"], inputs["k"], inputs["v"], **kw)
        b = np.array([c[0] for c in device.ctas()], dtype=np.int64)
        hkv = np.array([c[1] // cfg.qhead_per_khead for c in device.ctas()], dtype=np.int64)
        scale, _, final = cta_scales(cfg, b, hkv)
        cases.append(TraceCase(rec["name"], cfg.fmt, MAX_OFFSET[cfg.fmt], device,
                               dict(zip(device.ctas(), scale, strict=True)),
                               dict(zip(device.ctas(), final, strict=True))))
    return tuple(cases)


def rowcol(fragment: np.ndarray) -> np.ndarray:
    """An accumulator fragment ``[W, 128, registers]`` (of ``m64n{2 registers}k16``) as
    softmax.h's row/column view ``[W, 128, 2, registers / 2]``."""
    return _view(fragment.shape[-1]).apply(fragment)


def fragment(tensor: np.ndarray) -> np.ndarray:
    """Inverse of :func:`rowcol`: ``[W, 128, 2, ncol]`` -> ``[W, 128, 4 ncol]``."""
    return _view(2 * tensor.shape[-1]).unapply(tensor)


def _view(registers: int):
    return rowcol_view(accumulator_layout(f"m64n{2 * registers}k16"))


# ---- one CTA's mainloop ----------------------------------------------------------------------------
@dataclass(frozen=True)
class MainloopCase:
    """One traced CTA's inputs, for the mainloop puzzle.

    Attributes:
        label: the configuration and the CTA ``(batch, head, m_block)``.
        case: the :class:`TraceCase` it comes from; ``cta``: the CTA.
        q: ``[W, 64, d]`` (bf16 / f16): the CTA's query rows, zero past the sequence.
        k_blocks, v_blocks: ``[B, N, d]`` / ``[B, N, dv]``: the key and value blocks in the
            order the trace visits them, zero past the sequence.
        keep: bool ``[B, W, 64, N]``: the mask (hopper/mask.h, :func:`simulator.flash.masks.allowed`).
    """

    label: str
    case: TraceCase
    cta: tuple
    q: np.ndarray
    k_blocks: np.ndarray
    v_blocks: np.ndarray
    keep: np.ndarray


@functools.lru_cache(maxsize=1)
def mainloop_cases() -> tuple[MainloopCase, ...]:
    """Every traced CTA of the bf16 / f16 traces without softcap, with its inputs (cached).

    Raises:
        RecordedDataError: the recording is missing or altered.
    """
    from ..flash.mainloop_fwd_sm90 import padded_inputs, tile_rows  # noqa: PLC0415
    from ..flash.masks import allowed  # noqa: PLC0415

    _, rows = traces.load_traces(DEVICE_DATA_DIR / traces.TRACES_FILE)
    by_name = {c.name: c for c in trace_cases()}
    out = []
    for rec, _raw in rows:
        case = by_name[rec["name"]]
        if case.max_offset or rec.get("softcap", 0.0):
            continue
        inputs = traces.make_inputs(rec)
        kw = traces.call_kwargs(rec, inputs)
        kw.pop("trace")
        cfg = make_config(inputs["q"], inputs["k"], inputs["v"], **kw)
        qp, kp, vp, _ = padded_inputs(cfg, inputs["q"], inputs["k"], inputs["v"])
        for cta in case.device.ctas():
            b = cta[0]
            q_rows, heads, hkv = tile_rows(cfg, np.array([cta]))
            order = [e.n_block for e in case.device.events if e.cta == cta and e.step == "qk_gemm"]
            keys = np.array(order)[:, None] * cfg.kblock_n + np.arange(cfg.kblock_n)[None, :]
            keep = allowed(q_rows[0][None, :, None], keys[:, None, :], cfg.seqlen_q,
                           cfg.seqlens_k[b], cfg.window, cfg.chunk)
            w = cfg.kblock_m // 64
            out.append(MainloopCase(
                f"recorded step trace '{case.name}', CTA {cta}", case, cta,
                qp[b, q_rows[0], heads[0]].reshape(w, 64, -1), kp[b, keys, hkv[0]],
                vp[b, keys, hkv[0]], keep.reshape(len(order), w, 64, cfg.kblock_n)))
    return tuple(out)


# ---- the reduction probe -------------------------------------------------------------------------
@dataclass(frozen=True)
class ProbeCase:
    """One variant of the reduction probe (fast-math build).

    Attributes:
        label: e.g. ``"hw_reduce n128 zero_init"``.
        scores: float32 ``[32, 128, 2, ncol]``: the row/column view of the probe's fragments.
        summary: float32 ``[32, 128, 2]``, the running value (None for zero_init).
        head: uint32 ``[4, 128, 2]``: the H200's bits of the first 4 blocks.
        digests: uint8 ``[32, 16]``: SHA-256 (first 16 bytes) of each block's H200 bits.
    """

    label: str
    scores: np.ndarray
    summary: np.ndarray | None
    head: np.ndarray
    digests: np.ndarray


@functools.lru_cache(maxsize=2)
def probe_cases(op: str) -> tuple[ProbeCase, ...]:
    """The reduction probe's variants for ``op`` ("max" or "sum"), quad stage (cached).

    Raises:
        RecordedDataError: missing or altered recording, or regenerated inputs whose SHA-256
            differs from the recorded one (the generator changed).
    """
    import hashlib  # noqa: PLC0415

    rec = read_npz(DEVICE_DATA_DIR / "hw_reduce.npz", hw_replay.REGEN)
    out = []
    for sname, zero_init in PROBE_VARIANTS:
        nreg = hw_replay.REDUCE_SHAPES[sname]
        frag, init = hw_replay.reduce_inputs(nreg)
        sha = hashlib.sha256(frag.tobytes() + init.tobytes()).digest()
        if sha != rec[f"{sname}_input_sha256"].tobytes():
            raise RecordedDataError(f"hw_reduce.npz: the regenerated {sname} inputs differ from "
                                    f"the recorded ones; regenerate with `{hw_replay.REGEN}`")
        key = f"reduce_{op}_{sname}_{'zi' if zero_init else 'acc'}_{PROBE_BUILD}_quad"
        out.append(ProbeCase(f"hw_reduce {sname} {'zero_init' if zero_init else 'with summary'}",
                             rowcol_view(f"m64n{2 * nreg}k16").apply(frag),
                             None if zero_init else init, rec[f"{key}_head"],
                             rec[f"{key}_digest"]))
    return tuple(out)


# ---- split-KV combine calls of the real library ----------------------------------------------------
@dataclass(frozen=True)
class CombineCase:
    """One recorded combine, flattened to rows.

    Attributes:
        label: which recorded call.
        num_splits: FA3's ``params.num_splits`` (picks the combine kernel).
        head_dim_v: FA3's ``params.dv`` (picks the kernel: 64 or 128 columns per CTA).
        lse: float32 ``[num_splits, R]``: each split's LSE (natural log; -inf: the split saw no
            key).
        o: float32 ``[num_splits, R, dv]``: each split's O, already divided by its row sum
            (0 where the split's LSE is -inf).
        out_format: "bf16", "f16" or "f32": what O is converted to.
        out: the H200's O bits ``[R, dv]`` (uint16 or uint32), or None (digest only).
        lse_out: the H200's LSE bits ``[R]`` (uint32), or None (digest only).
        digests: ``(out, lse)`` hex digests of the call's recorded results in FA3's layout, and
            ``to_call``: maps ``[R, dv]`` / ``[R]`` arrays back to that layout.
        call: the keyword arguments of the ``flash_attn_combine`` call (direct calls), else None.
    """

    label: str
    num_splits: int
    head_dim_v: int
    lse: np.ndarray
    o: np.ndarray
    out_format: str
    out: np.ndarray | None
    lse_out: np.ndarray | None
    digests: tuple[str, str]
    to_call: object
    call: dict | None = None


_FORMAT = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16"}


@functools.lru_cache(maxsize=1)
def combine_cases() -> tuple[CombineCase, ...]:
    """Every recorded call whose combine can be rerun from recorded inputs (cached): the
    ``flash_attn_func`` split calls with their partials kept in full (the Split kernel's output
    on the H200), then the direct ``flash_attn_combine`` calls.

    Raises:
        RecordedDataError: missing or altered recording, or a regenerated combine input whose
            digest differs from the recorded one.
    """
    report = read_json(DEVICE_DATA_DIR / "fa3_api_report.json", API_REGENERATE)
    sample = read_npz(DEVICE_DATA_DIR / "fa3_api_sample.npz", API_REGENERATE)
    func, direct = [], []
    for i, record in enumerate(report["cases"]):
        case = record["case"]
        keys = {k for k in ("out_accum", "lse_accum", "out", "lse") if f"c{i}_{k}" in sample}
        if case["api"] == "func" and len(keys) == 4:
            func.append(_func_case(i, case, record, sample))
        elif case["api"] == "combine":
            direct.append(_direct_case(i, case, record, sample))
    return tuple(func + direct)


def _func_case(i: int, case: dict, record: dict, sample: dict) -> CombineCase:
    o_acc = sample[f"c{i}_out_accum"].view(np.float32)        # [S, B, H, Sq, dv]
    l_acc = sample[f"c{i}_lse_accum"].view(np.float32)        # [S, B, H, Sq]
    out = sample[f"c{i}_out"]                                 # [B, Sq, H, dv], bf16 bits
    lse = sample[f"c{i}_lse"].view(np.uint32)                 # [B, H, Sq]
    s, b, h, sq, dv = o_acc.shape

    def to_call(o_rows, lse_rows):
        return (np.ascontiguousarray(o_rows.reshape(b, h, sq, dv).transpose(0, 2, 1, 3)),
                lse_rows.reshape(b, h, sq))

    return CombineCase(
        f"fa3_api call {i}: flash_attn_func {case['dtype']} batch {b}, {h} heads, seqlen_q {sq}, "
        f"head_dim {dv}, {s} splits", s, dv, l_acc.reshape(s, -1), o_acc.reshape(s, -1, dv),
        "bf16", out.transpose(0, 2, 1, 3).reshape(-1, dv).view(np.uint16), lse.reshape(-1),
        (record["out"], record["lse"]), to_call)


def _direct_case(i: int, case: dict, record: dict, sample: dict) -> CombineCase:
    _, args = call_args(case)
    if args_digest(args) != record["inputs"]:
        raise RecordedDataError(f"fa3_api call {i}: the regenerated combine inputs differ from the "
                                f"recorded ones; regenerate with `{API_REGENERATE}`")
    o, lse = args["out_partial"], args["lse_partial"]       # [S, B, Sq, H, dv], [S, B, Sq, H]
    s, b, sq, h, dv = o.shape
    fmt = _FORMAT.get(args["out_dtype"], "bf16")
    uint = np.uint32 if fmt == "f32" else np.uint16
    out = sample.get(f"c{i}_out")
    lse_out = sample.get(f"c{i}_lse")

    def to_call(o_rows, lse_rows):
        return o_rows.reshape(b, sq, h, dv), lse_rows.reshape(b, sq, h)

    return CombineCase(
        f"fa3_api call {i}: flash_attn_combine batch {b}, seqlen {sq}, {h} heads, head_dim {dv}, "
        f"{s} splits -> {case['out_dtype']}", s, -(-dv // 4) * 4, lse.reshape(s, -1),
        o.reshape(s, -1, dv), fmt, None if out is None else out.view(uint).reshape(-1, dv),
        None if lse_out is None else lse_out.view(np.uint32).reshape(-1),
        (record["out"], record["lse"]), to_call, args)
