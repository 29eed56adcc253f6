"""Calibrated MUFU tables: what they hold, how they are stored, how they are loaded and checked.

One architecture's data is two files in ``simulator/data/mufu/`` (or in the folder named by the
environment variable ``FA3SIM_MUFU_DATA``, searched first):

* ``<arch>.npz``: the device's results on a few small input sets (below), each stored as a
  signed residual in ulps against the correctly rounded result (:mod:`.mufu_ideal`): an int8 per
  entry, plus the rare entries that do not fit (or whose reference is close to a rounding tie)
  as raw bits. Deflate packs the residuals to well under a bit per entry.
* ``<arch>.json``: provenance (GPU, compute capability, driver, toolkit, date, kernel hash), the
  tanh structure parameters, the BLAKE2b-128 checksum of the *reconstructed* tables and the
  exhaustive sweep's mismatch counts. The checksum is verified at load, so a platform whose
  reference computation differed would fail loudly instead of emulating wrong bits.

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

import functools
import hashlib
import io
import json
import os
import stat
import warnings
from pathlib import Path

import numpy as np

from ..errors import RecordedDataError
from .mufu_ideal import ideal_ex2, ideal_lg2, ideal_rcp, ideal_tanh

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "mufu"
ENV_DIR = "FA3SIM_MUFU_DATA"
REGENERATE = "python -m simulator calibrate"
FORMAT_VERSION = 1

#: tanh binade kinds (per biased exponent of |x|)
TANH_IDENTITY, TANH_TABLE, TANH_ONE, TANH_SPECIAL = 0, 1, 2, 3

TABLES = ("ex2_pos", "ex2_neg", "rcp", "lg2_e0", "lg2_em1", "tanh")
#: architectures whose data ships with the package (a missing file is an error, not an unknown arch)
SHIPPED_ARCHS = ("sm90",)
_REF = {"ex2_pos": ideal_ex2, "ex2_neg": ideal_ex2, "rcp": ideal_rcp, "lg2_e0": ideal_lg2,
        "lg2_em1": ideal_lg2, "tanh": ideal_tanh}
#: the MUFU instruction each table samples (its _list kernel in kernels/probes/mufu.cu)
TABLE_KERNEL = {"ex2_pos": "ex2_ftz", "ex2_neg": "ex2_ftz", "rcp": "rcp_ftz", "lg2_e0": "lg2_ftz",
                "lg2_em1": "lg2_ftz", "tanh": "tanh_"}


class MufuDataError(RecordedDataError):
    """Calibrated MUFU data is missing, unreadable or fails its checksum; says how to regenerate."""


def table_inputs(name: str, tanh_kind=None, tanh_shift=None) -> np.ndarray:
    """uint32 bit patterns of the inputs whose device results form table ``name``."""
    k = np.arange(1 << 23, dtype=np.uint32)
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


def encode_table(device_bits: np.ndarray, ref_bits: np.ndarray) -> dict[str, np.ndarray]:
    """Residual encoding: int8 ``res`` (device - reference, in ulps) plus raw exceptions."""
    res = device_bits.astype(np.int64) - ref_bits.astype(np.int64)
    exc = (res < -127) | (res > 127)
    exc_idx = np.flatnonzero(exc).astype(np.uint32)
    small = np.where(exc, 0, res).astype(np.int8)
    return {"res": small, "exc_idx": exc_idx, "exc_bits": device_bits[exc_idx].astype(np.uint32)}


def decode_table(res: np.ndarray, exc_idx: np.ndarray, exc_bits: np.ndarray,
                 ref_bits: np.ndarray) -> np.ndarray:
    """Inverse of :func:`encode_table`."""
    out = (ref_bits.astype(np.int64) + res).astype(np.uint32)
    out[exc_idx] = exc_bits
    return out


def checksum(tables: dict[str, np.ndarray]) -> str:
    """BLAKE2b-128 (hex) over the reconstructed tables and tanh parameters, in a fixed order."""
    h = hashlib.blake2b(digest_size=16)
    for key in (*TABLES, "tanh_kind", "tanh_shift"):
        a = np.ascontiguousarray(tables[key])
        h.update(key.encode())
        h.update(a.astype(a.dtype.newbyteorder("<")).tobytes())
    return h.hexdigest()


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
    prov["npz_bytes"] = len(buf.getvalue())
    prov["npz_sha256"] = hashlib.sha256(buf.getvalue()).hexdigest()
    prov["exceptions"] = {n: int(len(arrays[f"{n}__exc_idx"])) for n in TABLES}
    write(folder / f"{arch}.json", (json.dumps(prov, indent=2) + "\n").encode())
    return prov


def cache_dir() -> Path:
    """Where decoded tables are cached (``$FA3SIM_CACHE``, else ``$XDG_CACHE_HOME`` or
    ``~/.cache``, under ``fa3-hopper-simulator``). Decoding takes seconds; reading the cache
    a fraction of one. The cache is keyed by the recorded checksum and re-verified at load."""
    root = os.environ.get("FA3SIM_CACHE")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fa3-hopper-simulator"


def _cache_path(checksum_hex: str) -> Path:
    return cache_dir() / f"mufu-tables-{FORMAT_VERSION}-{checksum_hex}.npz"


_WARNED: set[str] = set()  # cache problems already reported in this process


def _warn_once(key: str, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=5)


def _unusable_cache(path: Path, why: str) -> None:
    _warn_once("unusable", f"cannot use the MUFU table cache {path} ({why}); decoding the tables "
                           "from the shipped data instead, which takes seconds in every process. "
                           "Remove it, or set FA3SIM_CACHE to a writable folder.")


def _read_cache(checksum_hex: str) -> dict[str, np.ndarray] | None:
    """The cached tables, or None when there is no usable cache file (a damaged one is reported
    here and rebuilt by the caller; its content is verified by :func:`_cached_tables`)."""
    path = _cache_path(checksum_hex)
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        _unusable_cache(path, f"{type(exc).__name__}: {exc}")
        return None
    if not stat.S_ISREG(mode):  # a directory, or a link to /dev/null or a FIFO
        _unusable_cache(path, "not a regular file")
        return None
    try:
        with np.load(path) as z:
            return {k: z[k] for k in z.files}
    except Exception as exc:  # unreadable or foreign content: decode from the shipped data instead
        _damaged_cache(path, f"cannot read it ({type(exc).__name__}: {exc})")
        return None


def _damaged_cache(path: Path, why: str) -> None:
    warnings.warn(f"ignoring the MUFU table cache {path}: {why}; decoding the tables from the "
                  "shipped data and rewriting the cache", RuntimeWarning, stacklevel=4)


def _cached_tables(cached: dict[str, np.ndarray], raw: dict[str, np.ndarray],
                   expected: str) -> dict[str, np.ndarray] | None:
    """``cached`` if it holds exactly the tables whose checksum is ``expected``, else None
    (after one warning)."""
    want = {name: np.dtype(np.uint32) for name in TABLES}
    for key in ("tanh_kind", "tanh_shift"):
        want[key] = raw[key].dtype if key in raw else np.dtype(np.uint8)
    path = _cache_path(expected)
    missing = sorted(set(want) - set(cached))
    if missing:
        _damaged_cache(path, f"arrays {missing} are missing")
        return None
    odd = sorted(k for k, dt in want.items() if cached[k].dtype != dt or cached[k].ndim != 1)
    if odd:
        _damaged_cache(path, f"arrays {odd} have the wrong dtype or shape")
        return None
    tables = {k: cached[k] for k in want}
    got = checksum(tables)
    if got != expected:
        _damaged_cache(path, f"checksum {got} of its tables differs from the recorded {expected}")
        return None
    return tables


def _write_cache(checksum_hex: str, tables: dict[str, np.ndarray]) -> None:
    from ..io import write_bytes_atomic

    buf = io.BytesIO()
    np.savez(buf, **tables)  # uncompressed: the point is speed
    try:
        write_bytes_atomic(_cache_path(checksum_hex), buf.getvalue())
    except OSError:  # a read-only home is fine: we just decode next time
        pass
    except ValueError as exc:  # the cache path exists and is not a regular file
        _unusable_cache(_cache_path(checksum_hex), str(exc))


def _fail(path: Path, what: str) -> MufuDataError:
    return MufuDataError(
        f"MUFU data for this architecture is unusable: {path}: {what}. Regenerate it on a machine "
        f"with the GPU with: {REGENERATE}  (writes {path.parent}/)")


@functools.lru_cache(maxsize=8)
def load(arch: str) -> dict[str, np.ndarray]:
    """Decoded tables of ``arch`` (uint32 device bits plus tanh parameters), checksum-verified.

    A cache file of the decoded tables (:func:`cache_dir`) that is damaged or does not match
    the recorded checksum is ignored with a RuntimeWarning and rewritten; a cache path that
    cannot be used at all (a directory, a device) is reported once per process.

    Raises:
        MufuDataError: a file is missing or unreadable, or the checksum of the reconstructed
            tables differs from the one recorded at calibration (the message gives both).
    """
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
        with np.load(npz_path) as z:
            raw = {k: z[k] for k in z.files}
    except Exception as exc:  # zipfile/format errors of a damaged file
        raise _fail(npz_path, f"cannot read ({exc})") from exc
    want_sha = prov.get("npz_sha256")
    if want_sha:
        got_sha = hashlib.sha256(npz_path.read_bytes()).hexdigest()
        if got_sha != want_sha:
            raise _fail(npz_path, f"file checksum mismatch: sha256 {got_sha}, expected {want_sha} "
                                  f"(recorded in {json_path.name})")
    cached = _read_cache(expected)
    if cached is not None:
        cached = _cached_tables(cached, raw, expected)
    if cached is not None:
        tables = cached
    else:
        try:
            tables = {"tanh_kind": raw["tanh_kind"], "tanh_shift": raw["tanh_shift"]}
            for name in TABLES:
                ref = reference_bits(name, table_inputs(name, tables["tanh_kind"],
                                                        tables["tanh_shift"]))
                tables[name] = decode_table(raw[f"{name}__res"], raw[f"{name}__exc_idx"],
                                            raw[f"{name}__exc_bits"], ref)
        except (KeyError, IndexError, ValueError) as exc:
            raise _fail(npz_path, f"malformed content ({exc!r})") from exc
        got = checksum(tables)  # a cached copy was verified the same way by _cached_tables
        if got != expected:
            raise _fail(npz_path, f"checksum mismatch of the reconstructed tables: got {got}, "
                                  f"expected {expected} (recorded in {json_path.name})")
        _write_cache(expected, tables)
    for a in tables.values():
        a.setflags(write=False)
    return tables


def provenance(arch: str) -> dict:
    """The provenance JSON of ``arch`` as a dict."""
    return json.loads(_paths(arch)[1].read_text())
