"""Run FlashAttention-3's own tests (``hopper/test_flash_attn.py``) against ``simulator.fa3`` on CPU.

Usage (from the repository root)::

    python scripts/run_upstream_fa3_tests.py [SOURCE] [--subset quick|full] [-n WORKERS]
        [--rev REV] [--keep DIR] [--report PATH] [--list] [--cheap-first]
        [--time-limit S] [-- PYTEST_ARGS...]

(everything after ``--`` goes to pytest, e.g. ``-- -k kvcache``)

SOURCE is a checkout of https://github.com/Dao-AILab/flash-attention (the folder holding
``hopper/``; a plain copy of the three files under ``hopper/`` names its commit in an
``UPSTREAM_COMMIT`` file beside it) or its git directory (a bare mirror: the files are read
with ``git show REV:...``).
Default: the mirror at ``/work/.mirror/Dao-AILab+flash-attention/repo`` when present.

This project holds none of upstream's test code: the three files (``test_flash_attn.py``,
``test_util.py``, ``padding.py``) are read from SOURCE, copied to a temporary folder and edited
there, each edit an exact text replacement that must apply (an upstream change that breaks one
stops the run, naming it):

- ``flash_attn_interface`` imports -> ``simulator.fa3`` (the drop-in);
- ``device = "cuda"`` -> ``device = "cpu"``;
- the FP8 switch's ``torch.cuda.get_device_capability("cuda")[0] < 9`` -> ``False`` (no CUDA;
  the emulated GPU is a Hopper);
- the Triton rotary helper (``flash_attn.layers.rotary.apply_rotary_emb``) -> a CPU float32
  reference written here (``_cpu_rotary.py``, same signature and rounding points: float32
  arithmetic, one rounding to x's dtype);
- the race-condition test's 1,000 repeats -> 3, and its 70 GiB ``torch.empty`` (GPU memory
  pressure, no meaning on a CPU; on a host it asks for 70 GiB) -> ``None``.

No assertion or tolerance is touched. The folder's own ``conftest.py`` (written here) runs one
thread per xdist worker and registers FA3's op library over ``simulator.fa3``
(``simulator.fa3.register_torch_ops("flash_attn_3")``, which
``test_flash3_bw_compatibility`` reads). The parameter subset replaces each test function's
``parametrize`` marks, read from upstream's own lists at import (``_subset.py``): ``full``
covers every pair of values of every two axes (pairs with an expensive value, such as a
4096-long sequence, are covered once per value), skipping the combinations upstream's test
skips; ``quick`` covers every value of every axis once. The report (``--report``) gives the
upstream commit and, per test function, passed / failed / skipped, and every failure's first
line.

Needs: torch (CPU), einops, pytest, pytest-xdist. Exit status: pytest's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

MIRROR = Path("/work/.mirror/Dao-AILab+flash-attention/repo")
FILES = ("test_flash_attn.py", "test_util.py", "padding.py")
REPO_ROOT = Path(__file__).resolve().parent.parent

# (what, old text, new text, at least how many occurrences)
EDITS = {
    "test_flash_attn.py": [
        ("import swapped to simulator.fa3", "from flash_attn_interface import",
         "from simulator.fa3 import", 1),
        ("device = cpu", 'device = "cuda"', 'device = "cpu"', 1),
        ("no CUDA capability query", 'torch.cuda.get_device_capability("cuda")[0] < 9', "False", 1),
        ("CPU float32 rotary reference", "from flash_attn.layers.rotary import apply_rotary_emb",
         "from _cpu_rotary import apply_rotary_emb", 1),
        ("3 race-condition repeats", "for i in range(1000):", "for i in range(3):", 1),
        ("no 70 GiB host allocation",
         "dummy = torch.empty(70 * 1024 ** 3, dtype=torch.uint8, device=device)", "dummy = None", 1),
    ],
}

ROTARY = '''"""CPU float32 stand-in for flash_attn.layers.rotary.apply_rotary_emb (Triton, CUDA only),
written for scripts/run_upstream_fa3_tests.py from the helper's documented behaviour: the first
rotary_dim = 2 * cos.shape[-1] features of x rotated in float32 (halves, or even / odd pairs
with interleaved), positions seqlen_offsets + s, positions past cos's rows left unrotated,
the result rounded once to x's dtype; the other features are copied."""
import torch


def apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0,
                     cu_seqlens=None, max_seqlen=None):
    if cu_seqlens is not None:
        raise NotImplementedError("cu_seqlens: not needed by hopper/test_flash_attn.py")
    batch, seqlen, _, _ = x.shape
    ro, rd = cos.shape[0], 2 * cos.shape[-1]
    if isinstance(seqlen_offsets, torch.Tensor):
        offsets = seqlen_offsets.to(torch.int64).reshape(batch, 1)
    else:
        offsets = torch.full((batch, 1), int(seqlen_offsets), dtype=torch.int64)
    pos = offsets + torch.arange(seqlen, dtype=torch.int64)[None]  # [batch, seqlen]
    inside = pos < ro
    idx = pos.clamp(max=ro - 1)
    c = torch.where(inside[..., None], cos.float()[idx], torch.ones((), dtype=torch.float32))
    s = torch.where(inside[..., None], sin.float()[idx], torch.zeros((), dtype=torch.float32))
    c, s = c[:, :, None, :], s[:, :, None, :]  # [batch, seqlen, 1, rd / 2]
    xr = x[..., :rd].float()
    if interleaved:
        x0, x1 = xr[..., 0::2], xr[..., 1::2]
        rot = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)
    else:
        x0, x1 = xr[..., : rd // 2], xr[..., rd // 2:]
        rot = torch.cat((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)
    out = x if inplace else x.clone()
    out[..., :rd] = rot.to(x.dtype)
    return out
'''

CONFTEST = '''"""Written by scripts/run_upstream_fa3_tests.py: one thread per xdist worker; FA3's op
library (torch.ops.flash_attn_3.*, which test_flash3_bw_compatibility reads) registered over
simulator.fa3, as a user asks for it."""
import os

import torch

from simulator import engine, fa3

fa3.register_torch_ops("flash_attn_3")

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
    engine.set_threads(1)


def _cost(item):
    p = getattr(getattr(item, "callspec", None), "params", {})
    work = p.get("seqlen_q", 1) * p.get("seqlen_k", 1) * p.get("d", 128)
    work += p.get("num_splits", 0) * p.get("seqlen", 0) * p.get("d", 0)
    return work * (60 if "race_condition" in item.name else 1)


def pytest_collection_modifyitems(config, items):
    if os.environ.get("FA3_UPSTREAM_ORDER") == "cheap":
        items.sort(key=_cost)
'''

SUBSET = r'''"""Written by scripts/run_upstream_fa3_tests.py: each test function's parametrize marks,
read from upstream's lists, replaced by one mark over a covering subset of their product."""
import itertools
import os
import random

import pytest
import torch

STRENGTH = {"full": 2, "quick": 1}[os.environ["FA3_UPSTREAM_SUBSET"]]
# functions run on every combination whatever the subset (their product is small)
EVERY = {"test_flash_attn_cluster", "test_flash_attn_varlen_combine_linearize",
         "test_flash3_bw_compatibility"}
# functions covered value by value only (each case is 4 forwards and 4 backwards of batch 60)
ONCE = {"test_flash_attn_race_condition"}
LONG = 2048  # a (seqlen_q, seqlen_k) value at or above it: its pairs are covered once


def _valid(name, row):
    """False for the combinations upstream's test body skips at once (its pytest.skip
    conditions); a row missing an axis a condition reads is not judged on it."""
    def has(*keys):
        return all(k in row for k in keys)

    g = row.get
    if name in ("test_flash_attn_output", "test_flash_attn_varlen_output") \
            and has("has_qv", "d", "dtype"):
        if g("has_qv") and (g("d") != 64 or g("dtype") == torch.float8_e4m3fn):
            return False
    if name == "test_flash_attn_kvcache":
        sq, sk = g("seqlen_q,seqlen_k", (None, None))
        if has("page_size", "seqlen_q,seqlen_k") and g("page_size") is not None \
                and sk % g("page_size") != 0:
            return False
        if has("new_kv", "seqlen_q,seqlen_k") and sq > sk and g("new_kv"):
            return False
        if has("new_kv", "rotary_fraction") and not g("new_kv") and g("rotary_fraction") > 0.0:
            return False
        if has("rotary_fraction", "has_rotary_seqlens") and g("rotary_fraction") == 0.0 \
                and g("has_rotary_seqlens"):
            return False
    return True


def _heavy(axis, value):
    return axis == "seqlen_q,seqlen_k" and max(value) >= LONG


def _cost(row):
    sq, sk = row.get("seqlen_q,seqlen_k", (1, 1))
    return sq * sk * row.get("d", 128)


def _cover(name, axes, strength):
    """A list of rows (dicts axis -> value): every value (strength 1) or every pair of values
    of two axes (strength 2; a heavy value's pairs once) in some valid row. Greedy, seeded:
    the same list in every xdist worker."""
    names = list(axes)
    needs = {((a, i),) for a in names for i in range(len(axes[a]))}
    if strength == 2:
        for a, b in itertools.combinations(names, 2):
            for i, j in itertools.product(range(len(axes[a])), range(len(axes[b]))):
                if not (_heavy(a, axes[a][i]) or _heavy(b, axes[b][j])):
                    needs.add(((a, i), (b, j)))
    pos = {a: n for n, a in enumerate(names)}

    def pair(x, y):
        return (x, y) if pos[x[0]] < pos[y[0]] else (y, x)

    def covered(pick):
        out = {n for n in (((a, i),) for a, i in pick.items()) if n in needs}
        for (a, i), (b, j) in itertools.combinations(pick.items(), 2):
            n = pair((a, i), (b, j))
            if n in needs:
                out.add(n)
        return out

    def row_of(pick):
        return {a: axes[a][i] for a, i in pick.items()}

    rng = random.Random(0)
    rows = []
    while needs:
        seed = sorted(needs, key=lambda n: (-len(n), repr(n)))[0]
        best = None
        for _ in range(20):
            pick = dict(seed)
            order = [a for a in names if a not in pick]
            rng.shuffle(order)
            for a in order:
                cands = []
                for i, v in enumerate(axes[a]):
                    if _heavy(a, v) or not _valid(name, {**row_of(pick), a: v}):
                        continue
                    gain = (((a, i),) in needs) + sum(
                        pair((a, i), (b, j)) in needs for b, j in pick.items())
                    cands.append((-gain, i))
                if not cands:  # only heavy or invalid values: the first valid, else give up
                    ok = [i for i, v in enumerate(axes[a])
                          if _valid(name, {**row_of(pick), a: v})]
                    if not ok:
                        break
                    cands = [(0, ok[0])]
                top = [i for g, i in cands if g == min(cands)[0]]
                pick[a] = rng.choice(top)
            row = row_of(pick)
            if len(row) < len(names) or not _valid(name, row):
                continue
            got = covered(pick)
            key = (len(got), -_cost(row))
            if best is None or key > best[0]:
                best = (key, pick, got)
        if best is None or not best[2]:  # no valid row holds this required value: upstream skips it
            needs.discard(seed)
            continue
        rows.append({a: axes[a][i] for a, i in best[1].items()})
        needs -= best[2]
    return rows


def _show(v):
    if isinstance(v, torch.dtype):
        return str(v).replace("torch.", "")
    if isinstance(v, tuple):
        return "x".join(str(x) for x in v)
    return str(v)


def apply(namespace):
    for fname, fn in list(namespace.items()):
        if not fname.startswith("test_") or not callable(fn):
            continue
        marks = getattr(fn, "pytestmark", [])
        params = [m for m in marks if m.name == "parametrize"]
        if not params or fname in EVERY:
            continue
        axes = {}
        for m in params:  # the decorator nearest the function first, as in pytest's ids
            argnames, argvalues = m.args[0], list(m.args[1])
            axes[argnames] = argvalues
        rows = _cover(fname, axes, 1 if fname in ONCE else STRENGTH)
        argnames = [a.strip() for key in axes for a in key.split(",")]
        values, ids = [], []
        for row in rows:
            flat = []
            for key in axes:
                flat.extend(row[key] if "," in key else [row[key]])
            values.append(tuple(flat))
            ids.append("-".join(_show(row[key]) for key in axes))
        others = [m for m in marks if m.name != "parametrize"]
        fn.pytestmark = others + [pytest.mark.parametrize(",".join(argnames), values, ids=ids)]
'''


def read_sources(source: Path, rev: str) -> tuple[dict[str, str], str]:
    """The three upstream files' text and the commit they come from."""
    if (source / "hopper").is_dir():  # a checkout, or a copy of the three files
        texts = {f: (source / "hopper" / f).read_text() for f in FILES}
        stamp = source / "UPSTREAM_COMMIT"
        if stamp.is_file():
            return texts, stamp.read_text().strip()
        top = subprocess.run(["git", "-C", str(source), "rev-parse", "--show-toplevel", "HEAD"],
                             capture_output=True, text=True)
        lines = top.stdout.split()
        if top.returncode == 0 and Path(lines[0]).resolve() == source.resolve():
            return texts, lines[1]
        return texts, "unknown (not a git checkout's top folder, no UPSTREAM_COMMIT file)"
    if (source / "HEAD").is_file() and (source / "objects").is_dir():  # a git directory
        git = ["git", f"--git-dir={source}"]
        commit = subprocess.run(git + ["rev-parse", rev], capture_output=True, text=True,
                                check=True).stdout.strip()
        texts = {f: subprocess.run(git + ["show", f"{commit}:hopper/{f}"], capture_output=True,
                                   text=True, check=True).stdout for f in FILES}
        return texts, commit
    raise SystemExit(f"SOURCE: {source} is neither a flash-attention checkout (with hopper/) nor "
                     f"its git directory")


def edit(name: str, text: str) -> str:
    """``text`` with the edits of :data:`EDITS` for ``name``; stops when one does not apply."""
    for what, old, new, least in EDITS.get(name, []):
        n = text.count(old)
        if n < least:
            raise SystemExit(f"upstream {name} changed: edit '{what}' found {n} occurrence(s) of "
                             f"{old!r} (expected >= {least}); update EDITS in {__file__}")
        text = text.replace(old, new)
    return text + ("\n\n# appended by scripts/run_upstream_fa3_tests.py: the parameter subset\n"
                   "import _subset\n_subset.apply(globals())\n" if name == "test_flash_attn.py"
                   else "")


def summarise(junit: Path, commit: str, subset: str) -> str:
    """The result table (markdown) from pytest's junit XML."""
    counts: dict[str, Counter] = {}
    failures = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name") or ""
        if not name.startswith("test"):  # an entry of an interrupted xdist run
            continue
        func = name.split("[")[0]
        c = counts.setdefault(func, Counter())
        fail = case.find("failure") if case.find("failure") is not None else case.find("error")
        if fail is not None:
            c["failed"] += 1
            msg = (fail.get("message") or "").strip().splitlines()
            failures.append((name, msg[0][:300] if msg else ""))
        elif case.find("skipped") is not None:
            c["skipped"] += 1
        else:
            c["passed"] += 1
        c["time"] += float(case.get("time", 0))
    lines = [f"upstream commit {commit}, subset {subset}", "",
             "| test function | passed | failed | skipped | seconds (sum) |",
             "| --- | --- | --- | --- | --- |"]
    tot = Counter()
    for func in sorted(counts):
        c = counts[func]
        tot.update(c)
        lines.append(f"| {func} | {c['passed']} | {c['failed']} | {c['skipped']} | {c['time']:.0f} |")
    lines.append(f"| total | {tot['passed']} | {tot['failed']} | {tot['skipped']} | {tot['time']:.0f} |")
    if failures:
        lines += ["", "failures:", ""] + [f"- `{n}`: {m}" for n, m in sorted(failures)]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", nargs="?", type=Path, default=None,
                    help="flash-attention checkout or git dir (default: the local mirror)")
    ap.add_argument("--rev", default="HEAD", help="commit to read from a git dir (default HEAD)")
    ap.add_argument("--subset", choices=("quick", "full"), default="full")
    ap.add_argument("-n", "--workers", default="auto", help="pytest-xdist workers (0: none)")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="seconds after which pytest is interrupted (the finished cases are "
                         "reported)")
    ap.add_argument("--keep", type=Path, help="write the edited files here and keep them")
    ap.add_argument("--report", type=Path, help="write the result table (markdown) here")
    ap.add_argument("--list", action="store_true", help="only list the selected cases")
    ap.add_argument("--cheap-first", action="store_true",
                    help="run the cases in order of a work estimate, smallest first (a run cut "
                         "short keeps the most results; the default, upstream's order, ends sooner "
                         "with many workers)")
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.pytest_args = extra
    source = args.source
    if source is None:
        if not MIRROR.is_dir():
            raise SystemExit("no SOURCE given and no local mirror: git clone "
                             "https://github.com/Dao-AILab/flash-attention and pass its path")
        source = MIRROR
    texts, commit = read_sources(source.resolve(), args.rev)
    work = args.keep or Path(tempfile.mkdtemp(prefix="fa3_upstream_"))
    work.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        (work / name).write_text(edit(name, text))
    (work / "_cpu_rotary.py").write_text(ROTARY)
    (work / "_subset.py").write_text(SUBSET)
    (work / "conftest.py").write_text(CONFTEST)
    (work / "UPSTREAM_COMMIT").write_text(commit + "\n")
    env = dict(os.environ, FA3_UPSTREAM_SUBSET=args.subset,
               FA3_UPSTREAM_ORDER="cheap" if args.cheap_first else "upstream", NUMBA_NUM_THREADS="1",
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), str(work),
                                                     env.get("PYTHONPATH", "")) if p)
    junit = work / "junit.xml"
    cmd = [sys.executable, "-m", "pytest", "test_flash_attn.py", "-p", "no:cacheprovider",
           "-q", "--rootdir", str(work), "-o", "addopts="]
    if args.list:
        cmd += ["--collect-only"]
    else:
        cmd += [f"--junitxml={junit}", "-rf"]
        if args.workers != "0":
            cmd += ["-n", args.workers, "--dist", "load" if args.cheap_first else "worksteal"]
    cmd += args.pytest_args
    print(f"upstream {commit} from {source}; edited files in {work}", flush=True)
    proc = subprocess.Popen(cmd, cwd=work, env=env)
    stopped = None
    try:
        rc = proc.wait(timeout=args.time_limit)
    except (subprocess.TimeoutExpired, KeyboardInterrupt) as exc:
        # pytest writes its junit file on an interrupt: the cases finished so far are kept
        stopped = ("time limit" if isinstance(exc, subprocess.TimeoutExpired) else "interrupted")
        proc.send_signal(signal.SIGINT)
        rc = proc.wait()
    if not args.list and junit.exists():
        table = summarise(junit, commit, args.subset)
        if stopped:
            table = f"stopped ({stopped}): the cases that finished\n\n" + table
        print(table)
        if args.report:
            args.report.write_text(table)
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
