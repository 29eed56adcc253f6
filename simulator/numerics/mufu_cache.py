"""The on-disk cache of decoded MUFU tables: one uncompressed ``.npy`` file per table, named
after the table's recorded checksum and verified against it at every load, written atomically;
files of killed writers and of earlier cache layouts are removed. Decoding a table from the
shipped residuals takes seconds (:mod:`.mufu_data`); reading its cached copy a fraction of one.
"""

from __future__ import annotations

import io
import os
import stat
import time
import warnings
from pathlib import Path

import numpy as np

from ..io import writer_alive

CACHE_VERSION = 2  # layout of the cache files (one .npy per table)


def cache_dir() -> Path:
    """Where decoded tables are cached (``$FA3SIM_CACHE``, else ``$XDG_CACHE_HOME`` or
    ``~/.cache``, under ``fa3-hopper-simulator``). Decoding takes seconds; reading the cache
    a fraction of one. The cache holds one uncompressed ``.npy`` file per table, named after
    the table's recorded checksum, and every file is re-verified against it at load."""
    root = os.environ.get("FA3SIM_CACHE")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fa3-hopper-simulator"


def cache_path(name: str, checksum_hex: str) -> Path:
    return cache_dir() / f"mufu-{CACHE_VERSION}-{name}-{checksum_hex}.npy"


WARNED: set[str] = set()  # cache problems already reported in this process


def warn_once(key: str, message: str) -> None:
    if key not in WARNED:
        WARNED.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=5)


def unusable_cache(path: Path, why: str) -> None:
    warn_once("unusable", f"cannot use the MUFU table cache {path} ({why}); decoding the tables "
                           "from the shipped data instead, which takes seconds in every process. "
                           "Remove it, or set FA3SIM_CACHE to a writable folder.")


def damaged_cache(path: Path, why: str) -> None:
    warnings.warn(f"ignoring the MUFU table cache {path}: {why}; decoding the tables from the "
                  "shipped data and rewriting the cache", RuntimeWarning, stacklevel=5)


def read_header(fh) -> tuple[np.dtype, tuple, int]:
    version = np.lib.format.read_magic(fh)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
    else:
        raise ValueError(f"unsupported .npy version {version}")
    if fortran:
        raise ValueError("Fortran-ordered array")
    return dtype, shape, fh.tell()


def cache_file(path: Path):
    """An open cache file, or None when there is none or it cannot be used (reported)."""
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        unusable_cache(path, f"{type(exc).__name__}: {exc}")
        return None
    if not stat.S_ISREG(mode):  # a directory, or a link to /dev/null or a FIFO
        unusable_cache(path, "not a regular file")
        return None
    try:
        return open(path, "rb")  # noqa: SIM115 (closed by the caller)
    except OSError as exc:
        unusable_cache(path, f"{type(exc).__name__}: {exc}")
        return None


def read_cached(path: Path, dtype: np.dtype, size: int, verify, mmap: bool):
    """The array cached at ``path`` if it has ``dtype``, ``size`` elements and passes
    ``verify(array) -> problem or None``; else None (after one warning; the caller rebuilds it).

    ``mmap``: map the file read-only (only the pages used become resident) after verifying its
    bytes through ordinary reads of the same open file; otherwise read it into memory."""
    fh = cache_file(path)
    if fh is None:
        return None
    with fh:
        try:
            got_dtype, shape, offset = read_header(fh)
        except Exception as exc:  # foreign content: rebuilt
            damaged_cache(path, f"cannot read it ({type(exc).__name__}: {exc})")
            return None
        if got_dtype != dtype or shape != (size,):
            damaged_cache(path, f"it holds {got_dtype} {shape}, expected {np.dtype(dtype)} "
                                 f"({size},)")
            return None
        try:
            if mmap:
                problem = verify(FileChunks(fh, offset, dtype, size))
                arr = None if problem else np.memmap(fh, dtype=dtype, mode="r", offset=offset,
                                                     shape=(size,))
            else:
                arr = np.empty(size, dtype=dtype)
                if fh.readinto(memoryview(arr).cast("B")) != arr.nbytes:
                    raise ValueError("file is shorter than its header says")
                problem = verify(arr)
        except (OSError, ValueError) as exc:
            damaged_cache(path, f"cannot read it ({type(exc).__name__}: {exc})")
            return None
    if problem:
        damaged_cache(path, problem)
        return None
    return arr


class FileChunks:
    """The data of an open .npy file read in chunks (for verification without mapping it)."""

    def __init__(self, fh, offset: int, dtype: np.dtype, size: int):
        self.fh, self.offset, self.dtype, self.size = fh, offset, np.dtype(dtype), size

    def chunks(self, step: int = 1 << 20):
        self.fh.seek(self.offset)
        buf = np.empty(step, dtype=self.dtype)
        for lo in range(0, self.size, step):
            n = min(step, self.size - lo)
            view = buf[:n]
            if self.fh.readinto(memoryview(view).cast("B")) != view.nbytes:
                raise ValueError("file is shorter than its header says")
            yield view


def chunks(a, step: int = 1 << 20):
    if isinstance(a, FileChunks):
        yield from a.chunks(step)
    else:
        for lo in range(0, a.size, step):
            yield a[lo:lo + step]


def write_cache(path: Path, table: np.ndarray) -> None:
    from ..io import write_bytes_atomic

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, np.lib.format.header_data_from_array_1_0(table))
    try:
        # not fsynced: every load verifies the file against the recorded checksum, so one torn
        # by a crash is caught and rewritten; the fsync of 160 MB took about 0.1 s of a cold run
        write_bytes_atomic(path, [header.getvalue(), memoryview(np.ascontiguousarray(table).view(np.uint8))],
                           durable=False)
    except OSError as exc:  # FA3SIM_CACHE a file, /dev/null, a read-only folder: decode each time
        unusable_cache(path, f"cannot write it: {exc.strerror or exc}")
        return
    except ValueError as exc:  # the cache path exists and is not a regular file
        unusable_cache(path, str(exc))
        return
    remove_old_versions(path.parent)


#: a temporary cache file untouched for this long belongs to a writer that was killed: a live
#: one writes its 20-64 MB within seconds
STALE_TMP_SECONDS = 600


def remove_stale_tmp(folder: Path) -> None:
    """Delete the temporary files (``.mufu-*.tmp``) that writers killed mid-write left in
    ``folder``, once per process, at the first table load: at once when the file names a
    writer of this host that is no longer running (:func:`simulator.io.writer_alive`), else
    when untouched for :data:`STALE_TMP_SECONDS`."""
    if str(folder) in SWEPT:
        return
    SWEPT.add(str(folder))
    try:
        found = list(folder.glob(".mufu-*.tmp"))
    except OSError:
        return
    now = time.time()
    for p in found:
        try:
            if not p.is_file() or p.is_symlink():
                continue
            alive = writer_alive(p.name)  # a dead writer of this host: at once; else by age
            if alive is False or (alive is None and now - p.stat().st_mtime > STALE_TMP_SECONDS):
                p.unlink()
        except OSError:  # another process removed it, or no permission: only disk space
            pass


SWEPT: set[str] = set()  # cache folders already swept of stale temporary files


def remove_old_versions(folder: Path) -> None:
    """Delete the cache files of earlier cache layouts in ``folder`` (``mufu-tables-1-*.npz``
    of version 1, ``mufu-<v>-*.npy`` of versions below :data:`CACHE_VERSION`): this process
    just wrote the current layout, and nothing reads the old files any more."""
    old = [*folder.glob("mufu-tables-*.npz"),
           *(p for p in folder.glob("mufu-*-*.npy")
             if p.name.split("-")[1].isdigit() and int(p.name.split("-")[1]) < CACHE_VERSION)]
    for p in old:
        try:
            if p.is_file() and not p.is_symlink():
                p.unlink()
        except OSError:  # another process, or no permission: harmless, it is only disk space
            pass
