"""The engine's sources as this process loaded them: what a cached kernel's stamp describes.

numba stamps a cached kernel when it is decorated (its module's import) and loads machine
code whose stamp equals the one a later process computes. The engine's kernels inline
functions of sibling modules (``ex2_packed.lookup`` into ``softmax.ex2_rows``, ``intrinsics``
everywhere), and a module may be imported long after another: a process that imported
:mod:`.launch`, then saw a sibling edited on disk (a ``git pull`` in a running notebook), then
imported that sibling and compiled, holds machine code of the edited sibling. Its stamp must
say so, whatever the files hold later.

So each engine module's bytes are recorded the first time this process sees the module
imported (:func:`note_loaded`: at the engine package's import, at :mod:`.launch`'s, and at
every kernel's decoration, which happens inside its own module's import), and a stamp is the
SHA-256 over every ``*.py`` of the package: the recorded bytes of the modules this process
imported, the files' current bytes for the others (which no kernel of this process inlines).
Two processes that compiled from the same bytes compute the same stamp; a process that
compiled from other bytes computes another, so neither loads the other's machine code.

This module imports nothing heavy (no numba): the engine package imports it first.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
_PACKAGE = __name__.rpartition(".")[0]

# file name -> bytes when this process first saw its module imported
_AS_LOADED: dict[str, bytes] = {}


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def note_loaded() -> None:
    """Record the bytes of every module of the engine package that this process has imported
    and not yet recorded (its bytes now: the module was imported moments ago, or, for the
    modules imported with the package, at the package's import)."""
    for name, module in list(sys.modules.items()):
        if name != _PACKAGE and not name.startswith(_PACKAGE + "."):
            continue
        file = getattr(module, "__file__", None)
        if not file:
            continue
        path = Path(file)
        if path.name not in _AS_LOADED and path.resolve().parent == PACKAGE_DIR:
            data = _read(path)
            if data is not None:
                _AS_LOADED[path.name] = data


def files_digest(package: Path = PACKAGE_DIR) -> str:
    """The SHA-256 of every ``*.py`` of ``package`` as the files are now (names and bytes, in
    name order)."""
    digest = hashlib.sha256()
    for src in sorted(package.glob("*.py")):
        digest.update(src.name.encode() + b"\0" + (_read(src) or b"") + b"\0")
    return digest.hexdigest()


def loaded_digest() -> str:
    """The SHA-256 of the engine's sources as this process compiles from them: every ``*.py``
    of the package, each module this process imported as it was when first seen imported
    (:func:`note_loaded`), the others as they are now. The stamp of a cached kernel."""
    note_loaded()
    digest = hashlib.sha256()
    for src in sorted(PACKAGE_DIR.glob("*.py")):
        data = _AS_LOADED.get(src.name)
        if data is None:
            data = _read(src) or b""
        digest.update(src.name.encode() + b"\0" + data + b"\0")
    return digest.hexdigest()
