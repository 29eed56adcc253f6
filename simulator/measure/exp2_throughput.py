"""exp2f with the softmax scale folded into one FFMA (FlashAttention-3) against expf: the SASS
each compiles to and the exponentials per second each reaches on the GPU.

The probe ``kernels/probes/exp2_throughput.cu`` computes ``exp((x - m) * scale)`` three ways
(``expf``, ``__expf``, FA3's ``exp2f(x * scale_log2 - max_scaled)``), each compiled without and
with ``--use_fast_math``. Two modes::

    python -m simulator measure exp2_throughput --out OUTDIR          # on an sm_90 GPU
    python -m simulator measure exp2_throughput --sass --out OUTDIR   # nvcc + cuobjdump, no GPU

The GPU run writes ``exp2_throughput.json`` atomically: provenance, per flag set and form the
median time of the throughput kernel (CUDA events, warm-up, several runs interleaved), the
exponentials per second and per SM per clock, the ratio to FA3's form, a doubling check (twice
the repeats takes twice the time: the kernel is bound by the instruction issue and the MUFU unit,
not by memory), and the outputs of the one-element kernels on 2^20 inputs against float64 and,
bit for bit, against the emulator's instruction sequences (:func:`emulated`).

``--sass`` writes ``exp2_sass.json``: the nvcc and disassembler versions, the probe's SHA-256 and,
per flag set and form, the instructions per exponential of the throughput kernel's unrolled loop
(by opcode) and the listing of the one-element kernel.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from ..device import runtime
from ..errors import EXIT_USAGE
from ..io import write_json_atomic
from .common import kernel_provenance, out_parser

PROBE = "probes/exp2_throughput.cu"
FORMS = ("expf", "iexpf", "exp2f")
#: what each form computes, in CUDA
FORM_CODE = {"expf": "expf(x * scale - m_scale)", "iexpf": "__expf(x * scale - m_scale)",
             "exp2f": "exp2f(x * scale_log2 - max_scaled)"}
FLAG_SETS = {"plain": (), "fast_math": ("--use_fast_math",)}
NVCC_FLAGS = ("-arch=sm_90", "-cubin")
NVRTC_FLAGS = ("-arch=sm_90a", "-std=c++17")
#: exponentials in one iteration of the throughput kernel's unrolled loop (ILP x unroll 8)
PER_ITERATION = 32
HEAD_DIM = 128
ROW_MAX = 1.0
BLOCK = 256
_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*;)")
_BRANCH = re.compile(r"\bBRA\s+0x([0-9a-f]+)")
_PRED = re.compile(r"^@!?U?P[T0-9]+\s+")


# ---- the arguments the host passes -------------------------------------------------------------
def constants(head_dim: int = HEAD_DIM, row_max: float = ROW_MAX) -> dict[str, dict[str, float]]:
    """Per form, the kernel arguments ``a`` (multiplier) and ``c`` (subtrahend), float32 as the
    host rounds them: ``scale = 1/sqrt(head_dim)``; ``expf`` and ``__expf`` take ``scale`` and
    ``m * scale``; ``exp2f`` takes ``scale_log2 = scale * log2(e)`` and ``m * scale_log2``
    (FA3's ``softmax_scale_log2`` and ``max_scaled``, hopper/softmax.h). Python floats."""
    scale = np.float32(1.0 / np.sqrt(head_dim))
    scale_log2 = np.float32(scale * np.float32(np.log2(np.e)))
    m = np.float32(row_max)
    natural = {"a": float(scale), "c": float(np.float32(m * scale))}
    folded = {"a": float(scale_log2), "c": float(np.float32(m * scale_log2))}
    return {"expf": natural, "iexpf": natural, "exp2f": folded}


def emulated(form: str, flags: str, x: np.ndarray, a: float, c: float) -> np.ndarray | None:
    """The emulator's instruction sequence of ``map_<form>`` compiled with ``flags`` (a key of
    :data:`FLAG_SETS`), float32 in and out; None for the accurate ``expf`` (no model).

    fast_math: ``FFMA.FTZ``, (``FMUL.FTZ`` by log2(e) for expf / __expf), ``MUFU.EX2``; plain:
    the same without ``.FTZ`` and ex2 with sm_90's subnormal fix-up (``ex2(ftz=False)``).
    Source: the listings in simulator/data/sass/exp2_sass.json; MUFU.EX2 from
    simulator/data/device/mufu_report.json."""
    from ..numerics import ffma, fmul, mufu  # noqa: PLC0415 - loads the MUFU tables on use

    ftz = flags == "fast_math"
    if form == "expf" and not ftz:
        return None
    arg = ffma(x, np.float32(a), np.float32(-np.float32(c)), ftz=ftz)
    if form in ("expf", "iexpf"):
        arg = fmul(arg, mufu.LOG2E_F32, ftz=ftz)
    return mufu.ex2(arg, ftz=ftz)


def check_inputs(seed: int = 0) -> np.ndarray:
    """2^20 float32 inputs of the one-element kernels: a dense sweep and random values in
    [-2000, 1], so that the arguments reach the subnormal and underflow range (fix-ups run)."""
    rng = np.random.default_rng(seed)
    half = 1 << 19
    return np.concatenate([np.linspace(-2000, 1, half, dtype=np.float32),
                           rng.uniform(-2000, 1, half).astype(np.float32)])


# ---- SASS --------------------------------------------------------------------------------------
def parse_sass(text: str) -> dict[str, list[tuple[int, str]]]:
    """``{function: [(address, instruction), ...]}`` of a ``cuobjdump -sass`` or ``nvdisasm``
    listing (encodings, comments and NOPs dropped; nvdisasm's branch labels replaced by the
    address they stand for, as cuobjdump prints them)."""
    functions: dict[str, list[tuple[int, str]]] = {}
    labels: dict[str, int] = {}
    pending: list[str] = []
    current = None
    for line in text.splitlines():
        head = re.search(r"Function : (\w+)", line) or re.match(r"\s*\.text\.(\w+):", line)
        if head:
            current = functions.setdefault(head.group(1), [])
            continue
        label = re.match(r"\s*(\.L_x_\d+):", line)
        if label:
            pending.append(label.group(1))
            continue
        m = _INSTR.search(line)
        if m and current is not None:
            addr, instr = int(m.group(1), 16), " ".join(m.group(2).split())
            labels.update(dict.fromkeys(pending, addr))
            pending = []
            if opcode(instr) != "NOP":
                current.append((addr, instr))

    def resolve(instr: str) -> str:
        return re.sub(r"`?\((\.L_x_\d+)\)", lambda g: hex(labels.get(g.group(1), -1)), instr)

    return {f: [(a, resolve(i)) for a, i in listing] for f, listing in functions.items()}


def opcode(instr: str) -> str:
    """The mnemonic with its modifiers (``FFMA.FTZ``, ``MUFU.EX2``), predicate dropped."""
    return _PRED.sub("", instr).split()[0].rstrip(";")


def unrolled_loop(listing: list[tuple[int, str]]) -> list[str]:
    """The instructions (target to branch) of the shortest backward branch's body that holds
    exactly :data:`PER_ITERATION` ``MUFU.EX2``: the throughput kernel's unrolled inner loop (an
    enclosing loop holds more, the remainder loops fewer).

    Raises:
        ValueError: no loop holds :data:`PER_ITERATION` MUFU.EX2 (the probe or the compiler
            changed).
    """
    bodies = []
    for addr, instr in listing:
        m = _BRANCH.search(instr)
        if m and m.group(1) and int(m.group(1), 16) < addr:
            bodies.append([i for a, i in listing if int(m.group(1), 16) <= a <= addr])
    fits = [b for b in bodies if sum(opcode(i) == "MUFU.EX2" for i in b) == PER_ITERATION]
    if not fits:
        found = sorted(sum(opcode(i) == "MUFU.EX2" for i in b) for b in bodies)
        raise ValueError(f"no loop holds {PER_ITERATION} MUFU.EX2; the loops hold {found}")
    return min(fits, key=len)


def per_exponential(body: list[str]) -> dict:
    """Instructions per exponential of a loop body of :data:`PER_ITERATION` exponentials:
    ``{"total": float, "opcodes": {mnemonic: float}}`` (loop counter and branch included)."""
    counts = Counter(opcode(i) for i in body)
    return {"total": len(body) / PER_ITERATION,
            "opcodes": {k: v / PER_ITERATION for k, v in sorted(counts.items())}}


def tool_version(cmd: str) -> str:
    """The line of ``cmd --version`` that names the release (``Cuda compilation tools, release
    13.0, V13.0.88``), else its last line."""
    out = subprocess.run([cmd, "--version"], capture_output=True, text=True, check=True).stdout
    lines = out.strip().splitlines()
    return next((x for x in lines if "release" in x), lines[-1])


def disassembler() -> list[str]:
    """``cuobjdump -sass`` or, without it, ``nvdisasm`` (``CUOBJDUMP`` / ``NVDISASM`` name
    them explicitly). Raises FileNotFoundError when neither is found."""
    for env, name, args in (("CUOBJDUMP", "cuobjdump", ["-sass"]), ("NVDISASM", "nvdisasm", [])):
        path = os.environ.get(env)
        if path and not shutil.which(path):
            raise FileNotFoundError(f"{env}: expected the path of {name}, got {path!r} (no such "
                                    "executable)")
        path = path or shutil.which(name)
        if path:
            return [path, *args]
    raise FileNotFoundError("neither cuobjdump nor nvdisasm found (set CUOBJDUMP=PATH; pip "
                            "install nvidia-cuda-cuobjdump brings one)")


def sass_report(nvcc: str = "nvcc") -> dict:
    """Compile the probe with nvcc for sm_90 under each flag set, disassemble it and count.

    Returns ``{"nvcc", "disassembler", "probe", "probe_sha256", "flag_sets", "per_exponential":
    {flags: {form: per_exponential(...)}}, "listing": {flags: {form: [instructions of
    map_<form>]}}}``. Raises subprocess.CalledProcessError (nvcc failed), FileNotFoundError
    (no nvcc / disassembler), ValueError (see :func:`unrolled_loop`)."""
    probe = runtime.KERNELS_DIR / PROBE
    if not shutil.which(nvcc):
        raise FileNotFoundError(f"--nvcc: expected the CUDA compiler, got {nvcc!r} (not found; "
                                "give --nvcc PATH)")
    dis = disassembler()
    report = {"nvcc": tool_version(nvcc), "disassembler": f"{Path(dis[0]).name} {tool_version(dis[0])}",
              "probe": f"kernels/{PROBE}", "probe_sha256": hashlib.sha256(probe.read_bytes()).hexdigest(),
              "forms": FORM_CODE, "per_iteration": PER_ITERATION,
              "flag_sets": {k: [*NVCC_FLAGS, *v] for k, v in FLAG_SETS.items()},
              "per_exponential": {}, "listing": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for flags, extra in FLAG_SETS.items():
            cubin = Path(tmp) / f"{flags}.cubin"
            subprocess.run([nvcc, *NVCC_FLAGS, *extra, "-o", str(cubin), str(probe)], check=True)
            text = subprocess.run([*dis, str(cubin)], capture_output=True, text=True, check=True).stdout
            fns = parse_sass(text)
            report["per_exponential"][flags] = {f: per_exponential(unrolled_loop(fns[f"loop_{f}"]))
                                                for f in FORMS}
            report["listing"][flags] = {f: [i for _, i in fns[f"map_{f}"]] for f in ("copy", *FORMS)}
    return report


# ---- the GPU run -------------------------------------------------------------------------------
def _clock_khz(cupy) -> int | None:
    try:  # cudaDevAttrClockRate (13): the SM clock's rated maximum, kHz
        return int(cupy.cuda.runtime.deviceGetAttribute(13, 0))
    except Exception:  # the attribute left a toolkit: the report says None
        return None


def _sm_clock_mhz() -> int | None:
    """The SM clock now (nvidia-smi ``clocks.sm``, MHz), None where nvidia-smi cannot say."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        return int(out.split()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def _spin_up(cupy, launch, seconds: float) -> int:
    """Launch ``launch`` until ``seconds`` passed (the clocks rise under load); returns the
    launches made."""
    t0, count = time.time(), 0
    while time.time() - t0 < seconds:
        launch()
        cupy.cuda.Device().synchronize()
        count += 1
    return count


def _time_ms(cupy, launch, runs: int, warmup: int) -> list[float]:
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    for _ in range(warmup):
        launch()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(runs):
        start.record()
        launch()
        stop.record()
        stop.synchronize()
        times.append(float(cupy.cuda.get_elapsed_time(start, stop)))
    return times


def throughput(cupy, modules: dict, n: int, reps: int, runs: int, warmup: int, log,
               spin_up_s: float = 1.0) -> dict:
    """Median time and exponentials per second of ``loop_<form>`` for each flag set and form,
    after ``spin_up_s`` seconds of launches, then ``runs`` rounds over all kernels (interleaved,
    so that clock drift hits all alike). ``per_sm_per_clock`` divides by the SM count and the
    rated clock (``clock_khz_rated``); ``sm_clock_mhz_after`` is the clock nvidia-smi reported
    right after the rounds."""
    sms = int(cupy.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"])
    grid = sms * (2048 // BLOCK)
    rng = np.random.default_rng(1)
    x = cupy.asarray(rng.uniform(-8, 1, n).astype(np.float32))
    y = cupy.empty_like(x)
    consts = constants()

    def launcher(flags, form, r):
        fn = modules[flags].get_function(f"loop_{form}")
        k = consts[form]
        args = (x, y, np.int32(n), np.float32(k["a"]), np.float32(k["c"]), np.int32(r))
        return lambda: fn((grid,), (BLOCK,), args)

    keys = [(fl, fo) for fl in FLAG_SETS for fo in FORMS]
    spins = _spin_up(cupy, launcher("plain", "expf", reps), spin_up_s)
    times: dict = {k: [] for k in keys}
    for _ in range(runs):
        for key in keys:
            times[key] += _time_ms(cupy, launcher(*key, reps), 1, warmup)
    clock_after = _sm_clock_mhz()
    doubled = _time_ms(cupy, launcher("fast_math", "exp2f", 2 * reps), runs, warmup)
    clock = _clock_khz(cupy)
    out: dict = {}
    base = float(np.median(times[("fast_math", "exp2f")]))
    for (flags, form), t in times.items():
        med = float(np.median(t))
        rate = n * reps / (med * 1e-3)
        out.setdefault(flags, {})[form] = {
            "times_ms": t, "median_ms": med, "exponentials_per_s": rate,
            "per_sm_per_clock": rate / (sms * clock * 1e3) if clock else None,
            "time_vs_fa3_form": med / base}
        log(f"{flags:9s} {form:6s} median {med:8.3f} ms  {rate:.3e} exp/s  x{med / base:.2f}")
    double_med = float(np.median(doubled))
    return {"grid": grid, "block": BLOCK, "multiprocessors": sms, "clock_khz_rated": clock,
            "sm_clock_mhz_after": clock_after, "spin_up_launches": spins, "results": out,
            "doubled_reps": {"times_ms": doubled, "median_ms": double_med,
                             "ratio_to_reps": double_med / base}}


def accuracy(cupy, modules: dict) -> dict:
    """``map_<form>`` on :func:`check_inputs` for each flag set and form: the largest relative
    error against float64 (over results >= 2^-126) and the count of results whose bits differ
    from :func:`emulated` (None where no model)."""
    xs = check_inputs()
    consts = constants()
    xd, yd = cupy.asarray(xs), cupy.empty(xs.size, np.float32)
    out: dict = {}
    for flags, mod in modules.items():
        for form in FORMS:
            k = consts[form]
            mod.get_function(f"map_{form}")(((xs.size + BLOCK - 1) // BLOCK,), (BLOCK,),
                                            (xd, yd, np.int32(xs.size), np.float32(k["a"]),
                                             np.float32(k["c"])))
            got = cupy.asnumpy(yd)
            scale = np.float64(consts["expf"]["a"])
            want = np.exp((xs.astype(np.float64) - ROW_MAX) * scale)
            live = want >= 2.0**-126
            model = emulated(form, flags, xs, k["a"], k["c"])
            entry = out.setdefault(flags, {})[form] = {
                "max_rel_error_vs_float64": float(np.max(np.abs(got[live] / want[live] - 1))),
                "emulator_mismatches": None if model is None else
                int(np.count_nonzero(got.view(np.uint32) != model.view(np.uint32)))}
            if model is not None and entry["emulator_mismatches"]:
                entry["mismatch_examples"] = _examples(xs, got, model)
    return {"inputs": int(xs.size), "results": out}


def _examples(xs: np.ndarray, got: np.ndarray, model: np.ndarray, count: int = 24) -> dict:
    """Where the device and :func:`emulated` differ: how many of those results the device
    flushed to zero, the range of the model's results there, and ``count`` examples spread
    over them (input, device and model bits as hex)."""
    bad = np.nonzero(got.view(np.uint32) != model.view(np.uint32))[0]
    pick = bad[np.linspace(0, bad.size - 1, min(count, bad.size)).astype(np.int64)]
    return {"device_zero": int(np.count_nonzero(got[bad] == 0)),
            "model_min": float(np.min(model[bad])), "model_max": float(np.max(model[bad])),
            "examples": [{"x": float(xs[i]), "device": f"{int(got.view(np.uint32)[i]):08x}",
                          "model": f"{int(model.view(np.uint32)[i]):08x}"} for i in pick]}


def nvrtc_ptx_ex2() -> dict:
    """The ``ex2`` instructions in the PTX NVRTC generates for the probe under each flag set
    (``-arch=compute_90a``, the module's other options): which PTX form (``ex2.approx.f32`` or
    ``.ftz``) each library call became."""
    from cupy_backends.cuda.libs import nvrtc  # noqa: PLC0415 - GPU path only

    src = runtime.kernel_source(PROBE)
    found = {}
    for flags, extra in FLAG_SETS.items():
        opts = [o.replace("sm_90a", "compute_90a") for o in NVRTC_FLAGS + extra]
        try:
            prog = nvrtc.createProgram(src, "exp2_throughput.cu", [], [])
            nvrtc.compileProgram(prog, opts)
            ptx = nvrtc.getPTX(prog)
        except Exception as exc:  # a diagnostic: the measurement stands without it
            found[flags] = f"unavailable: {type(exc).__name__}: {exc}"[:200]
            continue
        text = ptx.decode() if isinstance(ptx, bytes) else str(ptx)
        found[flags] = dict(Counter(m.group(0) for m in re.finditer(r"ex2\.approx[.\w]*", text)))
    return found


def nvcc_plain_check(cupy, nvcc: str = "nvcc") -> dict | str:
    """The plain (no fast math) probe compiled offline by nvcc (``-arch=sm_90a -cubin``) and
    loaded as a cubin: :func:`accuracy`'s emulator comparison of its one-element kernels, to set
    beside NVRTC's build of the same source. A string saying why where nvcc is missing."""
    if shutil.which(nvcc) is None:
        return f"unavailable: {nvcc} not on PATH"
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "probe.cubin")
        done = subprocess.run([nvcc, "-arch=sm_90a", "-cubin", "-o", cubin,
                               str(runtime.KERNELS_DIR / PROBE)], capture_output=True, text=True)
        if done.returncode:
            return f"unavailable: nvcc failed: {done.stderr[-200:]}"
        module = cupy.RawModule(path=cubin)
        return accuracy(cupy, {"plain": module})["results"]["plain"]


def main(argv=None) -> int:
    ap = out_parser("exp2_throughput", __doc__.splitlines()[0])
    ap.add_argument("--sass", action="store_true", help="only compile and count the SASS (no GPU)")
    ap.add_argument("--nvcc", default="nvcc", help="nvcc for --sass (default: nvcc on PATH)")
    ap.add_argument("--elements-log2", type=int, default=26, help="log2 of the element count")
    ap.add_argument("--reps", type=int, default=128, help="exponentials per element per launch")
    ap.add_argument("--runs", type=int, default=7, help="timed launches per kernel (median)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed launches before each timing")
    ap.add_argument("--spin-up-s", type=float, default=1.0,
                    help="seconds of untimed launches before the rounds (the clocks rise)")
    args = ap.parse_args(argv)
    if args.sass:
        try:
            report = sass_report(args.nvcc)
        except (OSError, subprocess.CalledProcessError, ValueError) as exc:  # no toolkit, nvcc failed
            print(f"error: measure exp2_throughput --sass: {exc}", file=sys.stderr)
            return EXIT_USAGE
        write_json_atomic(os.path.join(args.out, "exp2_sass.json"), report)
        for flags, forms in report["per_exponential"].items():
            for form, c in forms.items():
                print(f"{flags:9s} {form:6s} {c['total']:.3f} instructions per exponential: {c['opcodes']}")
        return 0
    if (not 10 <= args.elements_log2 <= 28 or args.reps < 1 or args.runs < 1 or args.warmup < 0
            or not 0 <= args.spin_up_s <= 60):
        ap.error(f"need 10 <= --elements-log2 <= 28, --reps >= 1, --runs >= 1, --warmup >= 0, "
                 f"0 <= --spin-up-s <= 60; got {args.elements_log2}, {args.reps}, {args.runs}, "
                 f"{args.warmup}, {args.spin_up_s}")
    from .common import GpuRun  # noqa: PLC0415

    cupy = runtime.require_gpu()
    run = GpuRun(cupy, None, time.time())
    modules = {k: runtime.load_module(PROBE, NVRTC_FLAGS + v) for k, v in FLAG_SETS.items()}
    info = runtime.device_info()
    run.log(f"device: {info['gpu']} driver {info['driver']} nvrtc {info['nvrtc']}")
    n = 1 << args.elements_log2
    report = {**info, **kernel_provenance(PROBE), "nvrtc_options": {k: list(NVRTC_FLAGS + v)
                                                                   for k, v in FLAG_SETS.items()},
              "forms": FORM_CODE, "constants": constants(), "elements": n, "reps": args.reps,
              "runs": args.runs, "warmup": args.warmup}
    report["throughput"] = throughput(cupy, modules, n, args.reps, args.runs, args.warmup, run.log,
                                      args.spin_up_s)
    report["accuracy"] = accuracy(cupy, modules)
    report["nvrtc_ptx_ex2"] = nvrtc_ptx_ex2()
    run.log(f"PTX ex2 forms: {report['nvrtc_ptx_ex2']}")
    report["nvcc_cubin_plain"] = nvcc_plain_check(cupy, args.nvcc)
    plain = report["nvcc_cubin_plain"]
    run.log("nvcc's plain build against the emulator: " + str(
        {k: v["emulator_mismatches"] for k, v in plain.items()} if isinstance(plain, dict) else plain))
    for flags, forms in report["accuracy"]["results"].items():
        for form, r in forms.items():
            if r.get("mismatch_examples"):
                ex = r["mismatch_examples"]
                run.log(f"{flags} {form}: {r['emulator_mismatches']} differ from the emulator, "
                        f"{ex['device_zero']} of them 0 on the device; model results there "
                        f"{ex['model_min']:.3g}..{ex['model_max']:.3g}; e.g. {ex['examples'][:3]}")
    report["elapsed_s"] = run.elapsed()
    write_json_atomic(os.path.join(args.out, "exp2_throughput.json"), report)
    run.log(f"wrote {os.path.join(args.out, 'exp2_throughput.json')}")
    return 0


if __name__ == "__main__":
    from .common import run_script

    raise SystemExit(run_script(main))
