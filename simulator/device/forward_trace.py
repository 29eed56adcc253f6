"""Step traces of the device forward: the kernel's dump -> :class:`simulator.trace.Trace`.

Built with ``-DFA_TRACE=1``, ``kernels/fa3_forward.cu`` stores, for the CTAs listed in a device
array, every thread's state after each step (docs/kernel.md, "Step traces"). The dump of one
traced CTA is ``slots`` records of :func:`record_words` uint32 each: a header ``{0xFA300000 |
step, n_block (-1: none), slot, 0}`` and then ``cols`` words per thread, ``[W, 128, cols]``, the
raw bits of the float32 state (NaN and -inf travel as bits). The kernel writes event ``k`` of a
CTA, in the emulator's order, into slot ``k``; :func:`decode` reads the records back, names the
columns as the emulator names its arrays (:data:`COLUMNS`) and merges the CTAs in the emulator's
order, so ``simulator.compare.first_divergence(emulator_trace, device_trace)`` applies directly.

The recorded traces (``python -m simulator measure forward_trace``) and their configurations
are :mod:`simulator.replay.forward_traces`; tests/test_device_trace.py replays them on CPU.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..flash.block_info import block_range
from ..flash.scheduler import cta_groups
from ..trace import STEPS, Event, Trace

HEADER_WORDS = 4
MAGIC = 0xFA300000
MAGIC_MASK = 0xFFF00000

#: per step: (array name, first column, width) in a record's per-thread words; width "S" is the
#: S fragment (kblock_n / 2 registers), "O" the O fragment (kernel head dim / 2 registers)
COLUMNS = {
    "qk_gemm": (("acc_s", 0, "S"),),
    "softcap": (("acc_s", 0, "S"),),
    "mask": (("acc_s", 0, "S"),),
    "max_get_scale": (("row_max", 0, 2), ("row_sum", 2, 2), ("scores_scale", 4, 2)),
    "online_softmax": (("acc_s", 0, "S"), ("row_sum", "S", 2)),
    "rescale_o": (("acc_o", 0, "O"),),
    "pv_gemm": (("acc_o", 0, "O"),),
    "finalize": (("row_sum", 0, 2), ("scores_scale", 2, 2), ("lse", 4, 2), ("row_max", 6, 2)),
    "epilogue": (("acc_o", 0, "O"),),
}


def trace_cols(cfg) -> int:
    """Words per thread in a record: max(kblock_n / 2 + 2, head_dim / 2, 8) (kTraceCols)."""
    return max(cfg.kblock_n // 2 + 2, cfg.kernel_head_dim // 2, 8)


def record_words(cfg) -> int:
    """uint32 words of one record: the header plus ``threads x`` :func:`trace_cols`."""
    return HEADER_WORDS + 128 * (cfg.kblock_m // 64) * trace_cols(cfg)


def events_per_block(cfg) -> int:
    """Events of one K/V block in a full iteration: qk_gemm, [softcap], mask, max_get_scale,
    online_softmax, rescale_o, pv_gemm."""
    return 6 + (cfg.softcap > 0)


def n_blocks(cfg, cta) -> int:
    """K/V blocks visited by CTA ``(b, h, m_block)`` (0 for an empty CTA or one off the grid)."""
    b, h, mb = (int(c) for c in cta)
    m_blocks = -(-cfg.seqlen_q // cfg.kblock_m)
    if not (0 <= b < cfg.batch and 0 <= h < cfg.heads and 0 <= mb < m_blocks):
        return 0
    lo, hi = block_range(mb, cfg.seqlen_q, int(cfg.seqlens_k[b]), cfg.kblock_m, cfg.kblock_n,
                         cfg.window)
    return max(0, hi - lo)


def expected_events(cfg, cta) -> int:
    """Events the emulator records for one CTA (and the kernel writes): ``n`` blocks of
    :func:`events_per_block`, less the two O events of the overlapped schedule's first block, plus
    its last P V and (RescaleOBeforeGemm, ``n > 1``) last rescale, plus finalize and epilogue."""
    n = n_blocks(cfg, cta)
    if n == 0:
        return 0
    total = n * events_per_block(cfg) + 2
    if cfg.schedule == "intra_wg_overlap":
        total += -2 + 1 + (1 if cfg.rescale_before_gemm and n > 1 else 0)
    return total


def slots_per_cta(cfg, ctas) -> int:
    """Records allocated per traced CTA: the largest :func:`expected_events`, at least 1."""
    return max([1] + [expected_events(cfg, c) for c in np.asarray(ctas).reshape(-1, 3)])


def trace_ctas(trace) -> np.ndarray:
    """The ``trace`` argument as int32 ``[T, 3]`` of distinct ``(b, h, m_block)``, in order.

    Raises:
        ValueError: an entry that is not three integers.
    """
    seen: dict[tuple[int, int, int], None] = {}
    try:
        for cta in trace:
            vals = tuple(cta)
            if len(vals) != 3 or not all(isinstance(v, (int, np.integer)) for v in vals):
                raise TypeError
            seen.setdefault(tuple(int(v) for v in vals), None)
    except TypeError:
        raise ValueError(f"trace: expected an iterable of (batch, head, m_block) integer triples, "
                         f"got {trace!r}") from None
    return np.array(list(seen), dtype=np.int32).reshape(-1, 3)


def _cta_events(cfg, cta, dump: np.ndarray) -> list[Event]:
    """The events of one CTA from its records ``[slots, words]`` (uint32), in slot order."""
    W = cfg.kblock_m // 64
    cols = trace_cols(cfg)
    width = {"S": cfg.kblock_n // 2, "O": cfg.kernel_head_dim // 2}
    n_expected = expected_events(cfg, cta)
    events = []
    for slot in range(dump.shape[0]):
        head = dump[slot, :HEADER_WORDS]
        written = (int(head[0]) & MAGIC_MASK) == MAGIC
        if slot >= n_expected:
            if written:
                raise RuntimeError(f"trace dump of CTA {tuple(cta)}: unexpected record in slot "
                                   f"{slot} (expected {n_expected} events)")
            continue
        if not written or int(head[2]) != slot:
            raise RuntimeError(f"trace dump of CTA {tuple(cta)}: slot {slot} of {n_expected} "
                               f"was not written")
        step = STEPS[int(head[0]) & 0xFF]
        n = int(head[1]) - (1 << 32 if int(head[1]) >= 1 << 31 else 0)
        body = dump[slot, HEADER_WORDS:].reshape(W, 128, cols).view(np.float32)
        data = {}
        for name, c0, w in COLUMNS[step]:
            c0 = width.get(c0, c0)
            w = width.get(w, w)
            data[name] = np.ascontiguousarray(body[:, :, c0:c0 + w])
        events.append(Event(step, tuple(int(c) for c in cta), None if n < 0 else n, data))
    return events


def decode(raw: np.ndarray, cfg, ctas) -> Trace:
    """The kernel's dump ``raw`` uint32 ``[T, slots, words]`` for ``ctas`` [T, 3] -> a Trace
    with the emulator's events in the emulator's order.

    Per CTA the kernel already writes the emulator's event order (slot = position). Across
    CTAs the emulator runs CTAs with the same K/V block range as one group, in the order of
    ``simulator.flash.scheduler.cta_groups`` (first appearance over batch, m_block; inside a
    group by batch, m_block, head), and records a step for every traced CTA of the group before
    the next step; the events are merged the same way.

    Raises:
        RuntimeError: a slot the kernel should have written is missing, or an extra one exists.
    """
    ctas = np.asarray(ctas).reshape(-1, 3)
    raw = np.asarray(raw, dtype=np.uint32).reshape(len(ctas), -1, record_words(cfg))
    per_cta = {tuple(int(c) for c in cta): _cta_events(cfg, cta, raw[i])
               for i, cta in enumerate(ctas)}
    trace = Trace()
    # traced launches run per-head tiles (flash.forward traces with pack_gqa=False), unsplit
    for group in cta_groups(dataclasses.replace(cfg, pack_gqa=False, splits=None)).values():
        sel = [tuple(int(c) for c in cta[:3]) for cta in group
               if tuple(int(c) for c in cta[:3]) in per_cta]
        if not sel:
            continue
        lists = [per_cta[c] for c in sel]
        for k in range(max(len(x) for x in lists)):
            trace.events.extend(x[k] for x in lists if k < len(x))
    return trace
