"""Atomic file output and checked reads of recorded data.

Each writer writes to a temporary file in the destination folder, flushes it to disk and
renames it over the destination (``os.replace`` is atomic on POSIX and Windows).

:func:`read_npz` and :func:`read_json` read recorded files; a file listed in the
``MANIFEST.json`` of its folder (``simulator/data/device/MANIFEST.json``, written by
``scripts/make_manifest.py``) must have the SHA-256 recorded there, so an altered recording
is reported as corrupt data (exit 2), not as an emulator regression.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import socket
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from .errors import RecordedDataError

#: the recorded device data of the replay, and the manifest of its files' SHA-256
DEVICE_DATA_DIR = Path(__file__).resolve().parent / "data" / "device"
MANIFEST_NAME = "MANIFEST.json"
MANIFEST_FORMAT = "fa3sim-manifest/1"
MAKE_MANIFEST = "python scripts/make_manifest.py"


_WRITER_HOST = "".join(c if c.isalnum() else "-" for c in socket.gethostname())[:40] or "host"


def _writer() -> str:
    return f"w{_WRITER_HOST}~{os.getpid()}"


def writer_alive(tmp_name: str) -> bool | None:
    """Whether the writer of a temporary file of :func:`write_bytes_atomic` (by its name) is a
    live process of this host: True or False, or None when the name carries no writer of
    this host (an older layout, or another machine sharing the folder)."""
    for part in tmp_name.split("."):
        if part.startswith("w") and "~" in part:
            host, _, pid = part[1:].rpartition("~")
            if host != _WRITER_HOST or not pid.isdigit():
                return None
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                return False
            except OSError:  # EPERM: alive, another user's
                return True
            return True
    return None


def write_bytes_atomic(path: str | os.PathLike, data, durable: bool = True) -> Path:
    """Write ``data`` (bytes-like, or a list of bytes-like parts written one after the other,
    which spares joining large buffers) to ``path`` atomically; parent folders are created.
    Returns the path. ``durable=False`` skips the fsync before the rename: for files whose
    reader verifies them anyway (a crash may then leave a torn file under the final name,
    which that reader detects).

    A symbolic link is followed (its target is replaced, not the link). An existing path that
    is not a regular file (a directory, a device such as /dev/null, a FIFO) is refused.

    Raises:
        ValueError: ``path`` exists and is not a regular file.
        OSError: the folder cannot be written.
    """
    path = Path(os.path.realpath(path))
    if path.exists() and not path.is_file():
        raise ValueError(f"refusing to replace {path}: not a regular file")
    path.parent.mkdir(parents=True, exist_ok=True)
    # the writer's host and pid in the name: a later process tells a dead writer's leftover
    # from a live writer's file (writer_alive)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{_writer()}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file ordinary permissions
        with os.fdopen(fd, "wb") as fh:
            for part in data if isinstance(data, list) else [data]:
                fh.write(part)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | os.PathLike, obj, compact: bool = False) -> Path:
    """Write ``obj`` as indented JSON (UTF-8, trailing newline) atomically; ``compact``: no
    indentation or spaces (large recordings, which travel with every device visit)."""
    text = json.dumps(obj, separators=(",", ":")) if compact else json.dumps(obj, indent=2)
    return write_bytes_atomic(path, (text + "\n").encode())


def npz_bytes(arrays: dict, compresslevel: int = 6) -> bytes:
    """The bytes of a compressed ``.npz`` of ``arrays`` (as ``numpy.savez_compressed`` writes
    them, for ``numpy.load``) at zlib level ``compresslevel``; no pickled objects."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=compresslevel) as zf:
        for name, a in arrays.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.asanyarray(a), allow_pickle=False)
    return buf.getvalue()


def save_npz_atomic(path: str | os.PathLike, **arrays: np.ndarray) -> Path:
    """A compressed ``.npz`` (:func:`npz_bytes`, numpy's default level) to ``path`` atomically."""
    return write_bytes_atomic(path, npz_bytes(arrays))


def _quoted(regenerate: str) -> str:
    """The regenerate hint in backticks: ``cmd`` or ``cmd` on a GPU, then `cmd2`` -> balanced."""
    text = "`" + regenerate
    return text + "`" if text.count("`") % 2 else text


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def manifest_entries(folder: str | os.PathLike) -> dict[str, dict]:
    """``{name: {"bytes", "sha256"}}`` of the regular files of ``folder`` (sorted by name),
    leaving out the manifest itself and hidden files: what ``scripts/make_manifest.py`` writes."""
    folder = Path(folder)
    out = {}
    for path in sorted(folder.iterdir(), key=lambda p: p.name):
        if path.name == MANIFEST_NAME or path.name.startswith(".") or not path.is_file():
            continue
        data = path.read_bytes()
        out[path.name] = {"bytes": len(data), "sha256": sha256_bytes(data)}
    return out


def read_manifest(folder: str | os.PathLike) -> dict[str, dict] | None:
    """The ``files`` of ``folder/MANIFEST.json``, or None when the folder has none.

    Raises:
        RecordedDataError: the manifest is unreadable or not a manifest (naming the script
            that rewrites it).
    """
    path = Path(folder) / MANIFEST_NAME
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RecordedDataError(f"{path} is unreadable ({type(exc).__name__}: {exc}); "
                                f"regenerate it with `{MAKE_MANIFEST}`") from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if (not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT
            or not isinstance(files, dict)
            or not all(isinstance(e, dict) and isinstance(e.get("sha256"), str) for e in files.values())):
        raise RecordedDataError(f"{path} is not a {MANIFEST_FORMAT} manifest of file sha256s; "
                                f"regenerate it with `{MAKE_MANIFEST}`")
    return files


def check_manifest(path: str | os.PathLike, data: bytes, regenerate: str) -> None:
    """Raise RecordedDataError when ``path`` is listed in its folder's manifest with a SHA-256
    other than that of ``data`` (its content); files not listed pass unchecked."""
    path = Path(path)
    entry = (read_manifest(path.parent) or {}).get(path.name)
    if entry is not None and sha256_bytes(data) != entry["sha256"]:
        raise RecordedDataError(f"recording corrupt: {path} sha256 differs from {MANIFEST_NAME}; "
                                f"regenerate with {_quoted(regenerate)} (or, for an intended new "
                                f"recording, run `{MAKE_MANIFEST}`)")


def _read_recorded(path: Path, regenerate: str) -> bytes:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise RecordedDataError(f"{path} is missing; regenerate it with {_quoted(regenerate)}") from None
    except OSError as exc:
        raise RecordedDataError(f"{path} is unreadable ({type(exc).__name__}: {exc}); "
                                f"regenerate it with {_quoted(regenerate)}") from None
    check_manifest(path, data, regenerate)
    return data


def read_npz(path: str | os.PathLike, regenerate: str) -> dict[str, np.ndarray]:
    """All arrays of a recorded ``.npz`` file.

    Raises:
        RecordedDataError: missing or unreadable, or its SHA-256 differs from the manifest of
            its folder, naming the file and ``regenerate``.
    """
    path = Path(path)
    raw = _read_recorded(path, regenerate)
    try:
        with np.load(io.BytesIO(raw)) as data:
            return {k: data[k] for k in data.files}
    except Exception as exc:  # zipfile.BadZipFile, ValueError, OSError, EOFError ...
        raise RecordedDataError(f"{path} is unreadable ({type(exc).__name__}: {exc}); "
                                f"regenerate it with {_quoted(regenerate)}") from None


def read_json(path: str | os.PathLike, regenerate: str):
    """A recorded JSON file. Raises RecordedDataError like :func:`read_npz`."""
    path = Path(path)
    raw = _read_recorded(path, regenerate)
    try:
        return json.loads(raw.decode())
    except ValueError as exc:  # UnicodeDecodeError, json.JSONDecodeError
        raise RecordedDataError(f"{path} is unreadable ({type(exc).__name__}: {exc}); "
                                f"regenerate it with {_quoted(regenerate)}") from None
