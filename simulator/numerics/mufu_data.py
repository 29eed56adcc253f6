"""Calibrated MUFU tables: what they hold, how they are stored, how they are loaded and checked.

One architecture's data is two files in ``simulator/data/mufu/`` (or in the folder named by the
environment variable ``FA3SIM_MUFU_DATA``, searched first):

* ``<arch>.npz``: the device's results on a few small input sets (below), each stored as a
  signed residual in ulps against the correctly rounded result (:mod:`.mufu_ideal`): an int8 per
  entry, plus the rare entries that do not fit (or whose reference is close to a rounding tie)
  as raw bits. Deflate packs the residuals to well under a bit per entry.
* ``<arch>.json``: provenance (GPU, compute capability, driver, toolkit, date, kernel hash), the
  tanh structure parameters, the BLAKE2b-128 checksum of the *reconstructed* tables (as a whole,
  ``tables_blake2b``, and per table, ``table_blake2b``) and the exhaustive sweep's mismatch
  counts. The checksums are verified at load, so a platform whose reference computation
  differed would fail loudly instead of emulating wrong bits.

Tables are decoded one by one, when a function first needs them (:func:`tables`,
:func:`ex2_table`), and cached as uncompressed ``.npy`` files (:func:`cache_dir`).

Tables (inputs are float32 bit patterns; the device results are the table):

* ``ex2_pos[k] = ex2.approx.ftz(k * 2^-23)``, ``ex2_neg[k] = ex2.approx.ftz(-k * 2^-23)``, k < 2^23
* ``rcp[j] = rcp.approx.ftz(1 + j * 2^-23)``
* ``lg2_e0[j] = lg2.approx.ftz(1 + j * 2^-23)``, ``lg2_em1[j] = lg2.approx.ftz((1 + j * 2^-23) / 2)``
* ``tanh``: for every biased exponent ``e`` with ``tanh_kind[e] == TABLE``, the results at
  ``x = e << 23 | i << tanh_shift[e]`` for ``i < 2^(23 - tanh_shift[e])`` (the device ignores the
  ``tanh_shift[e]`` low mantissa bits there), concatenated in exponent order.

Regenerate with ``python -m simulator calibrate`` on a machine with a CUDA GPU.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import io
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ..errors import RecordedDataError
from ..gpus import GPUS
from . import mufu_cache
from .mufu_cache import CACHE_VERSION, STALE_TMP_SECONDS, cache_dir  # noqa: F401 (public here too)
from .mufu_codec import (
    TABLES,
    checksum,
    encode_table,
    finish_hash,
    little_endian,
    table_checksum,
    table_checksums,
    table_hasher,
)
from .mufu_ideal import ideal_ex2, ideal_lg2, ideal_rcp, ideal_tanh

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "mufu"
ENV_DIR = "FA3SIM_MUFU_DATA"
REGENERATE = "python -m simulator calibrate"
FORMAT_VERSION = 1

#: tanh binade kinds (per biased exponent of |x|)
TANH_IDENTITY, TANH_TABLE, TANH_ONE, TANH_SPECIAL = 0, 1, 2, 3

#: table sets whose data ships with the package, the ones the GPU records name (a missing file is
#: an error, not an unknown table set)
SHIPPED_ARCHS = tuple(sorted({g.mufu_tables for g in GPUS.values()}))
_REF = {"ex2_pos": ideal_ex2, "ex2_neg": ideal_ex2, "rcp": ideal_rcp, "lg2_e0": ideal_lg2,
        "lg2_em1": ideal_lg2, "tanh": ideal_tanh}
#: the MUFU instruction each table samples (its _list kernel in kernels/probes/mufu.cu)
TABLE_KERNEL = {"ex2_pos": "ex2_ftz", "ex2_neg": "ex2_ftz", "rcp": "rcp_ftz", "lg2_e0": "lg2_ftz",
                "lg2_em1": "lg2_ftz", "tanh": "tanh_"}


class MufuDataError(RecordedDataError):
    """Calibrated MUFU data is missing, unreadable or fails its checksum; says how to regenerate."""


#: An event that, once set, makes the decodes started in this context stop after their chunks
#: in progress (raising :class:`DecodeStopped`): :meth:`.mufu.MufuModel.resolve` sets it in its
#: loader threads and sets the event when it fails or is interrupted, so that the other tables'
#: decodes do not run on to the end.
DECODE_STOP: contextvars.ContextVar = contextvars.ContextVar("mufu_decode_stop", default=None)


class DecodeStopped(Exception):
    """A decode given up because :data:`DECODE_STOP`'s event was set."""


def table_inputs(name: str, tanh_kind=None, tanh_shift=None, lo: int = 0, hi: int = 1 << 23) -> np.ndarray:
    """uint32 bit patterns of the inputs whose device results form table ``name`` (entries
    ``lo`` to ``hi`` of the 2^23 of ex2, rcp and lg2; tanh's are always all of them)."""
    k = np.arange(lo, min(hi, 1 << 23), dtype=np.uint32)
    if name == "ex2_pos":
        return (k.astype(np.float32) * np.float32(2.0**-23)).view(np.uint32)
    if name == "ex2_neg":
        return (k.astype(np.float32) * np.float32(-(2.0**-23))).view(np.uint32)
    if name in ("rcp", "lg2_e0"):
        return k + np.uint32(0x3F800000)
    if name == "lg2_em1":
        return k + np.uint32(0x3F000000)
    if name == "tanh":
        parts = [np.arange(0, 1 << 23, 1 << int(tanh_shift[e]), dtype=np.uint32) | np.uint32(e << 23)
                 for e in range(256) if tanh_kind[e] == TANH_TABLE]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)
    raise KeyError(name)


def reference_bits(name: str, inputs: np.ndarray) -> np.ndarray:
    """Correctly rounded results (uint32 bits) for table ``name``'s inputs."""
    return _REF[name](inputs.view(np.float32)).view(np.uint32)


def search_dirs() -> list[Path]:
    extra = os.environ.get(ENV_DIR)
    return ([Path(extra)] if extra else []) + [DATA_DIR]


def available_archs() -> list[str]:
    """Architectures with calibrated data (e.g. ``['sm90']``), from the data folders."""
    found = set()
    for d in search_dirs():
        if d.is_dir():
            found |= {p.stem for p in d.glob("*.npz") if (d / f"{p.stem}.json").is_file()}
    return sorted(found)


def expected_archs() -> list[str]:
    """Architectures that should have calibrated data: the shipped ones and every one with at
    least one of its two files in a data folder (usable or not; see :func:`available_archs`)."""
    found = set(SHIPPED_ARCHS)
    for d in search_dirs():
        if d.is_dir():
            found |= {p.stem for p in (*d.glob("*.npz"), *d.glob("*.json"))}
    return sorted(found)


def _paths(arch: str) -> tuple[Path, Path]:
    for d in search_dirs():
        if (d / f"{arch}.npz").is_file():
            return d / f"{arch}.npz", d / f"{arch}.json"
    return DATA_DIR / f"{arch}.npz", DATA_DIR / f"{arch}.json"


def save(folder: str | os.PathLike, arch: str, tables: dict[str, np.ndarray], provenance: dict,
         write) -> dict:
    """Encode ``tables`` (device bits) and write ``<arch>.npz`` + ``<arch>.json`` via ``write``.

    ``write(path, bytes)`` must be atomic (``simulator.io.write_bytes_atomic``). Returns the
    provenance dict as written (with checksum and sizes filled in).
    """
    arrays = {"format_version": np.array(FORMAT_VERSION),
              "tanh_kind": tables["tanh_kind"].astype(np.uint8),
              "tanh_shift": tables["tanh_shift"].astype(np.uint8)}
    for name in TABLES:
        ref = reference_bits(name, table_inputs(name, tables["tanh_kind"], tables["tanh_shift"]))
        for k, v in encode_table(tables[name], ref).items():
            arrays[f"{name}__{k}"] = v
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    folder = Path(folder)
    write(folder / f"{arch}.npz", buf.getvalue())
    prov = dict(provenance)
    prov["tables_blake2b"] = checksum(tables)
    prov["table_blake2b"] = table_checksums(tables)
    prov["npz_bytes"] = len(buf.getvalue())
    prov["npz_sha256"] = hashlib.sha256(buf.getvalue()).hexdigest()
    prov["exceptions"] = {n: int(len(arrays[f"{n}__exc_idx"])) for n in TABLES}
    write(folder / f"{arch}.json", (json.dumps(prov, indent=2) + "\n").encode())
    return prov


class _Source:
    """One architecture's shipped files, read once and checked (sha256 of the npz)."""

    def __init__(self, arch: str):
        npz_path, json_path = _paths(arch)
        if not npz_path.is_file():
            raise _fail(npz_path, "file not found")
        if not json_path.is_file():
            raise _fail(json_path, "provenance file not found")
        try:
            prov = json.loads(json_path.read_text())
            expected = prov["tables_blake2b"]
        except (OSError, ValueError, KeyError) as exc:
            raise _fail(json_path, f"cannot read the recorded checksum ({exc})") from exc
        try:
            data = npz_path.read_bytes()
            raw = np.load(io.BytesIO(data))
            names = set(raw.files)
        except Exception as exc:  # zipfile/format errors of a damaged file
            raise _fail(npz_path, f"cannot read ({exc})") from exc
        want_sha = prov.get("npz_sha256")
        if want_sha:
            got_sha = hashlib.sha256(data).hexdigest()
            if got_sha != want_sha:
                raise _fail(npz_path, f"file checksum mismatch: sha256 {got_sha}, expected "
                                      f"{want_sha} (recorded in {json_path.name})")
        self.npz_path, self.json_path, self.expected = npz_path, json_path, expected
        self._raw, self._names = raw, names
        sums = prov.get("table_blake2b")
        self.sums = dict(sums) if isinstance(sums, dict) and set(sums) >= set(TABLES) else None
        try:
            self.tanh_kind, self.tanh_shift = self.array("tanh_kind"), self.array("tanh_shift")
        except KeyError as exc:
            raise _fail(npz_path, f"malformed content ({exc!r})") from exc

    def array(self, key: str) -> np.ndarray:
        if key not in self._names:
            raise KeyError(key)
        return self._raw[key]

    def decode(self, name: str) -> np.ndarray:
        """Table ``name`` decoded from the residuals (uint32 device bits), in chunks of 2^18
        inputs so that the float64 reference needs little memory, the chunks spread over
        threads (NumPy's ufuncs release the GIL: 2 threads on 2 cores decode in half the
        time, measured). The result does not depend on the thread count: each chunk is a
        pure function of its inputs."""
        try:
            # the tanh inputs are a concatenation; the others are made per chunk, in the thread
            inputs = table_inputs(name, self.tanh_kind, self.tanh_shift) if name == "tanh" else None
            size = 1 << 23 if inputs is None else inputs.size
            res = self.array(f"{name}__res")
            out = np.empty(size, dtype=np.uint32)
            if res.shape != (size,):
                raise ValueError(f"{name}__res has shape {res.shape}, expected {(size,)}")
            step = 1 << 18  # a chunk's float64 temporaries: tens of MB

            slots = _decode_slots()
            stop = DECODE_STOP.get()

            def chunk(lo: int) -> None:
                with slots:
                    if stop is not None and stop.is_set():
                        raise DecodeStopped(name)
                    x = table_inputs(name, lo=lo, hi=lo + step) if inputs is None else inputs[lo:lo + step]
                    ref = reference_bits(name, x)
                    out[lo:lo + step] = (ref.astype(np.int64) + res[lo:lo + step]).astype(np.uint32)

            # the threads end with the decode: none is left running when a caller forks
            with ThreadPoolExecutor(_decode_threads(), thread_name_prefix="mufu-decode") as pool:
                list(pool.map(chunk, range(0, size, step)))  # list(): re-raises a chunk's error
            out[self.array(f"{name}__exc_idx")] = self.array(f"{name}__exc_bits")
        except (KeyError, IndexError, ValueError) as exc:
            raise _fail(self.npz_path, f"malformed content ({exc!r})") from exc
        return out

    def mismatch(self, what: str, got: str, want: str) -> MufuDataError:
        return _fail(self.npz_path, f"checksum mismatch of the reconstructed {what}: got {got}, "
                                    f"expected {want} (recorded in {self.json_path.name})")


_SLOTS: dict[int, threading.BoundedSemaphore] = {}


def _decode_threads() -> int:
    """The CPUs this process may run on, at most 4 (each thread added about 22 MB of peak
    memory; on a 16-core H200 host a cold resolve took 0.71-0.85 s with 4, 0.70-0.80 with 8)."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        n = os.cpu_count() or 1
    return min(4, n)


def _decode_slots() -> threading.BoundedSemaphore:
    """This process's limit on chunks decoded at once, shared by tables decoded at the same
    time, so that their float64 temporaries stay bounded (about 22 MB each). Keyed by
    process id: a forked process gets a fresh one (a slot held by a parent's thread would
    never be released there)."""
    slots = _SLOTS.get(os.getpid())
    if slots is None:
        slots = _SLOTS.setdefault(os.getpid(), threading.BoundedSemaphore(_decode_threads()))
    return slots


def _fail(path: Path, what: str) -> MufuDataError:
    return MufuDataError(
        f"MUFU data for this architecture is unusable: {path}: {what}. Regenerate it on a machine "
        f"with the GPU with: {REGENERATE}  (writes {path.parent}/)")


def _table(src: _Source, name: str, mmap: bool, cache: bool = True) -> np.ndarray:
    """Table ``name``, from the cache when it holds a verified copy, else decoded (and cached
    when ``cache``)."""
    want = src.sums[name]
    path = mufu_cache.cache_path(name, want)

    def verify(a):
        h = table_hasher(name)
        for c in mufu_cache.chunks(a):
            h.update(little_endian(c))
        got = finish_hash(h, name, src.tanh_kind, src.tanh_shift)
        return None if got == want else f"checksum {got} of its table differs from the recorded {want}"

    size = table_inputs(name, src.tanh_kind, src.tanh_shift).size if name == "tanh" else 1 << 23
    if cache:
        cached = mufu_cache.read_cached(path, np.dtype(np.uint32), size, verify, mmap)
        if cached is not None:
            return cached
    table = src.decode(name)
    got = table_checksum(name, table, src.tanh_kind, src.tanh_shift)
    if got != want:
        raise src.mismatch(f"table {name}", got, want)
    if cache:
        mufu_cache.write_cache(path, table)
    return table


def tables(arch: str, names, mmap: bool = True) -> dict[str, np.ndarray]:
    """The decoded tables ``names`` of ``arch`` (read-only uint32 device bits) plus
    ``tanh_kind`` and ``tanh_shift``, each verified against its recorded checksum.

    Only the tables asked for are decoded (about half a second each on 2 cores) or read from
    the cache (:func:`cache_dir`); with ``mmap`` a cached table is memory-mapped, so only the
    pages a computation touches become resident. A cache file that is damaged or does not match
    the recorded checksum is ignored with a RuntimeWarning and rewritten; a cache path that
    cannot be used at all (a directory, a device) is reported once per process. Provenance
    written before per-table checksums were recorded (no ``table_blake2b``) decodes and
    verifies every table (:func:`load`).

    Raises:
        KeyError: a name is not one of :data:`TABLES`.
        MufuDataError: a file is missing or unreadable, or a reconstructed table's checksum
            differs from the one recorded at calibration (the message gives both).
    """
    names = tuple(names)
    for n in names:
        if n not in TABLES:
            raise KeyError(f"names: expected tables from {TABLES}, got {n!r}")
    src = _Source(arch)
    mufu_cache.remove_stale_tmp(mufu_cache.cache_dir())
    if src.sums is None:
        full = load(arch)
        return {k: full[k] for k in (*names, "tanh_kind", "tanh_shift")}
    out = {"tanh_kind": src.tanh_kind, "tanh_shift": src.tanh_shift}
    for n in names:
        out[n] = _table(src, n, mmap)
    for a in out.values():
        if a.flags.writeable:
            a.setflags(write=False)
    return out


def ex2_table(arch: str) -> np.ndarray:
    """MUFU.EX2's two tables in the layout of the emulation: int32, 2^24 entries,
    ``[lo] = ex2_pos[lo]``, ``[2^23 | lo] = ex2_neg[2^23 - lo] + 2^23`` (lo > 0: twice the
    value, in the bits' exponent field) and ``[2^23] = ex2_neg[0]``, read-only for good (its
    WRITEABLE flag cannot be set again).

    With ``f = trunc(x * 2^23)`` in two's complement, ``table[(sign << 23) | (f & (2^23 - 1))]
    + (f & ~(2^23 - 1))`` is the device's bit pattern (see :mod:`.mufu`). Cached like the other
    tables (in memory, not mapped: its gathers are the emulation's hot path) and verified by
    the recorded checksums of ``ex2_pos`` and ``ex2_neg``, which it holds in full.

    Raises:
        MufuDataError: as :func:`tables`.
    """
    src = _Source(arch)
    mufu_cache.remove_stale_tmp(mufu_cache.cache_dir())
    if src.sums is None:
        full = load(arch)
        return _frozen(_ex2_layout(full["ex2_pos"], full["ex2_neg"]))
    half = 1 << 23
    want = {n: src.sums[n] for n in ("ex2_pos", "ex2_neg")}
    key = hashlib.blake2b((want["ex2_pos"] + want["ex2_neg"]).encode(), digest_size=16).hexdigest()
    path = mufu_cache.cache_path("ex2c", key)

    def verify(a):
        pos = table_hasher("ex2_pos")
        for c in mufu_cache.chunks(a[:half]):
            pos.update(little_endian(c.view(np.uint32)))
        neg = table_hasher("ex2_neg")
        neg.update(little_endian(a[half:half + 1].view(np.uint32)))
        step = 1 << 20
        for hi in range(2 * half, half + 1, -step):  # ex2_neg[k] = a[2^24 - k] - 2^23, k >= 1
            seg = a[max(half + 1, hi - step):hi][::-1] - np.int32(half)
            neg.update(little_endian(seg.view(np.uint32)))
        got = {"ex2_pos": finish_hash(pos, "ex2_pos", None, None),
               "ex2_neg": finish_hash(neg, "ex2_neg", None, None)}
        bad = [f"{n} checksum {got[n]} differs from the recorded {want[n]}" for n in want
               if got[n] != want[n]]
        return "; ".join(bad) or None

    cached = mufu_cache.read_cached(path, np.dtype(np.int32), 2 * half, verify, mmap=False)
    if cached is None:  # decoded (not cached on their own: this layout holds both)
        pos = _table(src, "ex2_pos", mmap=False, cache=False)
        cached = _ex2_layout(pos, _table(src, "ex2_neg", mmap=False, cache=False))
        del pos
        mufu_cache.write_cache(path, cached)
    return _frozen(cached)


def _frozen(a: np.ndarray) -> np.ndarray:
    """``a`` seen through a read-only buffer: an array whose WRITEABLE flag cannot be set again
    (``a`` itself stays unreachable but through the buffer's ``obj``), so that what was
    verified once, and what compiled twins derive from it once, cannot change under them."""
    return np.frombuffer(memoryview(a).toreadonly(), dtype=a.dtype).reshape(a.shape)


def _ex2_layout(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    half = pos.size
    out = np.empty(2 * half, dtype=np.int32)
    out[:half] = pos.view(np.int32)
    out[half] = neg[0]
    np.add(neg[:0:-1].view(np.int32), np.int32(half), out=out[half + 1:])
    return out


@functools.lru_cache(maxsize=8)
def load(arch: str) -> dict[str, np.ndarray]:
    """Every decoded table of ``arch`` (uint32 device bits plus tanh parameters), read-only,
    checksum-verified table by table (:func:`tables`) and as a whole (``tables_blake2b``).

    The emulation loads only the tables of the functions it runs (:func:`tables`); this is
    for calibration and inspection.

    Raises:
        MufuDataError: a file is missing or unreadable, or the checksum of the reconstructed
            tables differs from the one recorded at calibration (the message gives both).
    """
    src = _Source(arch)
    if src.sums is not None:
        out = tables(arch, TABLES, mmap=False)
    else:
        out = {"tanh_kind": src.tanh_kind, "tanh_shift": src.tanh_shift}
        for name in TABLES:
            out[name] = src.decode(name)
    got = checksum(out)
    if got != src.expected:
        raise src.mismatch("tables", got, src.expected)
    for a in out.values():
        if a.flags.writeable:
            a.setflags(write=False)
    return out


def provenance(arch: str) -> dict:
    """The provenance JSON of ``arch`` as a dict."""
    return json.loads(_paths(arch)[1].read_text())
