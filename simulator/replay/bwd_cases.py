"""The frozen case generators of the backward recordings (``fa3_backward_*`` in
``simulator/data/device``): the case matrix, the drawn cases, and the inputs of one case.

Editing anything here changes what the recorded bits belong to: a replay regenerates the
inputs from the case and compares the emulator's bits with the recorded digests.

A case is a dict: ``name``, ``seed``, ``dtype`` (``"bf16"`` or ``"f16"``), ``batch``,
``seqlen_q``, ``seqlen_k`` (the maxima, for varlen), ``heads``, ``heads_kv``, ``head_dim``,
``causal``, ``window`` (left, right), ``seqlens_q`` / ``seqlens_k`` (None, or the per-sequence
lengths of a varlen launch: ``cu_seqlens`` are their prefix sums), ``softmax_scale`` (None:
FA3's 1/sqrt(head_dim)); the cases of :func:`extras` also ``softcap`` (0: off) and
``seqused_q`` / ``seqused_k`` (None, or per-sequence used lengths).

Inputs: q, k, v from :func:`simulator.flash.inputs.attention_inputs` (seed ``seed``), dO
normal-ish with std 1 from ``InputStream(seed + 2**32)``; a varlen case draws its packed
tensors as one sequence of the total length.
"""

from __future__ import annotations

import random

import numpy as np

from ..flash.inputs import InputStream, attention_inputs
from ..numerics.cvt import FORMATS

#: the head dim the recorded backward build has (flash-attn3-jax 0.2.3: hdim 128 only)
HEAD_DIM = 128
_DOUT_SEED_OFFSET = 2**32


def _case(name, seed, dtype, batch, sq, sk, h, hk, causal=False, window=(-1, -1),
          seqlens_q=None, seqlens_k=None) -> dict:
    return {"name": name, "seed": seed, "dtype": dtype, "batch": batch, "seqlen_q": sq,
            "seqlen_k": sk, "heads": h, "heads_kv": hk, "head_dim": HEAD_DIM,
            "causal": bool(causal), "window": [int(window[0]), int(window[1])],
            "seqlens_q": None if seqlens_q is None else [int(s) for s in seqlens_q],
            "seqlens_k": None if seqlens_k is None else [int(s) for s in seqlens_k],
            "softmax_scale": None}


def matrix() -> list[dict]:
    """The recorded case matrix (312 cases): batch 1-8, seqlens 1-8192, GQA 1-8, no mask /
    causal / local windows, bf16 and fp16, and varlen launches."""
    cases = []
    seed = 1000
    shapes = [(1, 1, 1), (1, 17, 17), (1, 64, 64), (1, 80, 80), (1, 113, 200), (1, 128, 128),
              (2, 200, 113), (1, 256, 256), (2, 333, 333), (1, 512, 512), (3, 100, 700),
              (1, 1000, 1000), (1, 1024, 1024), (4, 160, 160), (8, 64, 128), (2, 640, 639),
              (1, 1, 300), (1, 300, 1), (1, 2048, 2048), (5, 81, 79)]
    heads = [(1, 1), (2, 2), (4, 1), (4, 2), (8, 1), (6, 3), (8, 8)]
    masks = [(False, (-1, -1)), (True, (-1, -1)), (False, (64, 0)), (False, (100, 50)),
             (False, (0, 0)), (False, (-1, 30)), (False, (200, -1))]
    for si, (b, sq, sk) in enumerate(shapes):
        for mi, (causal, window) in enumerate(masks):
            for dtype in ("bf16", "f16"):
                if (si + mi + (dtype == "f16")) % 2:  # half the grid: every shape, mask, dtype
                    continue
                h, hk = heads[(si * 3 + mi) % len(heads)]
                big = b * sq * sk * h > 8_000_000
                if big and not (causal or window[0] >= 0):
                    h, hk = 1, 1
                cases.append(_case(f"b{b}_q{sq}_k{sk}_h{h}/{hk}_{'c' if causal else 'w'}"
                                   f"{window[0]},{window[1]}_{dtype}", seed, dtype, b, sq, sk,
                                   h, hk, causal, window))
                seed += 1
    # GQA sweep on one shape, every ratio
    for h, hk in ((2, 1), (3, 1), (4, 4), (6, 2), (8, 2), (8, 4), (16, 2)):
        for causal, window in ((False, (-1, -1)), (True, (-1, -1)), (False, (50, 10))):
            for dtype in ("bf16", "f16"):
                cases.append(_case(f"gqa_h{h}/{hk}_{'c' if causal else 'w'}{window}_{dtype}", seed,
                                   dtype, 2, 197, 263, h, hk, causal, window))
                seed += 1
    # long sequences: causal or local (the masks keep the emulation small enough)
    for sq, sk, causal, window, h in ((4096, 4096, False, (128, 0), 2), (8192, 8192, False, (64, 64), 1),
                                      (4096, 4096, True, (-1, -1), 1), (8192, 8192, False, (256, 0), 1),
                                      (2048, 8192, False, (32, 32), 2), (3000, 3000, True, (-1, -1), 1)):
        for dtype in ("bf16", "f16"):
            cases.append(_case(f"long_q{sq}_k{sk}_{'c' if causal else 'w'}{window}_{dtype}", seed,
                               dtype, 1, sq, sk, h, 1 if h == 1 else 2, causal, window))
            seed += 1
    # varlen launches
    rng = random.Random(20261202)
    for i in range(60):
        b = rng.choice((1, 2, 3, 4, 6, 8))
        lq = [rng.choice((1, 7, 64, 79, 80, 81, 128, 150, 257, 400)) for _ in range(b)]
        same = rng.random() < 0.5
        lk = list(lq) if same else [rng.choice((1, 16, 80, 127, 128, 200, 333, 512)) for _ in range(b)]
        h, hk = rng.choice(heads)
        causal, window = rng.choice(masks)
        dtype = ("bf16", "f16")[i % 2]
        cases.append(_case(f"varlen{i}_b{b}_h{h}/{hk}_{'c' if causal else 'w'}{window[0]},"
                           f"{window[1]}_{dtype}", seed, dtype, b, max(lq), max(lk), h, hk,
                           causal, window, lq, lk))
        seed += 1
    # batch sweep
    for b in (1, 2, 3, 4, 5, 6, 7, 8):
        for causal, window in ((False, (-1, -1)), (True, (-1, -1)), (False, (20, 20))):
            cases.append(_case(f"batch{b}_{'c' if causal else 'w'}{window}", seed, "bf16", b, 150,
                               150, 2, 1, causal, window))
            seed += 1
    # softmax_scale sweep (FA3's default is 1/sqrt(head_dim))
    for scale in (0.01, 0.125, 0.3, 1.0, 2.0, 0.0625, 0.5, 0.2):
        case = _case(f"scale{scale}", seed, ("bf16", "f16")[seed % 2], 2, 130, 140, 4, 2,
                     scale > 0.4, (-1, -1))
        case["softmax_scale"] = scale
        cases.append(case)
        seed += 1
    # local window sweep
    for wl, wr in ((0, 0), (1, 1), (15, 16), (63, 64), (79, 0), (80, 80), (127, 0), (128, 128),
                   (0, 200), (300, 0), (-1, 0), (-1, 5), (5, -1)):
        for dtype in ("bf16", "f16"):
            cases.append(_case(f"window{wl},{wr}_{dtype}", seed, dtype, 1, 384, 512, 2, 2, False,
                               (wl, wr)))
            seed += 1
    return cases


def drawn(seed: int, count: int) -> list[dict]:
    """``count`` cases drawn from ``random.Random(seed)``: small shapes over every option the
    build has (the drawn sample of the recordings; frozen like the matrix)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        varlen = rng.random() < 0.25
        b = rng.randint(1, 4)
        hk = rng.choice((1, 1, 2, 3))
        h = hk * rng.choice((1, 1, 2, 4))
        dtype = rng.choice(("bf16", "f16"))
        kind = rng.random()
        if kind < 0.4:
            causal, window = False, (-1, -1)
        elif kind < 0.7:
            causal, window = True, (-1, -1)
        else:
            causal, window = False, (rng.choice((-1, 0, 3, 40, 100)), rng.choice((-1, 0, 7, 64)))
        if varlen:
            lq = [rng.randint(1, 300) for _ in range(b)]
            lk = lq if rng.random() < 0.5 else [rng.randint(1, 300) for _ in range(b)]
            case = _case(f"drawn{i}", seed * 100_000 + i, dtype, b, max(lq), max(lk), h, hk,
                         causal, window, lq, lk)
        else:
            sq, sk = rng.randint(1, 400), rng.randint(1, 400)
            if rng.random() < 0.3:
                sk = sq
            case = _case(f"drawn{i}", seed * 100_000 + i, dtype, b, sq, sk, h, hk, causal, window)
        out.append(case)
    return out


def extras(seed: int = 20261203) -> list[dict]:
    """The recorded cases beyond the matrix and the drawn ones: softcap (values 1.5 to 50,
    masks, GQA, varlen) and ``seqused_q`` / ``seqused_k`` (varlen launches whose sequences use
    a prefix of their rows or keys)."""
    rng = random.Random(seed)
    cases = []
    for i in range(40):
        b = rng.randint(1, 3)
        hk = rng.choice((1, 2))
        h = hk * rng.choice((1, 2))
        causal, window = rng.choice(((False, (-1, -1)), (True, (-1, -1)), (False, (40, 0)),
                                     (False, (64, 64))))
        dtype = ("bf16", "f16")[i % 2]
        sq, sk = rng.randint(1, 300), rng.randint(1, 300)
        if i % 4 == 3:  # varlen
            lq = [rng.randint(1, 200) for _ in range(b)]
            lk = [rng.randint(1, 200) for _ in range(b)]
            case = _case(f"softcap{i}", seed + i, dtype, b, max(lq), max(lk), h, hk, causal,
                         window, lq, lk)
        else:
            case = _case(f"softcap{i}", seed + i, dtype, b, sq, sk, h, hk, causal, window)
        case["softcap"] = rng.choice((1.5, 5.0, 15.0, 30.0, 50.0))
        cases.append(case)
    for i in range(40):
        b = rng.randint(1, 4)
        hk = rng.choice((1, 2))
        h = hk * rng.choice((1, 2))
        causal, window = rng.choice(((False, (-1, -1)), (True, (-1, -1)), (False, (30, 10))))
        lq = [rng.randint(1, 250) for _ in range(b)]
        lk = [rng.randint(1, 250) for _ in range(b)]
        case = _case(f"seqused{i}", seed + 100 + i, ("bf16", "f16")[i % 2], b, max(lq), max(lk),
                     h, hk, causal, window, lq, lk)
        which = i % 3  # q only, k only, both
        case["seqused_q"] = [rng.randint(0, n) for n in lq] if which != 1 else None
        case["seqused_k"] = [rng.randint(0, n) for n in lk] if which != 0 else None
        cases.append(case)
    return cases


def case_inputs(case: dict) -> dict:
    """The inputs of one case (forward and backward share them).

    Returns:
        dict with ``q``, ``k``, ``v``, ``dout`` (the case's dtype; [batch, seqlen, heads, d], or
        [total, heads, d] for varlen), ``cu_seqlens_q`` / ``cu_seqlens_k`` (int32 [batch + 1]
        or None), ``max_seqlen_q`` / ``max_seqlen_k``, ``causal``, ``window`` (a tuple),
        ``softcap`` (float), ``seqused_q`` / ``seqused_k`` (int32 [batch] or None).
    """
    varlen = case["seqlens_q"] is not None
    d, h, hk = case["head_dim"], case["heads"], case["heads_kv"]
    if varlen:
        tq, tk = sum(case["seqlens_q"]), sum(case["seqlens_k"])
        x = attention_inputs(case["seed"], batch=1, seqlen_q=tq, seqlen_k=tk, heads=h,
                             heads_kv=hk, head_dim=d, dtype=case["dtype"], q_std=1.0, k_std=1.0)
        q, k, v = x["q"][0], x["k"][0], x["v"][0]
        shape_o = (tq, h, d)
    else:
        x = attention_inputs(case["seed"], batch=case["batch"], seqlen_q=case["seqlen_q"],
                             seqlen_k=case["seqlen_k"], heads=h, heads_kv=hk, head_dim=d,
                             dtype=case["dtype"], q_std=1.0, k_std=1.0)
        q, k, v = x["q"], x["k"], x["v"]
        shape_o = q.shape
    st = InputStream(case["seed"] + _DOUT_SEED_OFFSET)
    dout = st.normalish(shape_o).astype(np.float32).astype(FORMATS[case["dtype"]].dtype)
    return {"q": q, "k": k, "v": v, "dout": dout, "cu_seqlens_q": _cu(case["seqlens_q"]),
            "cu_seqlens_k": _cu(case["seqlens_k"]), "max_seqlen_q": case["seqlen_q"],
            "max_seqlen_k": case["seqlen_k"], "causal": case["causal"],
            "window": tuple(case["window"]), "softmax_scale": case["softmax_scale"],
            "softcap": float(case.get("softcap", 0.0)),
            "seqused_q": _used(case.get("seqused_q")), "seqused_k": _used(case.get("seqused_k"))}


def _used(lengths):
    return None if lengths is None else np.asarray(lengths, np.int32)


def unwritten_zeroed(x: np.ndarray, cu: np.ndarray | None, used: np.ndarray | None) -> np.ndarray:
    """``x`` [total, ...] with the rows FA3 does not write set to 0: in each sequence the rows
    past its ``seqused`` (the library's output there is whatever its buffer held)."""
    if cu is None or used is None:
        return x
    x = x.copy()
    for i in range(len(cu) - 1):
        x[cu[i] + used[i]: cu[i + 1]] = 0
    return x


def _cu(lengths):
    """cu_seqlens (int32 [batch + 1], prefix sums from 0) of per-sequence lengths, or None."""
    return None if lengths is None else np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def pack_diffs(diffs: dict) -> dict:
    """The default-mode differences ``{"{key}_r{j}_{grad}_idx": int64, ..._bits: uint16}`` as
    three arrays (one npz entry per array would cost more than the data): ``names`` (the
    keys without ``_idx``, newline-joined, uint8), ``offsets`` int64 [len + 1], and the
    concatenated ``idx`` (int64) and ``bits`` (uint16)."""
    names = sorted(k[: -len("_idx")] for k in diffs if k.endswith("_idx"))
    idx = [np.asarray(diffs[f"{n}_idx"], np.int64) for n in names]
    val = [np.asarray(diffs[f"{n}_bits"], np.uint16) for n in names]
    offsets = np.concatenate([[0], np.cumsum([len(i) for i in idx])]).astype(np.int64)
    return {"names": np.frombuffer("\n".join(names).encode(), np.uint8),
            "offsets": offsets,
            "idx": np.concatenate(idx) if idx else np.zeros(0, np.int64),
            "bits": np.concatenate(val) if val else np.zeros(0, np.uint16)}


def unpack_diffs(packed) -> dict:
    """:func:`pack_diffs`' arrays back to ``{name: (idx, bits)}``."""
    names = bytes(np.asarray(packed["names"])).decode().split("\n") if len(packed["names"]) else []
    off, idx, val = packed["offsets"], packed["idx"], packed["bits"]
    return {n: (idx[off[i]: off[i + 1]], val[off[i]: off[i + 1]]) for i, n in enumerate(names)}
