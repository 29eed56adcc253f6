"""``python -m simulator run``: the FlashAttention-3 forward on real attention inputs.

Loads Q, K, V (by default the embedded all-MiniLM-L6-v2 input of ``simulator/data/inputs/``,
one layer, every head, bf16), emulates the forward bit for bit (:func:`simulator.flash.forward`),
measures O and LSE against the float64 reference (:func:`simulator.flash.reference`), prints a
summary and writes O, LSE, the reference and the trace to an ``.npz`` atomically. Options add a
per-step table of one quad (``--step``), the H200 kernel and its bit diff (``--device``) and a
picture (``--plot``). docs/run.md describes the output; ``--help`` the options.

User errors raise :class:`simulator.cli.UsageError` (or RecordedDataError / DeviceUnavailable)
with a one-line message; :mod:`simulator.cli` turns them into exit code 2.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import stat
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import ml_dtypes
import numpy as np

from .cli import EXIT_MISMATCH, EXIT_OK, UsageError
from .errors import RecordedDataError

EMBEDDED = Path(__file__).resolve().parent / "data" / "inputs" / "minilm.npz"
BUNDLE_FORMAT = "fa3sim-inputs/1"
EXTRACT = "python scripts/extract_minilm.py (see its docstring)"
DEFAULT_OUT = "out/run.npz"
FORMATS = ("bf16", "f16", "e4m3")
DTYPES = {"bf16": np.dtype(ml_dtypes.bfloat16), "f16": np.dtype(np.float16),
          "e4m3": np.dtype(ml_dtypes.float8_e4m3fn)}
#: significand bits (implicit one included) and smallest normal exponent of the output formats
_PRECISION = {"bf16": (8, -126), "f16": (11, -14)}
_E4M3_MAX = 448.0
PLOT_FORMATS = ("png", "pdf", "svg", "jpg", "jpeg")
_UNITS_TARGET = 8  # forward calls to split the work into (for the progress bar)


# ---- the command line --------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"run: {message} (see `python -m simulator run --help`)")


def _cta(text: str) -> tuple[int, int, int]:
    try:
        parts = tuple(int(p) for p in text.split(","))
    except ValueError:
        parts = ()
    if len(parts) != 3 or min(parts) < 0:
        raise argparse.ArgumentTypeError(f"expected B,H,M (three integers >= 0, e.g. 0,1,0), "
                                         f"got {text!r}")
    return parts


def _check_trace_cta_args(argv: list[str]) -> None:
    """``--trace-cta`` values, checked before argparse: a value that starts with '-' (such as
    ``-1,0,0``) would otherwise read as an unknown option. Raises UsageError (one line)."""
    for i, arg in enumerate(argv):
        if arg == "--":
            return
        name, eq, value = arg.partition("=")
        if not (name.startswith("--tr") and "--trace-cta".startswith(name)):
            continue
        if not eq:
            if i + 1 >= len(argv):
                continue  # argparse: "expected one argument"
            value = argv[i + 1]
            if value.startswith("--"):
                continue
        try:
            _cta(value)
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"--trace-cta: {exc}") from None


_WINDOW_MAX = 2**31 - 1


def _window_side(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not -1 <= value <= _WINDOW_MAX:
        raise argparse.ArgumentTypeError(f"expected an integer in -1..{_WINDOW_MAX} (-1 = "
                                         f"unbounded), got {text!r}")
    return value


def _heads(text: str) -> list[int]:
    out: list[int] = []
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            out.extend(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a list like 0,3,5-7, got {text!r}") from None
    if not out or min(out) < 0 or len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"expected distinct heads >= 0 like 0,3,5-7, got {text!r}")
    return out


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m simulator run",
        usage="python -m simulator run [options]",
        description="Emulate the FlashAttention-3 forward (H200, bit for bit) on real attention "
        "inputs, measure it against the float64 reference and save O, LSE and the trace. "
        "Default: the embedded all-MiniLM-L6-v2 input (4 sentences), every head of one layer, bf16.",
        epilog="Exit codes: 0 ok; 1 the emulator and the device differ (--device); 2 usage or "
        "input error (a one-line message); 3 internal error; 130 interrupted (Ctrl-C). "
        "Output: docs/run.md.",
    )
    g = p.add_argument_group("input")
    g.add_argument("--input", metavar="FILE.npz",
                   help="q, k, v arrays [batch, seqlen, heads, head_dim] (float16/32/64, or bf16 "
                   "as saved from ml_dtypes), optional seqlens_k [batch] and e4m3 descales; or a "
                   "file written by scripts/extract_minilm.py (default: the embedded input)")
    g.add_argument("--layer", type=int, metavar="N", help="layer of an extracted input (default: its default "
                   "layer; the embedded input has 0, 2 and 5, default 2)")
    g.add_argument("--dtype", choices=FORMATS, help="input format (default: bf16, or the file's "
                   "float16)")
    g.add_argument("--heads", type=_heads, metavar="LIST",
                   help="only these query heads, e.g. 0,3,5-7 (default: all). With grouped KV "
                   "heads (GQA / MQA) the KV heads of their groups are kept (the summary names "
                   "them); when the chosen heads do not take the same number from each group, "
                   "every chosen head gets its own copy of its group's KV head. The bits are "
                   "those of the full run: CTAs are independent")
    g = p.add_argument_group("forward parameters (as simulator.flash.forward)")
    g.add_argument("--causal", action="store_true", help="bottom-right aligned causal mask")
    g.add_argument("--window", type=_window_side, nargs=2, metavar=("L", "R"), default=(-1, -1),
                   help=f"local window, keys left and right of the diagonal, each -1..{_WINDOW_MAX} "
                   "(-1 = unbounded; default: -1 -1)")
    g.add_argument("--softcap", type=float, default=0.0, metavar="X", help="softcap (default: 0 = off)")
    g.add_argument("--softmax-scale", type=float, metavar="X", help="default 1/sqrt(head_dim)")
    g.add_argument("--kblock-m", type=int, choices=(64, 128, 192),
                   help="rows per CTA (default: FA3's choice for the input, printed as 'dispatch')")
    g.add_argument("--kblock-n", type=int, metavar="N",
                   help="keys per K/V block (default: FA3's choice)")
    g.add_argument("--schedule", choices=("intra_wg_overlap", "plain"),
                   help="mainloop (default: FA3's choice)")
    g = p.add_argument_group("what to show and write")
    g.add_argument("--trace-cta", type=_cta, action="append", metavar="B,H,M",
                   help="record the trace of this CTA (batch, head, m_block); repeatable "
                   "(default: the first CTA that visits a K/V block)")
    g.add_argument("--step", action="store_true",
                   help="print each step's state for one quad of the first traced CTA that "
                   "visits a K/V block (a fully masked CTA has no step; the output says which "
                   "CTA is shown)")
    g.add_argument("--quad", type=int, default=0, metavar="Q",
                   help="which quad for --step: 0..31 in warpgroup 0, 32..63 in warpgroup 1, ... "
                   "(default: 0, threads 0-3)")
    g.add_argument("--device", action="store_true",
                   help="also run the real FA3 library (when torch and fa3-fwd are installed) and "
                   "the twin kernel (CuPy) on the GPU and print the bit diffs and first divergence")
    g.add_argument("--out", default=DEFAULT_OUT, metavar="PATH",
                   help="result .npz, written atomically (default: %(default)s)")
    g.add_argument("--plot", metavar="PATH.png",
                   help="per-head error heat map beside the attention pattern (needs matplotlib; "
                   f"the extension picks the format: {', '.join(PLOT_FORMATS)})")
    g.add_argument("--plot-batch", type=int, default=0, metavar="B",
                   help="batch element to plot (default: 0)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


# ---- inputs --------------------------------------------------------------------------------------
@dataclass
class Workload:
    """Everything the forward gets, plus where it came from."""

    source: str
    fmt: str
    label: str
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    seqlens_k: np.ndarray | None = None
    descales: dict = field(default_factory=dict)  # q_descale, k_descale, v_descale or empty
    heads: list[int] | None = None                # original numbers of the heads in q
    heads_total: int = 0                          # heads of the input before --heads
    query_rows: np.ndarray | None = None          # [batch] real (non-padding) query rows
    notes: list[str] = field(default_factory=list)
    provenance: dict | None = None


def _read_npz(path: Path, what: str) -> dict[str, np.ndarray]:
    if not path.exists():
        raise UsageError(f"{what} {path}: no such file")
    if path.is_dir():
        raise UsageError(f"{what} {path}: is a folder, expected an .npz file")
    try:
        with open(path, "rb") as fh:
            magic = fh.read(6)
        if magic == b"\x93NUMPY":
            raise ValueError("a single .npy array, not an .npz archive of q, k, v")
        if magic[:4] != b"PK\x03\x04":
            raise ValueError("not a zip archive, as numpy.savez writes")
        z = np.load(path, allow_pickle=False)
        with z:
            return {k: z[k] for k in z.files}
    except PermissionError:
        raise UsageError(f"{what} {path}: permission denied") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise UsageError(f"{what} {path}: not a readable .npz file ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else 'no detail'})") from None


def load_workload(args) -> Workload:
    """The input of a run, in the format it will be emulated in (raises UsageError)."""
    if args.input is None:
        return _load_embedded(args)
    path = Path(args.input)
    arrays = _read_npz(path, "--input")
    if "format" in arrays:
        work = _load_bundle(arrays, path, args, embedded=False)
    else:
        work = _load_plain(arrays, path, args)
    check_shapes(work.label, work.q, work.k, work.v, work.seqlens_k, work.descales)
    return work


def check_shapes(where: str, q, k, v, seqlens_k=None, descales: dict | None = None) -> None:
    """Raise UsageError naming the array and the shape it should have: q ``[batch >= 1,
    seqlen_q >= 1, heads >= 1, head_dim]``, k and v ``[batch, seqlen_k, heads_kv, head_dim]``
    with ``heads_kv >= 1`` dividing ``heads``, seqlens_k ``[batch]`` in ``0..seqlen_k``,
    descales a scalar or ``[batch, heads_kv]``. Run before anything indexes the heads."""
    for n, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim != 4:
            raise UsageError(f"{where}: {n} has {x.ndim} dimensions {list(x.shape)}, expected 4 "
                             f"[batch, seqlen, heads, head_dim]")
    b, sq, h, d = q.shape
    if b < 1 or sq < 1 or h < 1:
        raise UsageError(f"{where}: q has shape {list(q.shape)}, expected [batch >= 1, "
                         f"seqlen_q >= 1, heads >= 1, head_dim]")
    bk, sk, hkv, dk = k.shape
    if bk != b or dk != d or hkv < 1 or h % hkv:
        raise UsageError(f"{where}: k has shape {list(k.shape)}, expected [{b}, seqlen_k, "
                         f"heads_kv, {d}] with heads_kv >= 1 dividing the {h} heads of q")
    if v.shape != k.shape:
        raise UsageError(f"{where}: v has shape {list(v.shape)}, expected k's shape "
                         f"{list(k.shape)}")
    if seqlens_k is not None:
        s = np.asarray(seqlens_k)
        if s.shape != (b,):
            raise UsageError(f"{where}: seqlens_k has shape {list(s.shape)}, expected [{b}] "
                             f"(one per batch element)")
        if s.size and (s.min() < 0 or s.max() > sk):
            raise UsageError(f"{where}: seqlens_k values must be in 0..{sk} (k's seqlen), got "
                             f"{s.tolist()}")
    for n, x in (descales or {}).items():
        x = np.asarray(x)
        if x.shape not in ((), (b, hkv)):
            raise UsageError(f"{where}: {n} has shape {list(x.shape)}, expected a scalar or "
                             f"[{b}, {hkv}] ([batch, heads_kv])")


def _load_embedded(args) -> Workload:
    try:
        raw = EMBEDDED.read_bytes()
    except FileNotFoundError:
        raise RecordedDataError(f"{EMBEDDED} is missing (a broken install?); regenerate it with "
                                f"`{EXTRACT}`") from None
    except OSError as exc:
        raise RecordedDataError(f"{EMBEDDED} is unreadable ({type(exc).__name__}: {exc}); "
                                f"regenerate it with `{EXTRACT}`") from None
    check_embedded_sha256(EMBEDDED, raw)
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except Exception as exc:  # zipfile / format errors of a damaged file
        raise RecordedDataError(f"{EMBEDDED} is unreadable ({type(exc).__name__}: {exc}); "
                                f"regenerate it with `{EXTRACT}`") from None
    return _load_bundle(arrays, EMBEDDED, args, embedded=True)


def check_embedded_sha256(path: Path, raw: bytes) -> None:
    """The embedded input's bytes against the ``npz_sha256`` of its provenance file (the
    ``.json`` beside it); RecordedDataError (exit 2) when it differs or cannot be checked."""
    from .io import sha256_bytes

    prov_path = path.with_suffix(".json")
    try:
        want = json.loads(prov_path.read_text()).get("npz_sha256")
    except (OSError, ValueError, AttributeError) as exc:
        raise RecordedDataError(f"recording corrupt: {prov_path} (the provenance of {path.name}) is "
                                f"missing or unreadable ({type(exc).__name__}); regenerate both "
                                f"with `{EXTRACT}`") from None
    if not isinstance(want, str):
        raise RecordedDataError(f"recording corrupt: {prov_path} records no npz_sha256 of "
                                f"{path.name}; regenerate both with `{EXTRACT}`")
    got = sha256_bytes(raw)
    if got != want:
        raise RecordedDataError(f"recording corrupt: {path} sha256 {got[:16]}... differs from the "
                                f"npz_sha256 {want[:16]}... of {prov_path.name}; regenerate both "
                                f"with `{EXTRACT}` (or reinstall the package)")


def _load_bundle(arrays, path: Path, args, *, embedded: bool) -> Workload:
    """A file written by scripts/extract_minilm.py ([layer, batch, seqlen, heads, head_dim])."""
    err = RecordedDataError if embedded else UsageError
    fmt_tag = str(arrays["format"])
    if fmt_tag != BUNDLE_FORMAT:
        raise err(f"{path}: unknown input format {fmt_tag!r} (expected {BUNDLE_FORMAT!r})")
    need = ["layers", "seqlens", "default_layer"] + [f"{t}_{s}" for t in "qkv"
                                                      for s in ("bf16", "e4m3", "descale")]
    missing = [n for n in need if n not in arrays]
    if missing:
        raise err(f"{path}: missing arrays {missing}; regenerate it with `{EXTRACT}`")
    layers = [int(x) for x in np.ravel(arrays["layers"])]
    for n in need[3:]:
        want = 3 if n.endswith("_descale") else 5
        if arrays[n].ndim != want or arrays[n].shape[0] != len(layers):
            raise err(f"{path}: {n} has shape {list(arrays[n].shape)}, expected {want} dimensions "
                      f"with {len(layers)} layers first; regenerate it with `{EXTRACT}`")
    if arrays["seqlens"].ndim != 1 or arrays["seqlens"].dtype.kind not in "iu":
        raise err(f"{path}: seqlens has shape {list(arrays['seqlens'].shape)}, expected [batch] "
                  f"integers; regenerate it with `{EXTRACT}`")
    seq = arrays["seqlens"]
    if seq.size and (seq.min() < 1 or seq.max() > arrays["q_bf16"].shape[2]):
        raise err(f"{path}: seqlens {seq.tolist()} must be in 1..{arrays['q_bf16'].shape[2]} (every "
                  f"sentence at least one token, at most the stored length); regenerate it with "
                  f"`{EXTRACT}`")
    layer = int(arrays["default_layer"]) if args.layer is None else args.layer
    if layer not in layers:
        raise UsageError(f"--layer {layer}: {path.name} holds layers {layers}")
    li = layers.index(layer)
    fmt = args.dtype or "bf16"
    prov = _provenance(path)
    if fmt == "e4m3":
        q, k, v = (arrays[f"{t}_e4m3"][li].view(DTYPES["e4m3"]) for t in "qkv")
        descales = {f"{t}_descale": np.ascontiguousarray(arrays[f"{t}_descale"][li], np.float32)
                    for t in "qkv"}
    else:
        q, k, v = (arrays[f"{t}_bf16"][li].view(DTYPES["bf16"]) for t in "qkv")
        descales = {}
    notes = []
    if fmt == "f16":
        f32 = [x.astype(np.float32) for x in (q, k, v)]
        q, k, v = (x.astype(np.float16) for x in f32)
        changed = sum(int((a.astype(np.float32) != b).sum()) for a, b in zip((q, k, v), f32,
                                                                            strict=True))
        notes.append(f"f16: the bf16 values converted ({changed} of {3 * q.size} changed by the "
                     f"conversion)")
    model = (prov or {}).get("model", "?")
    package = (prov or {}).get("package", {})
    n_sent = len(arrays["seqlens"])
    where = "embedded" if embedded else str(path)
    source = (f"{where}: {model} layer {layer} of {layers}"
              + (f" ({package.get('name')} {package.get('version')})" if package else "")
              + f", {n_sent} sentences")
    seqlens = arrays["seqlens"].astype(np.int64)
    return Workload(source, fmt, "embedded input" if embedded else f"--input {path}",
                    np.ascontiguousarray(q), np.ascontiguousarray(k),
                    np.ascontiguousarray(v), seqlens, descales, notes=notes, provenance=prov,
                    query_rows=seqlens)


def _provenance(path: Path) -> dict | None:
    try:
        return json.loads(path.with_suffix(".json").read_text())
    except (OSError, ValueError):
        return None


def _load_plain(arrays, path: Path, args) -> Workload:
    """A user file: q, k, v, optional seqlens_k and q/k/v_descale."""
    missing = [n for n in "qkv" if n not in arrays]
    if missing:
        raise UsageError(f"--input {path}: missing array {', '.join(missing)} (found: "
                         f"{', '.join(sorted(arrays)) or 'none'}); expected q, k, v")
    if args.layer is not None:
        raise UsageError(f"--layer applies to files written by scripts/extract_minilm.py; "
                         f"{path.name} holds plain q, k, v")
    src = {}
    for n in "qkv":
        x = arrays[n]
        if x.ndim != 4:
            raise UsageError(f"--input {path}: {n} has {x.ndim} dimensions {list(x.shape)}, "
                             f"expected 4 [batch, seqlen, heads, head_dim]")
        if x.dtype.kind == "V" and x.dtype.itemsize == 2:
            x = x.view(DTYPES["bf16"])  # ml_dtypes.bfloat16 as numpy.save stores it
        elif x.dtype not in (np.float16, np.float32, np.float64):
            raise UsageError(f"--input {path}: {n} has dtype {x.dtype}, expected float16, "
                             f"float32, float64 or bfloat16")
        src[n] = x
    given = {n: arrays[n] for n in ("q_descale", "k_descale", "v_descale") if n in arrays}
    seqlens = arrays.get("seqlens_k")
    if seqlens is not None and (seqlens.ndim != 1 or seqlens.dtype.kind not in "iu"):
        raise UsageError(f"--input {path}: seqlens_k must be integers [batch], got "
                         f"{seqlens.dtype} {list(seqlens.shape)}")
    check_shapes(f"--input {path}", src["q"], src["k"], src["v"], seqlens, given)
    kinds = {str(x.dtype) for x in src.values()}
    if len(kinds) > 1:
        got = ", ".join(str(src[n].dtype) for n in "qkv")
        raise UsageError(f"--input {path}: q, k, v dtypes differ ({got})")
    dt = src["q"].dtype
    fmt = args.dtype or ("f16" if dt == np.float16 else "bf16")
    notes: list[str] = []
    descales: dict = {}
    if given and fmt != "e4m3":
        raise UsageError(f"--input {path}: it holds {', '.join(given)}: its q, k, v are FP8-scaled "
                         f"values for --dtype e4m3, not {fmt}")
    if fmt == "e4m3":
        if given:
            if len(given) != 3:
                raise UsageError(f"--input {path}: give all of q_descale, k_descale, v_descale "
                                 f"or none (found {', '.join(given)})")
            for n, d in given.items():
                if d.dtype.kind != "f":
                    raise UsageError(f"--input {path}: {n} has dtype {d.dtype}, expected float32")
                descales[n] = np.asarray(d, dtype=np.float32)
            qkv = {n: _round(src[n], "e4m3") for n in "qkv"}
            notes.append("e4m3: q, k, v rounded (satfinite) with the file's descales")
        else:
            qkv, descales = _quantize_fp8(src, seqlens)
            notes.append("e4m3: per (batch, kv head) descale = amax / 448, values rounded "
                         "(satfinite) as FP8 attention does")
    else:
        qkv = {n: src[n] if src[n].dtype == DTYPES[fmt] else _round(src[n], fmt) for n in "qkv"}
        if dt != DTYPES[fmt]:
            notes.append(f"{fmt}: q, k, v rounded from {dt} (to nearest even"
                         + (", via float32" if dt == np.float64 else "") + ")")
        inf = sum(int(np.isinf(qkv[n].astype(np.float32)).sum() - np.isinf(src[n]).sum())
                  for n in "qkv")
        if inf:
            notes.append(f"warning: {inf} values overflowed {fmt} to infinity")
    return Workload(f"{path}", fmt, f"--input {path}", qkv["q"], qkv["k"], qkv["v"],
                    None if seqlens is None else seqlens.astype(np.int64), descales, notes=notes)


def _round(x: np.ndarray, fmt: str) -> np.ndarray:
    from .numerics import convert

    return np.ascontiguousarray(convert(np.asarray(x, dtype=np.float32), fmt))


def _quantize_fp8(src: dict, seqlens) -> tuple[dict, dict]:
    """Per (batch, kv head) descales ``amax / 448`` (amax of k, v over the present keys)."""
    out, descales = {}, {}
    for n in "qkv":
        x = src[n].astype(np.float64)
        b, s = x.shape[:2]
        present = np.ones((b, s), dtype=bool)
        if n != "q" and seqlens is not None and seqlens.shape == (b,):
            present = np.arange(s)[None, :] < seqlens[:, None]
        amax = np.abs(np.where(present[:, :, None, None] & np.isfinite(x), x, 0.0)).max(axis=(1, 3))
        if n == "q":  # descales are per kv head: fold the query heads of a group together
            hkv = src["k"].shape[2]
            if hkv and amax.shape[1] % hkv == 0:
                amax = amax.reshape(b, hkv, -1).max(axis=2)
        d = np.where(amax > 0, amax / _E4M3_MAX, 1.0).astype(np.float32)
        per_head = d if n != "q" else np.repeat(d, max(1, x.shape[2] // d.shape[1]), axis=1)
        scaled = x / per_head.astype(np.float64)[:, None, :, None]
        out[n] = _round(scaled, "e4m3")
        descales[f"{n}_descale"] = d
    return out, descales


def kv_heads_for(heads: list[int], h: int, hkv: int) -> tuple[list[int], bool]:
    """The KV heads that query ``heads`` (of ``h``, grouped over ``hkv`` KV heads) use, in the
    order kept: ``(kv, shared)``. ``shared``: each kept KV head serves the same number of
    chosen heads, listed together, so the selection stays a grouped layout (``kv`` one per
    group); else ``kv`` has one entry per chosen head (its group's KV head, copied)."""
    group = h // hkv
    own = [x // group for x in heads]
    kept = list(dict.fromkeys(own))                       # first appearance order
    per = len(heads) // len(kept)
    shared = len(heads) % len(kept) == 0 and own == [kv for kv in kept for _ in range(per)]
    return (kept, True) if shared else (own, False)


def select_heads(work: Workload, heads: list[int] | None) -> None:
    """Keep only the query ``heads`` and the KV heads they use (:func:`kv_heads_for`);
    remembers their original numbers. CTAs are independent, so each kept head's bits are
    those of the full input."""
    h, hkv = work.q.shape[2], work.k.shape[2]
    work.heads_total = h
    if heads is None:
        work.heads = list(range(h))
        return
    bad = [x for x in heads if x >= h]
    if bad:
        raise UsageError(f"--heads: {bad} out of range; the input has heads 0..{h - 1}")
    kv, shared = kv_heads_for(heads, h, hkv)
    if hkv != h:
        if shared:
            work.notes.append(f"--heads: KV head{'s' if len(kv) > 1 else ''} "
                              f"{', '.join(map(str, kv))} of {hkv} (the groups of the chosen "
                              f"query heads)")
        else:
            work.notes.append(f"--heads: the chosen heads take unequal shares of their KV groups: "
                              f"each has its own copy of its group's KV head ({', '.join(map(str, kv))} "
                              f"of {hkv})")
    idx, kv_idx = np.array(heads), np.array(kv)
    work.q = np.ascontiguousarray(work.q[:, :, idx])
    work.k, work.v = (np.ascontiguousarray(x[:, :, kv_idx]) for x in (work.k, work.v))
    work.descales = {n: np.ascontiguousarray(np.broadcast_to(d, (work.q.shape[0], hkv))[:, kv_idx])
                     for n, d in work.descales.items()}
    work.heads = list(heads)


# ---- the forward, split into units for the progress bar ---------------------------------------------
def forward_kwargs(args, work: Workload) -> dict:
    kw = dict(softmax_scale=args.softmax_scale, causal=args.causal, window=tuple(args.window),
              softcap=args.softcap, seqlens_k=work.seqlens_k, kblock_m=args.kblock_m,
              kblock_n=args.kblock_n, schedule=args.schedule)
    kw.update(work.descales)
    return kw


def _units(batch: int, heads: int, heads_kv: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """(b, query heads, kv heads) per forward call: whole KV groups, about _UNITS_TARGET calls."""
    group = heads // heads_kv
    per_batch = max(1, math.ceil(_UNITS_TARGET / batch))
    chunk = max(1, math.ceil(heads_kv / per_batch))
    out = []
    for b in range(batch):
        for k0 in range(0, heads_kv, chunk):
            kvh = np.arange(k0, min(k0 + chunk, heads_kv))
            qh = np.arange(kvh[0] * group, (kvh[-1] + 1) * group)
            out.append((b, qh, kvh))
    return out


def is_varlen(work: Workload) -> bool:
    """True for a batch of sequences of their own lengths (the extracted sentences:
    ``work.query_rows``): run as one FA3 varlen launch, no padding rows."""
    return work.query_rows is not None


def varlen_lengths(work: Workload) -> tuple[np.ndarray, np.ndarray]:
    """([batch] query rows, [batch] keys) of a varlen workload."""
    rows = np.asarray(work.query_rows, dtype=np.int64)
    keys = rows if work.seqlens_k is None else np.asarray(work.seqlens_k, dtype=np.int64)
    return rows, keys


def _one_sequence(work: Workload, kwargs: dict, b: int, hs=slice(None), ks=slice(None)) -> dict:
    """Arguments of sequence ``b`` of a varlen workload as one launch of
    :func:`simulator.flash.forward`: its rows and keys, the launch's max_seqlen_q / k."""
    rows, keys = varlen_lengths(work)
    sub = {n: x for n, x in kwargs.items() if n != "seqlens_k"}
    for n in ("q_descale", "k_descale", "v_descale"):
        if kwargs.get(n) is not None:
            d = np.broadcast_to(np.asarray(kwargs[n], np.float32), (work.q.shape[0], work.k.shape[2]))
            sub[n] = np.ascontiguousarray(d[b: b + 1, ks])
    sub.update(max_seqlen_q=max(1, int(rows.max())), max_seqlen_k=max(1, int(keys.max())))
    L, Lk = int(rows[b]), int(keys[b])
    return dict(q=work.q[b: b + 1, :L, hs], k=work.k[b: b + 1, :Lk, ks],
                v=work.v[b: b + 1, :Lk, ks], kw=sub)


def sequence_configs(work: Workload, kwargs: dict) -> list:
    """The :class:`simulator.flash.forward.Config` of each sequence of a varlen workload."""
    from .flash import make_config

    out = []
    for b in range(work.q.shape[0]):
        a = _one_sequence(work, kwargs, b)
        out.append(make_config(a["q"], a["k"], a["v"], **a["kw"]))
    return out


def _emulate_varlen(work: Workload, kwargs: dict, trace_ctas, progress=None):
    """The varlen launch through :func:`simulator.fa3.flash_attn_varlen_func`, one
    (sequence, head chunk) at a time: sequences and heads are independent in an unsplit
    launch, so the bits equal one call's. With --kblock-m / --kblock-n / --schedule (tiles
    FA3's API does not take), :func:`simulator.flash.forward` with the launch's max_seqlen.
    Returns padded ``(out, lse, trace)``: rows past a sequence's length hold 0 and -inf."""
    from . import fa3
    from .flash import forward
    from .trace import Trace

    B, S, H, _ = work.q.shape
    out = lse = None
    trace = Trace()
    tiles = any(kwargs.get(n) is not None for n in ("kblock_m", "kblock_n", "schedule"))
    for b, qh, kvh in _units(B, H, work.k.shape[2]):
        hs, ks = slice(qh[0], qh[-1] + 1), slice(kvh[0], kvh[-1] + 1)
        a = _one_sequence(work, kwargs, b, hs, ks)
        local = sorted({(0, work.heads.index(h) - qh[0], m) for (bb, h, m) in trace_ctas
                        if bb == b and work.heads.index(h) in qh})
        L, Lk = a["q"].shape[1], a["k"].shape[1]
        if tiles:
            r = forward(a["q"], a["k"], a["v"], **a["kw"], trace=local or None)
            o, l_, t = r.out[0], r.lse[0], r.trace
        else:
            kw = a["kw"]
            got = fa3.flash_attn_varlen_func(
                a["q"][0], a["k"][0], a["v"][0], np.array([0, L], np.int32),
                np.array([0, Lk], np.int32), kw["max_seqlen_q"], kw["max_seqlen_k"],
                softmax_scale=kw["softmax_scale"], causal=kw["causal"], window_size=kw["window"],
                softcap=kw["softcap"], q_descale=kw.get("q_descale"), k_descale=kw.get("k_descale"),
                v_descale=kw.get("v_descale"), return_attn_probs=True, trace=local or None)
            o, l_, t = got[0], got[1], (got[2] if local else None)
        if out is None:
            out = np.zeros((B, S, H, o.shape[-1]), dtype=o.dtype)
            lse = np.full((B, H, S), -np.inf, dtype=np.float32)
        out[b, :L, hs], lse[b, hs, :L] = o, l_
        for e in (t or []):
            e.cta = (b, work.heads[qh[0] + e.cta[1]], e.cta[2])
            trace.events.append(e)
        if progress:
            progress.update(1)
    return out, lse, trace


def emulate(work: Workload, kwargs: dict, trace_ctas, progress=None):
    """:func:`simulator.flash.forward` over the whole input, one (batch, head chunk) at a time
    (a varlen workload: :func:`_emulate_varlen`).

    CTAs are independent, so the bits equal a single call's. ``trace_ctas`` and the trace's
    CTAs use the input's head numbers (``work.heads``). Returns ``(out, lse, trace)``.
    """
    from .flash import forward
    from .trace import Trace

    if is_varlen(work):
        return _emulate_varlen(work, kwargs, trace_ctas, progress)
    q, k, v = work.q, work.k, work.v
    B, _, H, _ = q.shape
    out = None
    lse = np.empty((B, H, q.shape[1]), dtype=np.float32)
    trace = Trace()
    units = _units(B, H, k.shape[2])
    for b, qh, kvh in units:
        sub = dict(kwargs)
        if kwargs.get("seqlens_k") is not None:
            sub["seqlens_k"] = np.asarray(kwargs["seqlens_k"])[b: b + 1]
        for n in ("q_descale", "k_descale", "v_descale"):
            if kwargs.get(n) is not None:
                d = np.broadcast_to(np.asarray(kwargs[n], np.float32), (B, k.shape[2]))
                sub[n] = np.ascontiguousarray(d[b: b + 1, kvh])
        hs, ks = slice(qh[0], qh[-1] + 1), slice(kvh[0], kvh[-1] + 1)
        local = {(0, work.heads.index(h) - qh[0], m) for (bb, h, m) in trace_ctas
                 if bb == b and work.heads.index(h) in qh}
        r = forward(q[b: b + 1, :, hs], k[b: b + 1, :, ks], v[b: b + 1, :, ks], **sub,
                    trace=sorted(local) if local else None)
        if out is None:
            out = np.empty(q.shape, dtype=r.out.dtype)
        out[b: b + 1, :, hs] = r.out
        lse[b: b + 1, hs] = r.lse
        if r.trace is not None:
            for e in r.trace:
                e.cta = (b, work.heads[qh[0] + e.cta[1]], e.cta[2])
                trace.events.append(e)
        if progress:
            progress.update(1)
    return out, lse, trace


class _Progress:
    """tqdm when installed, else a counter on stderr; only on a terminal."""

    def __init__(self, total: int, enabled: bool):
        self.bar = None
        self.total, self.done = total, 0
        self.enabled = enabled and sys.stderr.isatty()
        if not self.enabled:
            return
        try:
            from tqdm import tqdm
        except ImportError:
            self._show()
            return
        self.bar = tqdm(total=total, desc="emulating", unit="call", file=sys.stderr, leave=False)

    def _show(self):
        print(f"\remulating: {self.done}/{self.total} forward calls", end="", file=sys.stderr,
              flush=True)

    def update(self, n: int):
        if not self.enabled:
            return
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        else:
            self._show()

    def close(self):
        if self.bar is not None:
            self.bar.close()
        elif self.enabled:
            print("\r" + " " * 60 + "\r", end="", file=sys.stderr, flush=True)


# ---- measurements ----------------------------------------------------------------------------------
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
    else:
        m.update({k: None for k in ("out_max_ulp", "out_mean_ulp", "out_p99_ulp",
                                    "out_within_half_ulp", "out_worst", "out_worst_values",
                                    "out_rel_frobenius")})
        m["per_head_max_ulp"] = [None] * o.shape[2]
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
    if m.get("out_worst") is not None:
        _, t, h, c = m["out_worst"]
        m["out_worst"] = (int(bi[t]), int(ri[t]), h, c)
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


# ---- printing ----------------------------------------------------------------------------------------
def _f(x) -> str:
    return str(np.float32(x))


def _shape(x) -> str:
    return "[" + ", ".join(str(s) for s in x.shape) + "]"


def summary(work: Workload, cfg, m: dict, times: dict, n_calls: int, seq_cfgs=None) -> str:
    """The printed summary; ``seq_cfgs``: each sequence's config of a varlen workload."""
    out_fmt = "bf16" if work.fmt == "e4m3" else work.fmt
    B, S, H, d = work.q.shape
    heads = work.heads
    lines = [f"input     {work.source}"]
    lines += [f"          {n}" for n in work.notes]
    if len(heads) == work.heads_total:
        head_text = f"all {H} heads" if H > 1 else "1 head"
    else:
        head_text = f"head{'s' if len(heads) > 1 else ''} {_ranges(heads)} of {work.heads_total}"
    if seq_cfgs is not None:
        rows, keys = varlen_lengths(work)
        cu = np.concatenate([[0], np.cumsum(rows)]).tolist()
        T, Tk, hkv = int(rows.sum()), int(keys.sum()), work.k.shape[2]
        lines.append(f"shapes    varlen: {len(rows)} sequences, cu_seqlens {cu}, max_seqlen "
                     f"{int(rows.max())}; q [{T}, {H}, {d}], k/v [{Tk}, {hkv}, {d}] {work.fmt} "
                     f"({head_text}) -> O {out_fmt} [{T}, {H}, {work.v.shape[-1]}], LSE float32 "
                     f"[{H}, {T}] (no padding rows)")
    else:
        lines.append(f"shapes    q {_shape(work.q)}, k/v {_shape(work.k)} {work.fmt} ({head_text}) -> "
                     f"O {out_fmt} {_shape(work.q)}, LSE float32 [{B}, {H}, {S}]")
    if work.seqlens_k is not None and seq_cfgs is None:
        lines.append(f"          seqlens_k {work.seqlens_k.tolist()} (later keys are absent)")
    scale = float(cfg.consts["softmax_scale"])
    default = math.isclose(scale, 1 / math.sqrt(d), rel_tol=1e-6)
    win = cfg.window
    mask = ("causal" if win == (-1, 0) else "no mask" if win == (-1, -1)
            else f"window ({win[0]}, {win[1]})")
    lines.append(f"params    softmax_scale {_f(scale)}{f' (1/sqrt({d}))' if default else ''}, "
                 f"{mask}, softcap {cfg.softcap:g}, kBlockM x kBlockN {cfg.kblock_m} x {cfg.kblock_n}, "
                 f"{cfg.schedule}")
    disp = cfg.dispatch
    own = (cfg.kblock_m, cfg.kblock_n, cfg.schedule) == (disp.kblock_m, disp.kblock_n, disp.schedule)
    lines.append(f"dispatch  {'FA3' if own else 'overridden; FA3 would run'}: {disp.describe()}")
    if work.descales:
        dq = work.descales["q_descale"]
        lines.append(f"          descales q [{_f(dq.min())} .. {_f(dq.max())}], k "
                     f"[{_f(work.descales['k_descale'].min())} .. "
                     f"{_f(work.descales['k_descale'].max())}], v [{_f(work.descales['v_descale'].min())}"
                     f" .. {_f(work.descales['v_descale'].max())}]")
    ctas, visits = _work_counts(cfg if seq_cfgs is None else seq_cfgs)
    lines.append(f"work      {_plural(ctas, 'CTA')}, {_plural(visits, 'K/V block visit')}, "
                 f"{_plural(n_calls, 'forward call')}")
    lines += _error_lines(m, out_fmt, heads)
    lines.append(f"time      emulation {times['emulate']:.1f} s (+ {times['setup']:.1f} s loading the "
                 f"MUFU tables), reference {times['reference']:.2f} s")
    return "\n".join(lines)


def _error_lines(m: dict, out_fmt: str, heads: list[int]) -> list[str]:
    """The error, masked and nonfinite lines of the summary (statistics over finite pairs)."""
    lines = [f"error     O vs float64 reference, in {out_fmt} ulps at the reference value:"]
    if m["out_excluded"]:
        lines.append(f"            over the {m['out_pairs']:,} of {m['out_elements']:,} elements "
                     f"finite on both sides; excluded {m['out_excluded']:,}: emulator "
                     f"{m['out_nan']:,} NaN, {m['out_inf']:,} inf; reference {m['ref_out_nan']:,} "
                     f"NaN, {m['ref_out_inf']:,} inf")
    if m["out_pairs"]:
        wb, wr, wh, wc = m["out_worst"]
        got, want = m["out_worst_values"]
        lines.append(f"            mean {m['out_mean_ulp']:.3g} ulp, 99th percentile "
                     f"{m['out_p99_ulp']:.3g} ulp, {100 * m['out_within_half_ulp']:.1f}% within "
                     f"0.5 ulp (correctly rounded)")
        # an ulp at a reference value near zero is tiny: say so next to the max it explains
        rms = m.get("out_ref_rms") or 0.0
        small = abs(want) < 0.01 * rms
        where = (f"batch {wb}, row {wr}, head {heads[wh]}, dim {wc}: {got:.6g} for {want:.6g}, "
                 f"absolute error {abs(got - want):.2g}")
        lines.append(f"            max {m['out_max_ulp']:.3g} ulp"
                     + (f" at a near-zero output (|ref| under 1% of its rms {rms:.2g}; {where})"
                        if small else f" ({where})"))
        lines.append(f"            relative Frobenius {m['out_rel_frobenius']:.3g}")
    else:
        lines.append("            n/a (no finite pairs)")
    if m["lse_pairs"]:
        lb, lh, lr = m["lse_worst"]
        text = (f"          LSE: max |error| {m['lse_max_abs']:.3g} (batch {lb}, head {heads[lh]}, "
                f"row {lr}), mean {m['lse_mean_abs']:.3g}")
    else:
        text = "          LSE: n/a (no finite pairs)"
    lines.append(text)
    if m["lse_pairs"] < m["lse_rows"]:
        lines.append(f"            over the {m['lse_pairs']:,} of {m['lse_rows']:,} rows finite on "
                     f"both sides; non-finite: {m['lse_nonfinite_emu_only']:,} rows in the "
                     f"emulator only, {m['lse_nonfinite_ref_only']:,} in the reference only, "
                     f"{m['lse_nonfinite_both']:,} in both")
    per = m["per_head_max_ulp"]
    lines.append("          max ulp per head: " + " ".join(
        f"{heads[i]}:{'n/a' if x is None else format(x, '.2g')}" for i, x in enumerate(per)))
    n = m["rows_no_key"]
    text = (f"masked    {n:,} of {_plural(m['rows'], 'row')} {'sees' if n == 1 else 'see'} no "
            f"key")
    if n:
        bad_lse = n - m["rows_no_key_lse_neginf"]
        bad_out = n - m["rows_no_key_out_zero"]
        if not bad_lse and not bad_out:
            text += ": O = 0 and LSE = -inf on " + ("all of them" if n > 1 else "it")
        else:
            text += (f": but the emulator's LSE is not -inf on {bad_lse:,} and its O not zero on "
                     f"{bad_out:,} of them")
    if m["rows_with_keys_lse_neginf"]:
        text += (f"; the emulator's LSE is -inf on {_plural(m['rows_with_keys_lse_neginf'], 'row')} that "
                 f"see keys")
    lines.append(text)
    lines.append(f"nonfinite O: {m['out_nan']} NaN, {m['out_inf']} inf; LSE: {m['lse_nan']} NaN, "
                 f"{m['lse_posinf']} +inf, {m['lse_neginf']} -inf")
    ref_bad = m["ref_out_nan"] + m["ref_out_inf"] + m["ref_lse_nan"] + m["ref_lse_posinf"]
    if ref_bad:
        lines.append(f"          reference O: {m['ref_out_nan']} NaN, {m['ref_out_inf']} inf; LSE: "
                     f"{m['ref_lse_nan']} NaN, {m['ref_lse_posinf']} +inf, "
                     f"{m['ref_lse_neginf']} -inf")
    return lines


def _plural(n: int, word: str) -> str:
    """``1 CTA``, ``2 CTAs``, ``1,024 events``."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _ranges(xs: list[int]) -> str:
    parts, i = [], 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        parts.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ",".join(parts)


def _work_counts(cfg) -> tuple[int, int]:
    """(CTAs, K/V block visits) of a launch (a list: the sequences of a varlen launch)."""
    from .flash.masks import block_range

    if isinstance(cfg, list):
        counts = [_work_counts(c) for c in cfg]
        return sum(c for c, _ in counts), sum(v for _, v in counts)
    m_blocks = -(-cfg.seqlen_q // cfg.kblock_m)
    visits = 0
    for b in range(cfg.batch):
        for mb in range(m_blocks):
            lo, hi = block_range(mb, cfg.seqlen_q, int(cfg.seqlens_k[b]), cfg.kblock_m,
                                 cfg.kblock_n, cfg.window)
            visits += max(0, hi - lo)
    return cfg.batch * cfg.heads * m_blocks, visits * cfg.heads


def step_table(trace, cta, quad: int, kblock_m: int, heads: list[int]) -> str:
    """Each step's state for one quad of one CTA (four threads, their two rows)."""
    from .hw import rowcol_view

    events = trace.for_cta(cta)
    W = kblock_m // 64
    if not 0 <= quad < 32 * W:
        raise UsageError(f"--quad: expected 0..{32 * W - 1} for kBlockM = {kblock_m}, got {quad}")
    w, ql = divmod(quad, 32)
    threads = 4 * ql + np.arange(4)
    view = rowcol_view("m64n32k16")  # the thread -> row map is the same for every N
    rows = view.row[threads[0]].astype(int)
    g0 = cta[2] * kblock_m + 64 * w
    head = f"CTA (batch {cta[0]}, head {cta[1]}, m_block {cta[2]}), warpgroup {w}, quad {ql}: " \
           f"threads {w * 128 + threads[0]}-{w * 128 + threads[-1]} hold rows {g0 + rows[0]} " \
           f"and {g0 + rows[1]}\n(row values as [row {g0 + rows[0]}, row {g0 + rows[1]}]; " \
           "row_sum is thread-local until finalize; frag = the thread's first two elements of " \
           f"row {g0 + rows[0]}: columns 2t, 2t+1 of the tile)"
    table = [("step", "n", "thread", "row_max", "row_sum", "scores_scale", "lse", "frag")]
    for e in events:
        for i, t in enumerate(threads):
            def pair(name, e=e, t=t):
                if name not in e.data:
                    return "."
                return ", ".join(_f(v) for v in np.ravel(e.data[name][w, t])[:2])
            frag = "."
            for name in ("acc_s", "acc_o"):
                if name in e.data:
                    f = e.data[name][w, t]
                    vr = rowcol_view(f"m64n{f.shape[-1] * 2}k16")
                    frag = f"{name} " + ", ".join(_f(f[r]) for r in vr.reg[0, :2])
            table.append((e.step if i == 0 else "", "" if e.n_block is None or i else
                          str(e.n_block), str(int(w * 128 + t)), pair("row_max"), pair("row_sum"),
                          pair("scores_scale"), pair("lse"), frag))
    widths = [max(len(row[c]) for row in table) for c in range(len(table[0]))]
    lines = [head] + ["  ".join(x.ljust(wd) for x, wd in zip(row, widths, strict=True)).rstrip()
                      for row in table]
    return "\n".join(lines)


# ---- the device --------------------------------------------------------------------------------------
def check_device() -> None:
    """Raise DeviceUnavailable (exit 2) naming what is missing: CuPy, a GPU, the twin."""
    from .device import runtime

    runtime.require_gpu()


def run_device(work: Workload, kwargs: dict, out, lse, trace, trace_ctas, kblock_m) -> tuple[bool, str]:
    """The real FA3 library (when installed) and the twin kernel on the same input:
    ``(identical to both, report)``."""
    from . import compare
    from .device import fa3_library
    from .device import forward as device_forward

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
    from . import compare
    from .device import fa3_library
    from .device import forward as device_forward

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
                  f"{_plural(B, 'sequence')}", f"          O:   {rep_o}", f"          LSE: {rep_l}"]
        same = rep_o.identical and rep_l.identical
    else:
        lines.append(f"library   not run: {why}")
    t_out, t_lse = [], []
    for b in range(B):
        a = _one_sequence(work, kwargs, b)
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
    from . import compare
    from .device import forward as device_forward
    from .trace import Trace

    bo = out.view(np.uint16) != d_out.view(np.uint16)                      # [B, S, H, d]
    bl = lse.view(np.uint32) != d_lse.view(np.uint32)                      # [B, H, S]
    bad_rows = bo.any(axis=3).transpose(0, 2, 1) | bl                      # [B, H, S]
    b, h, r = (int(i) for i in np.argwhere(bad_rows)[0])
    cta = (b, h, r // kblock_m)
    where = (f"CTA (batch {b}, head {work.heads[h]}, m_block {cta[2]}), row {r}: O "
             f"{_hex(out[b, r, h])} vs {_hex(d_out[b, r, h])}, LSE {_f(lse[b, h, r])} vs "
             f"{_f(d_lse[b, h, r])}")
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


# ---- output ----------------------------------------------------------------------------------------
def _kind(st: os.stat_result) -> str:
    mode = st.st_mode
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def check_output_path(path: Path, what: str) -> None:
    """Fail before any work if ``path`` cannot receive the result (UsageError, one line).

    An existing path that is not a regular file (a folder, /dev/null, a FIFO; links are
    followed, as the atomic write does) is refused. The folder's writability is tested by
    creating and removing a temporary file there (``os.access`` says yes to root even on
    /proc); missing folders are created for the test and removed again.
    """
    target = Path(os.path.realpath(path))
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot examine it ({exc.strerror or exc})") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = _kind(st)
        desc = f"it is {kind}" if target == Path(os.path.abspath(path)) else \
            f"it links to {target}, {kind}"
        raise UsageError(f"{what}: refusing to replace {path}: not a regular file ({desc})")
    folder = target.parent
    created: list[Path] = []
    probe = folder
    while not probe.exists() and probe != probe.parent:
        created.append(probe)
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"{what} {path}: cannot write into {folder} ({probe} is not a folder)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".probe")
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot write into {folder} "
                         f"({exc.strerror or exc})") from None
    finally:
        for p in created:  # deepest first; the final write creates them again
            try:
                p.rmdir()
            except OSError:
                pass


def check_plot_path(path: Path) -> None:
    """--plot: a format matplotlib writes (by the extension) and a writable place."""
    ext = path.suffix.lower().lstrip(".")
    if ext not in PLOT_FORMATS:
        got = f"extension {path.suffix!r}" if path.suffix else "no extension"
        raise UsageError(f"--plot {path}: {got}; expected one of "
                         f"{', '.join('.' + f for f in PLOT_FORMATS)}")
    check_output_path(path, "--plot")


def save_result(path: Path, out, lse, ref_out, ref_lse, trace, params: dict) -> None:
    """O (float32 values and raw bits), LSE, the reference, the trace (keys ``trace__*``) and the
    parameters (``params``, JSON) in one compressed ``.npz``, written atomically."""
    from .io import write_bytes_atomic

    bits = out.view(np.uint16)
    arrays = {"out": out.astype(np.float32), "out_bits": bits, "out_dtype": np.array(str(out.dtype)),
              "lse": lse, "ref_out": ref_out, "ref_lse": ref_lse,
              "params": np.array(json.dumps(params))}
    if trace is not None and len(trace):
        with np.load(io.BytesIO(trace.to_npz_bytes())) as t:
            arrays.update({f"trace__{k}": t[k] for k in t.files})
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    write_bytes_atomic(path, buf.getvalue())


def load_result(path) -> dict:
    """Read a file written by ``run``: arrays, ``params`` (dict) and ``trace`` (a Trace)."""
    from .trace import Trace

    with np.load(path, allow_pickle=False) as z:
        data = {k: z[k] for k in z.files}

    class _View(dict):
        @property
        def files(self):
            return list(self)

    tr = _View({k[len("trace__"):]: v for k, v in data.items() if k.startswith("trace__")})
    res = {k: v for k, v in data.items() if not k.startswith("trace__")}
    res["params"] = json.loads(str(res["params"]))
    res["out"] = res["out"].astype(DTYPES["bf16"] if str(res["out_dtype"]) == "bfloat16"
                                   else np.dtype(str(res["out_dtype"])))
    res["trace"] = Trace.from_npz(tr) if tr else Trace()
    return res


def plot(path: Path, work: Workload, kwargs: dict, cfg, out, ref_out, batch: int) -> None:
    """Per head: the reference attention pattern P [Sq, Sk] beside |O - ref| in output ulps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .flash.masks import allowed

    out_fmt = "bf16" if work.fmt == "e4m3" else work.fmt
    B, S, H, d = work.q.shape
    group = H // work.k.shape[2]
    kvh = np.arange(H) // group
    q = work.q[batch].astype(np.float64)
    k = work.k[batch].astype(np.float64)[:, kvh]
    s = np.einsum("qhd,khd->hqk", q, k) * float(cfg.consts["softmax_scale"])
    bc = 0 if work.query_rows is not None else batch  # a varlen sequence's own config: batch 0
    s *= (cfg.q_descale[bc].astype(np.float64) * cfg.k_descale[bc])[kvh][:, None, None]
    if cfg.softcap > 0:
        s = cfg.softcap * np.tanh(s / cfg.softcap)
    if work.query_rows is not None:  # a varlen sequence: its own rows and keys
        rows_b, keys_b = (int(x[batch]) for x in varlen_lengths(work))
        ok = np.zeros((S, k.shape[0]), dtype=bool)
        ok[:rows_b, :keys_b] = allowed(np.arange(rows_b)[:, None], np.arange(keys_b)[None, :],
                                       rows_b, keys_b, cfg.window)
    else:
        ok = allowed(np.arange(S)[:, None], np.arange(k.shape[0])[None, :], S,
                     int(cfg.seqlens_k[batch]), cfg.window)
    s = np.where(ok[None], s, -np.inf)
    mx = s.max(axis=-1, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0.0)
    p = np.exp(s - mx)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(p.sum(-1, keepdims=True) > 0, p / p.sum(-1, keepdims=True), 0.0)
    o = out[batch].astype(np.float64)
    r = ref_out[batch]
    note = ""
    if work.query_rows is not None:  # an extracted input: hide the zero padding rows and keys
        n = int(work.query_rows[batch])
        p, o, r = p[:, :n, :n], o[:n], r[:n]
        note = f" ({n} tokens; padding hidden)"
    eu = np.where(np.isfinite(o) & np.isfinite(r), np.abs(o - r) / ulp(r, out_fmt), np.nan)
    from matplotlib.colors import LogNorm, PowerNorm

    pairs = min(H, 3)                      # heads per figure row, each as [P | error]
    nrow = math.ceil(H / pairs)
    fig, axes = plt.subplots(nrow, 2 * pairs, figsize=(4.6 * pairs, 2.3 * nrow + 0.8),
                             squeeze=False, constrained_layout=True)
    finite = eu[np.isfinite(eu)]
    top = max(1.0, float(finite.max()) if finite.size else 1.0)
    norm = LogNorm(vmin=0.01, vmax=top)
    cmap = plt.get_cmap("magma").copy()
    cmap.set_under("limegreen")  # exact: a colour magma does not use (its low end is black)
    cmap.set_bad("cyan")
    im_p = im_e = None
    for h in range(H):
        r_, c = divmod(h, pairs)
        ax, ax2 = axes[r_, 2 * c], axes[r_, 2 * c + 1]
        im_p = ax.imshow(p[h], cmap="viridis", aspect="auto", interpolation="nearest",
                         norm=PowerNorm(0.4, vmin=0.0, vmax=1.0))
        ax.set_title(f"head {work.heads[h]}: P (reference)", fontsize=8)
        im_e = ax2.imshow(np.where(eu[:, h, :] == 0, 1e-30, eu[:, h, :]), cmap=cmap, norm=norm,
                          aspect="auto", interpolation="nearest")
        ax2.set_title(f"|O - ref|, max {np.nanmax(eu[:, h]):.3g} ulp", fontsize=8)
        ax.set_ylabel("query", fontsize=7)
        if r_ == nrow - 1 or h + pairs >= H:
            ax.set_xlabel("key", fontsize=7)
            ax2.set_xlabel("head dim", fontsize=7)
        for a in (ax, ax2):
            a.tick_params(labelsize=6)
    for h in range(H, nrow * pairs):
        r_, c = divmod(h, pairs)
        axes[r_, 2 * c].axis("off")
        axes[r_, 2 * c + 1].axis("off")
    shrink = 0.35 if pairs >= 3 else 0.7  # narrow figures: longer bars, so ticks do not collide
    for im, label in ((im_p, "reference attention probability P"),
                      (im_e, f"|O - ref| in {out_fmt} ulp at the reference value (green: exact)")):
        cb = fig.colorbar(im, ax=axes.ravel().tolist(), shrink=shrink, location="bottom", pad=0.04,
                          label=label)
        cb.ax.tick_params(labelsize=6)
    fig.suptitle(f"{work.source}\nbatch {batch}{note}: reference attention pattern beside the emulated "
                 f"O's error (cyan: non-finite)", fontsize=9)
    buf = io.BytesIO()
    fig.savefig(buf, format=path.suffix.lower().lstrip(".") or "png", dpi=110)
    plt.close(fig)
    from .io import write_bytes_atomic

    write_bytes_atomic(path, buf.getvalue())


def step_choice(traced, busy, default: bool = False) -> str:
    """The line before the ``--step`` table: which traced CTA it shows, and why. ``busy``: the
    traced CTAs that visit a K/V block (in ``traced`` order); ``default``: ``traced`` is
    ``--trace-cta``'s default."""
    def name(c):
        return f"CTA ({c[0]}, {c[1]}, {c[2]})"

    if not busy:
        which = ("the traced CTA visits no" if len(traced) == 1 else
                 "none of the traced CTAs visits a")
        return (f"step      nothing to show: {which} K/V block (it has no step); trace another "
                f"with --trace-cta B,H,M")
    traced = [tuple(c) for c in traced]
    shown = tuple(busy[0])
    if default:
        return f"step      {name(shown)}, the first CTA that visits a K/V block (the default trace)"
    if shown == traced[0]:
        return f"step      {name(shown)}" + (", the first traced CTA" if len(traced) > 1 else "")
    skipped = traced[: traced.index(shown)]
    return (f"step      {name(shown)}, the first traced CTA that visits a K/V block "
            f"({', '.join(map(name, skipped))} visit{'s' if len(skipped) == 1 else ''} none)")


def idle_cta_note(cfg, cta, name=None) -> str | None:
    """One line for a traced CTA that visits no K/V block (its trace is empty), else None.
    ``cta`` indexes ``cfg``'s launch; ``name``: the CTA as the user numbered it (default cta)."""
    from .flash.masks import block_range

    lo, hi = block_range(cta[2], cfg.seqlen_q, int(cfg.seqlens_k[cta[0]]), cfg.kblock_m,
                         cfg.kblock_n, cfg.window)
    if hi > lo:
        return None
    b, h, m = name or cta
    return f"CTA ({b}, {h}, {m}) visits no K/V block: it writes O = 0 and LSE = -inf without any step"


def reference_result(work: Workload, kwargs: dict, causal: bool):
    """The float64 reference ``(out, lse)``. No keys at all (seqlen_k = 0) is exact math here:
    O = 0 and LSE = -inf. A ValueError of the reference is about the input (exit 2); any other
    exception is a bug (exit 3)."""
    from .flash import reference

    B, S, H, d = work.q.shape
    if work.k.shape[1] == 0:
        return np.zeros((B, S, H, work.v.shape[-1])), np.full((B, H, S), -np.inf)
    if is_varlen(work):  # each sequence on its own, padding rows 0 / -inf
        out, lse = np.zeros((B, S, H, work.v.shape[-1])), np.full((B, H, S), -np.inf)
        try:
            for b in range(B):
                a = _one_sequence(work, kwargs, b)
                kw = {n: x for n, x in a["kw"].items() if not n.startswith("max_seqlen")}
                o, l_ = reference(a["q"], a["k"], a["v"], **kw)
                out[b, : a["q"].shape[1]], lse[b, :, : a["q"].shape[1]] = o[0], l_[0]
        except ValueError as exc:
            raise UsageError(f"{work.label}: the float64 reference rejects the input: "
                             f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
        return out, lse
    try:
        return reference(work.q, work.k, work.v, softmax_scale=kwargs["softmax_scale"],
                         causal=causal, window=kwargs["window"], softcap=kwargs["softcap"],
                         seqlens_k=work.seqlens_k, **work.descales)
    except ValueError as exc:
        raise UsageError(f"{work.label}: the float64 reference rejects the input: "
                         f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None


# ---- main ------------------------------------------------------------------------------------------
def first_busy_cta(cfg, ctas) -> tuple[int, int, int] | None:
    """The first of ``ctas`` that visits a K/V block (its trace has steps), or None."""
    from .flash.masks import block_range

    for c in ctas:
        lo, hi = block_range(c[2], cfg.seqlen_q, int(cfg.seqlens_k[c[0]]), cfg.kblock_m,
                             cfg.kblock_n, cfg.window)
        if hi > lo:
            return tuple(c)
    return None


def _launch_of(cfg, seq_cfgs, cta):
    """(config, CTA) of the launch a CTA belongs to: a varlen sequence's own (batch index 0)."""
    if not seq_cfgs:
        return cfg, cta
    return seq_cfgs[cta[0]], (0, cta[1], cta[2])


def default_trace_cta(cfg, head: int, seq_cfgs=None) -> tuple[int, int, int]:
    """``--trace-cta``'s default: the first CTA of ``head`` (batch, then m_block order) that
    visits a K/V block; ``(0, head, 0)`` when none does."""
    if seq_cfgs:
        for b, c in enumerate(seq_cfgs):
            for m in range(-(-c.seqlen_q // c.kblock_m)):
                if first_busy_cta(c, [(0, head, m)]):
                    return (b, head, m)
        return (0, head, 0)
    m_blocks = -(-cfg.seqlen_q // cfg.kblock_m)
    order = ((b, head, m) for b in range(cfg.batch) for m in range(m_blocks))
    return first_busy_cta(cfg, order) or (0, head, 0)


def main(argv: list[str]) -> int:
    _check_trace_cta_args(argv)
    args = build_parser().parse_args(argv)
    from .flash import make_config

    # the outputs first: a bad path fails here, before any work
    out_path = Path(args.out)
    check_output_path(out_path, "--out")
    plot_path = Path(args.plot) if args.plot else None
    if plot_path is not None:
        check_plot_path(plot_path)
        if os.path.realpath(plot_path) == os.path.realpath(out_path):
            raise UsageError(f"--plot {plot_path}: the same file as --out")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UsageError("--plot needs matplotlib: pip install matplotlib (or the project's "
                             "'notebooks' extra: pip install -e '.[notebooks]')") from None

    work = load_workload(args)
    select_heads(work, args.heads)
    kwargs = forward_kwargs(args, work)
    try:
        seq_cfgs = sequence_configs(work, kwargs) if is_varlen(work) else None
        cfg = seq_cfgs[0] if seq_cfgs else make_config(work.q, work.k, work.v, **kwargs)
    except ValueError as exc:
        raise UsageError(f"{work.label}: {exc}") from None
    batch = work.q.shape[0]
    trace_ctas = args.trace_cta or [default_trace_cta(cfg, work.heads[0], seq_cfgs)]
    for c in trace_ctas:
        m_blocks = -(-(seq_cfgs[c[0]] if seq_cfgs and c[0] < batch else cfg).seqlen_q // cfg.kblock_m)
        if c[0] >= batch or c[1] not in work.heads or c[2] >= m_blocks:
            raise UsageError(f"--trace-cta {','.join(map(str, c))}: out of range; batch 0..{batch - 1}"
                             f", heads {_ranges(work.heads)}, m_block 0..{m_blocks - 1}"
                             + (f" (sequence {c[0]})" if seq_cfgs and c[0] < batch else ""))
    if not 0 <= args.plot_batch < batch:
        raise UsageError(f"--plot-batch: expected 0..{batch - 1}, got {args.plot_batch}")
    if args.step and not 0 <= args.quad < 32 * (cfg.kblock_m // 64):
        raise UsageError(f"--quad: expected 0..{32 * (cfg.kblock_m // 64) - 1} for kBlockM = "
                         f"{cfg.kblock_m}, got {args.quad}")
    if args.device:
        check_device()

    t0 = time.perf_counter()
    from .numerics.mufu import ex2

    ex2(np.zeros(1, np.float32))  # load the H200 MUFU tables (a few seconds, once per process)
    t1 = time.perf_counter()
    units = len(_units(batch, cfg.heads, cfg.heads_kv))
    bar = _Progress(units, not args.no_progress)
    try:
        out, lse, trace = emulate(work, kwargs, trace_ctas, bar)
    finally:
        bar.close()
    t2 = time.perf_counter()
    ref_out, ref_lse = reference_result(work, kwargs, args.causal)
    t3 = time.perf_counter()
    out_fmt = "bf16" if work.fmt == "e4m3" else work.fmt
    if seq_cfgs:
        m = measure_varlen(out, lse, ref_out, ref_lse, out_fmt, varlen_lengths(work)[0],
                           no_key=no_key_rows_varlen(seq_cfgs, work.q.shape[1]))
    else:
        m = measure(out, lse, ref_out, ref_lse, out_fmt, no_key=no_key_rows(cfg))
    times = {"setup": t1 - t0, "emulate": t2 - t1, "reference": t3 - t2}
    print(summary(work, cfg, m, times, units, seq_cfgs))
    idle = {c: idle_cta_note(*_launch_of(cfg, seq_cfgs, c), name=c) for c in trace_ctas
            if not trace.for_cta(c)}
    for note in idle.values():
        if note:
            print(f"trace     {note}")
    if args.step:
        print()
        print(step_choice(trace_ctas, [c for c in trace_ctas if trace.for_cta(c)],
                          default=not args.trace_cta))
        shown = next((c for c in trace_ctas if trace.for_cta(c)), None)
        if shown is not None:
            print(step_table(trace, shown, args.quad, cfg.kblock_m, work.heads))
        print()
    status = EXIT_OK
    if args.device:
        same, text = (run_device_varlen(work, kwargs, out, lse) if seq_cfgs else
                      run_device(work, kwargs, out, lse, trace, trace_ctas, cfg.kblock_m))
        print(text)
        status = EXIT_OK if same else EXIT_MISMATCH
    params = {"source": work.source, "dtype": work.fmt, "notes": work.notes,
              "heads": work.heads, "seqlens_k": None if work.seqlens_k is None else
              work.seqlens_k.tolist(), "softmax_scale": float(cfg.consts["softmax_scale"]),
              "varlen": None if not seq_cfgs else {
                  "cu_seqlens": np.concatenate([[0], np.cumsum(varlen_lengths(work)[0])]).tolist(),
                  "note": "out/lse are padded to [batch, seqlen]: rows past a sequence hold 0 / -inf"},
              "causal": bool(args.causal), "window": list(cfg.window), "softcap": cfg.softcap,
              "kblock_m": cfg.kblock_m, "kblock_n": cfg.kblock_n, "schedule": cfg.schedule,
              "arch": cfg.arch, "trace_ctas": [list(c) for c in trace_ctas],
              "descales": {k: v.tolist() for k, v in work.descales.items()},
              "metrics": {k: v for k, v in m.items()}, "times_s": times,
              "provenance": work.provenance}
    save_result(out_path, out, lse, ref_out, ref_lse, trace, params)
    print(f"wrote     {out_path}: out, lse, ref_out, ref_lse, params, trace of "
          f"{_plural(len(trace.ctas()), 'CTA')} ({_plural(len(trace), 'event')}); read it with "
          f"simulator.run.load_result")
    if plot_path is not None:
        plot(plot_path, work, kwargs, seq_cfgs[args.plot_batch] if seq_cfgs else cfg, out, ref_out,
             args.plot_batch)
        print(f"wrote     {plot_path}")
    return status
