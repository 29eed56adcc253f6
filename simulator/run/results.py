"""The result file of ``python -m simulator run`` (O, LSE, the reference, the trace and the
parameters in one ``.npz``, written atomically) and the checks of an output path."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path

import numpy as np

from ..errors import UsageError
from ..flash.config import DTYPES


def _kind(st: os.stat_result) -> str:
    mode = st.st_mode
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def same_file(a, b) -> bool:
    """Whether paths ``a`` and ``b`` name one file: the same real path (links followed), or
    the same inode where both exist (hard links, bind mounts)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_output_path(path, what: str, inputs: tuple[tuple[str, object], ...] = ()) -> None:
    """Fail before any work if ``path`` cannot receive the result (UsageError, one line).

    ``path`` as the user typed it: a path ending in a separator names a folder and is refused
    (it would have become a file of that name). An existing path that is not a regular file (a
    folder, /dev/null, a FIFO; links are followed, as the atomic write does) is refused, and so
    is the file of an input: ``inputs`` holds ``(option, path)`` pairs (``("--input", ...)``;
    None paths are skipped), and writing over one of them would lose the user's data. The
    folder's writability is tested by creating and removing a temporary file there
    (``os.access`` says yes to root even on /proc); missing folders are created for the test
    and removed again.
    """
    raw = os.fspath(path)
    if raw.endswith(os.sep) or (os.altsep and raw.endswith(os.altsep)):
        raise UsageError(f"{what} {raw}: names a folder; expected a file path "
                         f"(such as {os.path.join(raw, 'run.npz')})")
    for option, given in inputs:
        if given is not None and same_file(raw, given):
            raise UsageError(f"{what} {raw}: the same file as {option} {given}; refusing to "
                             "overwrite an input (choose another output path)")
    path = Path(raw)
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


def save_result(path: Path, out, lse, ref_out, ref_lse, trace, params: dict,
                extra: dict | None = None) -> None:
    """O (float32 values and raw bits), LSE, the reference, the trace (keys ``trace__*``) and the
    parameters (``params``, JSON) in one compressed ``.npz``, written atomically (deflate level 1:
    60 ms less than numpy's level 6 for the default job's 1.2 MB, 2% larger). ``extra``: more
    arrays (``--backward``'s dout, dq, dk, dv: bf16 / fp16 kept as their raw uint16 bits,
    ``{name}_bits``, with ``{name}_dtype``)."""
    from ..io import npz_bytes, write_bytes_atomic

    bits = out.view(np.uint16)
    arrays = {"out": out.astype(np.float32), "out_bits": bits, "out_dtype": np.array(str(out.dtype)),
              "lse": lse, "ref_out": ref_out, "ref_lse": ref_lse,
              "params": np.array(json.dumps(params))}
    for name, x in (extra or {}).items():
        arrays[f"{name}_bits"] = x.view(np.uint16)
        arrays[f"{name}_dtype"] = np.array(str(x.dtype))
    if trace is not None and len(trace):
        arrays.update({f"trace__{k}": v for k, v in trace.to_arrays().items()})
    write_bytes_atomic(path, npz_bytes(arrays, compresslevel=1))


#: the arrays every result file of ``run`` holds
RESULT_KEYS = ("out", "out_dtype", "lse", "ref_out", "ref_lse", "params")


def load_result(path) -> dict:
    """Read a file written by ``run``: arrays, ``params`` (dict) and ``trace`` (a Trace).

    Raises:
        ValueError: the file is not a ``.npz`` written by ``run`` (arrays missing, ``params``
            not its JSON), naming the file and what it lacks.
    """
    from ..trace import Trace

    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (ValueError, OSError) as exc:  # not an npz, or a pickled one
        raise ValueError(f"path: {path} is not a result file of `python -m simulator run` "
                         f"({type(exc).__name__}: {exc})") from None
    missing = [k for k in RESULT_KEYS if k not in data]
    if missing:
        raise ValueError(f"path: {path} is not a result file of `python -m simulator run`: it "
                         f"lacks {', '.join(missing)} (it holds {', '.join(sorted(data)) or 'nothing'})")
    try:
        params = json.loads(str(data["params"]))
    except ValueError:
        params = None
    if not isinstance(params, dict):
        raise ValueError(f"path: {path}: its params is not the JSON object `run` writes")

    class _View(dict):
        @property
        def files(self):
            return list(self)

    tr = _View({k[len("trace__"):]: v for k, v in data.items() if k.startswith("trace__")})
    res = {k: v for k, v in data.items() if not k.startswith("trace__")}
    res["params"] = params
    res["out"] = res["out"].astype(DTYPES["bf16"] if str(res["out_dtype"]) == "bfloat16"
                                   else np.dtype(str(res["out_dtype"])))
    res["trace"] = Trace.from_npz(tr) if tr else Trace()
    return res
