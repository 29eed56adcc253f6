"""The inputs of ``python -m simulator run``: the embedded MiniLM input, an input bundle or a
plain ``.npz`` of Q, K, V, checked, quantised to FP8 when asked, and narrowed to some heads.

Every user mistake is a :class:`simulator.errors.UsageError` with a one-line message; an
embedded input that fails its SHA-256 is a :class:`simulator.errors.RecordedDataError`.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import RecordedDataError, UsageError
from ..flash.config import DTYPES

EMBEDDED = Path(__file__).resolve().parents[1] / "data" / "inputs" / "minilm.npz"


BUNDLE_FORMAT = "fa3sim-inputs/1"


#: how to regenerate an extracted input, as plain text (messages quote no Markdown)
EXTRACT = "python scripts/extract_minilm.py (see its docstring)"


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


class _NpzArrays(Mapping):
    """The arrays of an open ``.npz`` by name, each decompressed when first read (a file may
    hold arrays a run never uses: they are not inflated). Errors reading one are one line."""

    def __init__(self, npz, path: Path, what: str):
        self._npz, self._path, self._what = npz, path, what
        self._read: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._read:
            if name not in self._npz.files:
                raise KeyError(name)
            try:
                self._read[name] = self._npz[name]
            except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
                detail = str(exc).splitlines()[0] if str(exc) else "no detail"
                raise UsageError(f"{self._what} {self._path}: array {name!r} is not readable "
                                 f"({type(exc).__name__}: {detail})") from None
        return self._read[name]

    def __iter__(self):
        return iter(self._npz.files)

    def __len__(self) -> int:
        return len(self._npz.files)

    def close(self) -> None:
        self._npz.close()


def _read_npz(path: Path, what: str) -> _NpzArrays:
    """The ``.npz`` at ``path`` opened for reading by name (close it when done). Only regular
    files are read: a FIFO or a device would block or never end."""
    if not path.exists():
        raise UsageError(f"{what} {path}: no such file")
    if path.is_dir():
        raise UsageError(f"{what} {path}: is a folder, expected an .npz file")
    if not path.is_file():
        raise UsageError(f"{what} {path}: not a regular file (a FIFO, socket or device), "
                         "expected an .npz file")
    try:
        with open(path, "rb") as fh:
            magic = fh.read(6)
        if magic == b"\x93NUMPY":
            raise ValueError("a single .npy array, not an .npz archive of q, k, v")
        if magic[:4] == b"PK\x05\x06":  # a zip's end record first: numpy.savez() of nothing
            raise ValueError("an .npz archive holding no arrays")
        if magic[:4] != b"PK\x03\x04":
            raise ValueError("not a zip archive, as numpy.savez writes")
        return _NpzArrays(np.load(path, allow_pickle=False), path, what)
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
    try:
        if "format" in arrays:
            work = _load_bundle(arrays, path, args, embedded=False)
        else:
            work = _load_plain(arrays, path, args)
    finally:
        arrays.close()
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
                                f"{EXTRACT}") from None
    except OSError as exc:
        raise RecordedDataError(f"{EMBEDDED} is unreadable ({type(exc).__name__}: {exc}); "
                                f"regenerate it with {EXTRACT}") from None
    check_embedded_sha256(EMBEDDED, raw)
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except Exception as exc:  # zipfile / format errors of a damaged file
        raise RecordedDataError(f"{EMBEDDED} is unreadable ({type(exc).__name__}: {exc}); "
                                f"regenerate it with {EXTRACT}") from None
    return _load_bundle(arrays, EMBEDDED, args, embedded=True)


def check_embedded_sha256(path: Path, raw: bytes) -> None:
    """The embedded input's bytes against the ``npz_sha256`` of its provenance file (the
    ``.json`` beside it); RecordedDataError (exit 2) when it differs or cannot be checked."""
    from ..io import sha256_bytes

    prov_path = path.with_suffix(".json")
    try:
        want = json.loads(prov_path.read_text()).get("npz_sha256")
    except (OSError, ValueError, AttributeError) as exc:
        raise RecordedDataError(f"recording corrupt: {prov_path} (the provenance of {path.name}) is "
                                f"missing or unreadable ({type(exc).__name__}); regenerate both "
                                f"with {EXTRACT}") from None
    if not isinstance(want, str):
        raise RecordedDataError(f"recording corrupt: {prov_path} records no npz_sha256 of "
                                f"{path.name}; regenerate both with {EXTRACT}")
    got = sha256_bytes(raw)
    if got != want:
        raise RecordedDataError(f"recording corrupt: {path} sha256 {got[:16]}... differs from the "
                                f"npz_sha256 {want[:16]}... of {prov_path.name}; regenerate both "
                                f"with {EXTRACT}, or reinstall the package")


#: the keys of an extracted input (scripts/extract_minilm.py's docstring) besides q, k, v
_BUNDLE_KEYS = ("format", "layers", "default_layer", "seqlens")


def _describe(x) -> str:
    """A value of an input file as plain text for a message: a 0-d string or number as itself
    (``'fa3sim-inputs/2'``, ``int64 3``), an array as its dtype and shape (``float32 [3, 4]``);
    never a NumPy repr such as ``np.int64(3)`` or ``array([...])``."""
    x = np.asarray(x)
    if x.ndim == 0 and x.dtype.kind in "USb":
        value = x.item()
        return repr(value.decode("utf-8", "replace") if isinstance(value, bytes) else value) + (
            " (bytes)" if x.dtype.kind == "S" else "")
    if x.ndim == 0 and x.dtype.kind in "iuf":
        return f"{x.dtype} {x.item()!r}"
    kind = {"U": "strings", "S": "bytes", "O": "objects"}.get(x.dtype.kind, str(x.dtype))
    return f"{kind} {list(x.shape)}"


def check_bundle(arrays: dict, path: Path, err=UsageError) -> tuple[list[int], int]:
    """Check a file written by scripts/extract_minilm.py against the format of its docstring
    (``format`` "fa3sim-inputs/1"; ``layers`` int [L]; ``default_layer`` int []; ``seqlens``
    int [B] in 1..S; ``{q,k,v}_bf16`` uint16 [L, B, S, heads, head_dim] with k's and v's heads
    dividing q's; ``{q,k,v}_e4m3`` uint8 of the same shapes; ``{q,k,v}_descale`` float32
    [L, B, heads of k]); returns ``(layers, default_layer)`` as Python ints.

    Raises:
        ``err`` (UsageError for a user's file, RecordedDataError for the embedded input): one
        line naming the file, the key, what was expected and what it holds.
    """
    def bad(key: str, want: str, got: str | None = None) -> Exception:
        got = _describe(arrays[key]) if got is None else got
        return err(f"{path}: {key}: expected {want}, got {got}; regenerate it with {EXTRACT}")

    tensors = [f"{t}_{s}" for t in "qkv" for s in ("bf16", "e4m3", "descale")]
    missing = [n for n in (*_BUNDLE_KEYS, *tensors) if n not in arrays]
    if missing:
        raise err(f"{path}: missing arrays {', '.join(missing)} (an extracted input holds "
                  f"{', '.join((*_BUNDLE_KEYS, *tensors))}); regenerate it with {EXTRACT}")
    tag = np.asarray(arrays["format"])
    if tag.ndim or tag.dtype.kind != "U" or str(tag) != BUNDLE_FORMAT:
        raise bad("format", f"the string {BUNDLE_FORMAT!r}")
    raw = np.asarray(arrays["layers"])
    if raw.ndim != 1 or raw.dtype.kind not in "iu" or not raw.size:
        raise bad("layers", "integers [L] (the encoder layers held, at least one)")
    layers = [int(x) for x in raw]
    if min(layers) < 0 or len(set(layers)) != len(layers):
        raise bad("layers", "distinct layer numbers >= 0", str(layers))
    d = np.asarray(arrays["default_layer"])
    if d.ndim or d.dtype.kind not in "iu":
        raise bad("default_layer", "one integer")
    if int(d) not in layers:
        raise bad("default_layer", f"one of the layers {layers}", str(int(d)))
    q = arrays["q_bf16"]
    if q.ndim != 5 or q.shape[0] != len(layers):
        raise bad("q_bf16", f"5 dimensions [{len(layers)} layers, batch, seqlen, heads, head_dim]")
    n_layers, batch, seqlen, heads, head_dim = q.shape
    heads_kv = 0
    for fmt, kind, size in (("bf16", "uint16", 2), ("e4m3", "uint8", 1)):
        for t in "qkv":
            key, x = f"{t}_{fmt}", arrays[f"{t}_{fmt}"]
            if x.dtype.itemsize != size or x.dtype.kind not in "uV":  # bit patterns (or V, ml_dtypes)
                raise bad(key, f"{kind} (the {fmt} bit patterns), of shape "
                          f"[{n_layers}, {batch}, {seqlen}, heads, {head_dim}]")
            if x.ndim != 5 or x.shape[:3] != (n_layers, batch, seqlen) or x.shape[4] != head_dim:
                raise bad(key, f"{kind} [{n_layers}, {batch}, {seqlen}, heads, {head_dim}] "
                          "(layers, batch, seqlen and head_dim of q_bf16)")
            if fmt == "e4m3" and x.shape != arrays[f"{t}_bf16"].shape:
                raise bad(key, f"{kind} {list(arrays[f'{t}_bf16'].shape)} ({t}_bf16's shape)")
        if fmt == "bf16":
            heads_kv = arrays["k_bf16"].shape[3]
            if heads_kv < 1 or heads % heads_kv or arrays["v_bf16"].shape != arrays["k_bf16"].shape:
                key = "v_bf16" if heads_kv >= 1 and not heads % heads_kv else "k_bf16"
                raise bad(key, f"uint16 [{n_layers}, {batch}, {seqlen}, heads_kv, {head_dim}] with "
                          f"heads_kv dividing the {heads} heads of q_bf16"
                          + (" (k_bf16's shape)" if key == "v_bf16" else ""))
    for t in "qkv":
        key, x = f"{t}_descale", arrays[f"{t}_descale"]
        if x.dtype != np.float32 or x.shape != (n_layers, batch, heads_kv):
            raise bad(key, f"float32 [{n_layers}, {batch}, {heads_kv}] ([layers, batch, heads_kv])")
    seq = np.asarray(arrays["seqlens"])
    if seq.shape != (batch,) or seq.dtype.kind not in "iu":
        raise bad("seqlens", f"integers [{batch}] (one per sentence of q_bf16)")
    if seq.size and (seq.min() < 1 or seq.max() > seqlen):
        raise bad("seqlens", f"values in 1..{seqlen} (every sentence at least one token, at most "
                  "the stored length)", str(seq.tolist()))
    return layers, int(d)


def _load_bundle(arrays, path: Path, args, *, embedded: bool) -> Workload:
    """A file written by scripts/extract_minilm.py ([layer, batch, seqlen, heads, head_dim])."""
    err = RecordedDataError if embedded else UsageError
    layers, default_layer = check_bundle(arrays, path, err)
    layer = default_layer if args.layer is None else args.layer
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
    from ..numerics import convert

    with np.errstate(over="ignore"):  # float64 beyond float32 becomes inf: the notes count it
        x32 = np.asarray(x, dtype=np.float32)
    return np.ascontiguousarray(convert(x32, fmt))


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


_E4M3_MAX = 448.0


def is_varlen(work: Workload) -> bool:
    """True for a batch of sequences of their own lengths (the extracted sentences:
    ``work.query_rows``): run as one FA3 varlen launch, no padding rows."""
    return work.query_rows is not None


def varlen_lengths(work: Workload) -> tuple[np.ndarray, np.ndarray]:
    """([batch] query rows, [batch] keys) of a varlen workload."""
    rows = np.asarray(work.query_rows, dtype=np.int64)
    keys = rows if work.seqlens_k is None else np.asarray(work.seqlens_k, dtype=np.int64)
    return rows, keys
