"""The recorded step traces of the device forward: their configurations and file format.

``python -m simulator measure forward_trace`` ran :data:`CONFIGS` (small shapes, 1-2 traced
CTAs each) on the H200 with ``kernels/fa3_forward.cu`` built with ``-DFA_TRACE=1``, checked each
device trace against the emulator on the spot, and wrote ``forward_traces.npz`` (per
configuration ``c{i}_dump``: the raw dump as uint8 byte planes ``[4, T, slots, words]``, plus
``meta`` JSON: configurations, seeds, provenance with the kernel's SHA-256) and
``forward_traces.json`` (the same metadata) under ``simulator/data/device/``.
:func:`simulator.device.forward_trace.decode` turns a dump into a :class:`simulator.trace.Trace`
(tests/test_device_trace.py replays them on CPU).
"""

from __future__ import annotations

import json

import numpy as np

from ..device.forward import make_launch_config
from ..io import read_npz
from .forward_goldens import call_kwargs as _golden_kwargs
from .forward_goldens import from_planes
from .forward_goldens import make_inputs as _golden_inputs

TRACES_FILE = "forward_traces.npz"


REPORT_FILE = "forward_traces.json"


MAX_FILE_BYTES = 1_500_000


def _tcfg(name, dtype, mask, schedule, softcap, d, trace, *, batch=1, sq=128, sk=128, heads=2,
          heads_kv=1, seqlens_k=None, kblock_m=64, kblock_n=64, descales=False, window=None):
    causal = mask == "causal"
    win = window if window is not None else [-1, -1]
    return {"name": name, "dtype": dtype, "mask": mask, "causal": causal, "window": list(win),
            "schedule": schedule, "softcap": float(softcap), "head_dim": d, "batch": batch,
            "seqlen_q": sq, "seqlen_k": sk, "heads": heads, "heads_kv": heads_kv,
            "seqlens_k": seqlens_k, "kblock_m": kblock_m, "kblock_n": kblock_n,
            "descales": descales, "seed": None, "trace": [list(c) for c in trace]}


def _matrix() -> list[dict]:
    """Small configurations, both schedules, d <= 128 and d > 128 (RescaleOBeforeGemm);
    seeds 20261300 + index."""
    P, O = "plain", "intra_wg_overlap"
    cfgs = [
        _tcfg("bf16_causal_plain", "bf16", "causal", P, 0, 64, [(0, 1, 1)]),
        # two CTAs of one group: the emulator interleaves their events step by step
        _tcfg("bf16_causal_overlap_2ctas", "bf16", "causal", O, 0, 64, [(0, 0, 1), (0, 1, 1)]),
        _tcfg("bf16_d192_causal_overlap_rbg", "bf16", "causal", O, 0, 192, [(0, 0, 0)], sq=64,
              sk=96, heads=1, kblock_n=32),
        # batch 1 has no keys: its CTA records nothing, on both sides
        _tcfg("e4m3_none_overlap_descales", "e4m3", "none", O, 0, 64, [(0, 1, 0), (1, 0, 0)],
              batch=2, sq=64, sk=150, seqlens_k=[150, 0], descales=True),
        _tcfg("e4m3_causal_plain_descales_m128", "e4m3", "causal", P, 0, 64, [(0, 1, 0)],
              kblock_m=128, descales=True),
        _tcfg("f16_local_overlap_softcap", "f16", "local", O, 30, 64, [(0, 0, 1)], sq=160, sk=200,
              window=[24, 16]),
        _tcfg("f16_local_plain_softcap", "f16", "local", P, 30, 64, [(0, 1, 1)], sq=160, sk=200,
              window=[24, 16]),
    ]
    for i, c in enumerate(cfgs):
        c["seed"] = 20261300 + i
    return cfgs


CONFIGS = _matrix()


def make_inputs(cfg: dict) -> dict:
    """The inputs of one configuration (regenerated from its seed, as the goldens' are)."""
    return _golden_inputs(cfg)


def call_kwargs(cfg: dict, inputs: dict) -> dict:
    """Keyword arguments of ``forward`` (device or emulator), ``trace`` included."""
    return {**_golden_kwargs(cfg, inputs), "trace": [tuple(c) for c in cfg["trace"]]}


def launch_config(cfg: dict, inputs: dict):
    """The twin's validated :class:`simulator.device.forward.LaunchConfig` of one configuration
    (host-side only: no GPU needed), which :func:`simulator.device.forward_trace.decode` reads."""
    kw = call_kwargs(cfg, inputs)
    kw.pop("trace")
    return make_launch_config(inputs["q"], inputs["k"], inputs["v"], **kw)


#: how a traces file is made again (named by the errors of :func:`load_traces`)
REGENERATE = "python -m simulator measure forward_trace --out DIR` on a GPU"


def load_traces(path) -> tuple[dict, list[tuple[dict, np.ndarray]]]:
    """Read a traces file: ``(meta, [(config, raw dump uint32 [T, slots, words]), ...])``.

    Read through :func:`simulator.io.read_npz`: the committed recording
    (``simulator/data/device/forward_traces.npz``, listed in ``MANIFEST.json``) is checked
    against its SHA-256 before it is decoded; a fresh, unlisted file is read as is.

    Raises:
        RecordedDataError: missing, unreadable, or altered ("recording corrupt: ...").
    """
    z = read_npz(path, REGENERATE)
    meta = json.loads(str(z["meta"]))
    rows = [(rec, from_planes(z[f"c{rec['index']}_dump"])) for rec in meta["configs"]
            if f"c{rec['index']}_dump" in z]
    return meta, rows
