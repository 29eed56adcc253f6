"""Atomic file output: every file the tool writes appears whole or not at all.

Each writer writes to a temporary file in the destination folder, flushes it to disk and
renames it over the destination (``os.replace`` is atomic on POSIX and Windows).
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from .errors import RecordedDataError


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; parent folders are created. Returns the path.

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
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file ordinary permissions
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | os.PathLike, obj) -> Path:
    """Write ``obj`` as indented JSON (UTF-8, trailing newline) atomically."""
    return write_bytes_atomic(path, (json.dumps(obj, indent=2, sort_keys=False) + "\n").encode())


def save_npz_atomic(path: str | os.PathLike, **arrays: np.ndarray) -> Path:
    """``numpy.savez_compressed`` to ``path`` atomically."""
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return write_bytes_atomic(path, buf.getvalue())


def _quoted(regenerate: str) -> str:
    """The regenerate hint in backticks: ``cmd`` or ``cmd` on a GPU, then `cmd2`` -> balanced."""
    text = "`" + regenerate
    return text + "`" if text.count("`") % 2 else text


def read_npz(path: str | os.PathLike, regenerate: str) -> dict[str, np.ndarray]:
    """All arrays of a recorded ``.npz`` file.

    Raises:
        RecordedDataError: missing or unreadable, naming the file and ``regenerate``.
    """
    path = Path(path)
    try:
        with np.load(path) as data:
            return {k: data[k] for k in data.files}
    except FileNotFoundError:
        raise RecordedDataError(f"{path} is missing; regenerate it with {_quoted(regenerate)}") from None
    except Exception as exc:  # zipfile.BadZipFile, ValueError, OSError, EOFError ...
        raise RecordedDataError(f"{path} is unreadable ({type(exc).__name__}: {exc}); "
                                f"regenerate it with {_quoted(regenerate)}") from None


def read_json(path: str | os.PathLike, regenerate: str):
    """A recorded JSON file. Raises RecordedDataError like :func:`read_npz`."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise RecordedDataError(f"{path} is missing; regenerate it with {_quoted(regenerate)}") from None
    except (OSError, ValueError) as exc:
        raise RecordedDataError(f"{path} is unreadable ({type(exc).__name__}: {exc}); "
                                f"regenerate it with {_quoted(regenerate)}") from None
