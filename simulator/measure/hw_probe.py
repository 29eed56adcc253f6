"""Device probes for :mod:`simulator.hw`: fragment layouts, shfl.sync, row reductions.

Run on a machine with a CUDA GPU (sm_90)::

    python -m simulator measure hw_probe --out OUTDIR

(a) **Layouts** (``kernels/probes/layouts.cu``): for every wgmma m64nNk16 (bf16) and m64nNk32
    (e4m3) shape, N = 8..256 step 8, A and B from shared memory: D is made to encode its own
    row (first case) and column (second case) exactly, so the raw registers of every thread
    *are* the (row, col) map, measured without assuming any register layout. Both readings of
    the descriptor's byte offsets (leading = along K, or along M/N) are tried; the one that
    decodes to a bijection is the hardware's. A third case multiplies random small integers.
    wgmma with A in registers: B = identity in shared memory, so D returns the A matrix and the
    (thread, element) codes put into the A registers reveal the A layout. mma.sync m16n8k16
    (bf16) / m16n8k32 (e4m3): row/column codes, A codes with shifted identity B, and random
    cases, with operands placed by the emulator's A/B layouts (consistency of all three).
(b) **Shuffles** (``kernels/probes/shuffle.cu``): shfl.sync bfly / idx / up / down for many
    b (including out-of-range), c (widths, odd clamps, junk high bits) and membermasks (lanes
    outside the mask exit first); d and p of every lane.
(c) **Reductions** (same file): hopper/softmax.h's thread_reduce_ + Allreduce<4> on random
    m64n128k16 / m64n40k16 accumulator fragments (sum, max; zero_init true/false), built three
    ways: FA3's --use_fast_math; without it through CuPy (which appends -ftz=true to every NVRTC
    compile, cupy/cuda/compiler.py); and with -ftz=false through NVRTC directly.

Each section is compared with the emulator; prints match counts and writes ``hw_report.json``,
``hw_layouts.npz``, ``hw_shuffle.npz``, ``hw_reduce.npz`` to OUTDIR (atomically); commit them
under ``simulator/data/device/`` for CI (``tests/test_hw_*.py`` compare against them).

``--write-kernel`` regenerates the wgmma wrappers in ``kernels/probes/layouts.cu`` and exits.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time

import numpy as np

from ..errors import OneLineParser
from ..hw import (
    a_operand_layout,
    accumulator_layout,
    b_operand_layout,
    rowcol_view,
    thread_reduce,
)
from ..io import save_npz_atomic, write_json_atomic
from ..replay.hw import (
    REDUCE_BLOCKS,
    REDUCE_BUILDS,
    REDUCE_KEEP_BLOCKS,
    REDUCE_SEED,
    REDUCE_SHAPES,
    block_digests,
    emulate_reduce,
    emulate_shuffles,
    reduce_inputs,
    shuffle_cases,
    shuffle_input,
    source_lanes_all,
)

KERNEL_LAYOUTS = "probes/layouts.cu"
KERNEL_SHUFFLE = "probes/shuffle.cu"
WGMMA_N = tuple(range(8, 257, 8))
INSTRUCTION_K = {"bf16": 16, "e4m3": 32}  # element format -> K of its wgmma
RS_N = {"bf16": 16, "e4m3": 32}  # N of the A-in-registers probes (B = K x K identity)
RANDOM_KEEP_N = (8, 16, 64, 136, 256)  # shapes whose random case is recorded in full
DESCRIPTOR_VARIANTS = {  # physical image: K-adjacent core matrices 128 B apart, M/N-adjacent 256 B
    "leading=K": (128, 256),
    "leading=MN": (256, 128),
}
OPTIONS_FAST = ("-arch=sm_90a", "--use_fast_math", "-std=c++17")  # FlashAttention-3's flags
OPTIONS_NOFAST = ("-arch=sm_90a", "-std=c++17")  # CuPy's RawModule still appends -ftz=true
OPTIONS_NOFTZ = ("-arch=sm_90a", "-std=c++17", "-ftz=false")  # NVRTC called directly


# ---- kernel source generation -----------------------------------------------------------
def _reg_list(start: int, count: int) -> str:
    return "{" + ", ".join(f"%{start + i}" for i in range(count)) + "}"


def _out_list(nreg: int) -> str:
    items = [f'"=f"(d[{i}])' for i in range(nreg)]
    return ",\n        ".join(", ".join(items[i:i + 8]) for i in range(0, nreg, 8))


def _wgmma_asm(instr: str, operands: str, tail: str, pred_operand: int) -> str:
    return (f'"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{pred_operand}, 0;\\n'
            f'wgmma.fence.sync.aligned;\\n"\n'
            f'      "{instr} "\n      "{operands}, {tail};\\n"\n'
            f'      "wgmma.commit_group.sync.aligned;\\nwgmma.wait_group.sync.aligned 0;\\n}}\\n"')


def render_wgmma_wrappers() -> str:
    """C++ text of every wgmma_ss_* / wgmma_rs_* probe kernel (the generated section)."""
    out = []
    for fmt, k in INSTRUCTION_K.items():
        ab = f"{fmt}.{fmt}"
        ss_tail = "p, 1, 1, 0, 0" if fmt == "bf16" else "p, 1, 1"
        for n in WGMMA_N:
            r = n // 2
            instr = f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{ab}"
            asm = _wgmma_asm(instr, f"{_reg_list(0, r)}, %{r}, %{r + 1}", ss_tail, r + 2)
            out.append(
                f"extern \"C\" __global__ void __launch_bounds__(128) wgmma_ss_{fmt}_n{n}(\n"
                f"    const u32* a_img, const u32* b_img, u32 b_words, u32 lbo_a, u32 sbo_a,\n"
                f"    u32 lbo_b, u32 sbo_b, float* out) {{\n"
                f"  WGMMA_SS_PROLOGUE\n  float d[{r}];\n  asm volatile(\n      {asm}\n"
                f"      : {_out_list(r)}\n      : \"l\"(da), \"l\"(db), \"r\"(zero));\n"
                f"  write_out<{r}>(out, d);\n}}\n")
        n = RS_N[fmt]
        r = n // 2
        rs_tail = "p, 1, 1, 0" if fmt == "bf16" else "p, 1, 1"
        instr = f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{ab}"
        asm = _wgmma_asm(instr, f"{_reg_list(0, r)}, {_reg_list(r, 4)}, %{r + 4}", rs_tail, r + 5)
        out.append(
            f"extern \"C\" __global__ void __launch_bounds__(128) wgmma_rs_{fmt}_n{n}(\n"
            f"    const u32* a_regs, const u32* b_img, u32 b_words, u32 lbo_b, u32 sbo_b,\n"
            f"    float* out) {{\n"
            f"  WGMMA_RS_PROLOGUE\n  float d[{r}];\n  asm volatile(\n      {asm}\n"
            f"      : {_out_list(r)}\n"
            f"      : \"r\"(a0), \"r\"(a1), \"r\"(a2), \"r\"(a3), \"l\"(db), \"r\"(zero));\n"
            f"  write_out<{r}>(out, d);\n}}\n")
    return "\n".join(out)


def write_kernel(path=None) -> str:
    """Replace the generated section of kernels/probes/layouts.cu; return the path written."""
    from ..device.runtime import KERNELS_DIR

    path = path or os.path.join(KERNELS_DIR, KERNEL_LAYOUTS)
    text = open(path).read()
    head, rest = text.split("// BEGIN GENERATED\n", 1)
    _, tail = rest.split("// END GENERATED", 1)
    new = head + "// BEGIN GENERATED\n" + render_wgmma_wrappers() + "// END GENERATED" + tail
    if new != text:
        from ..io import write_bytes_atomic

        write_bytes_atomic(path, new.encode())
    return path


# ---- operand encodings ------------------------------------------------------------------
def element_bits(values: np.ndarray, fmt: str) -> np.ndarray:
    """float values (exactly representable) -> raw bits (uint16 bf16 / uint8 e4m3)."""
    import ml_dtypes

    dt = ml_dtypes.bfloat16 if fmt == "bf16" else ml_dtypes.float8_e4m3fn
    v = np.asarray(values, dtype=np.float32)
    conv = v.astype(dt)
    if not np.array_equal(conv.astype(np.float32), v):
        raise ValueError(f"value not exact in {fmt}")
    return np.ascontiguousarray(conv).view(np.uint16 if fmt == "bf16" else np.uint8)


def pack_registers(bits: np.ndarray) -> np.ndarray:
    """[..., elements] uint16/uint8 -> [..., registers] uint32, element 0 in the low bits."""
    per = 4 // bits.dtype.itemsize
    b = bits.astype(np.uint32).reshape(bits.shape[:-1] + (-1, per))
    shifts = (np.arange(per, dtype=np.uint32) * (32 // per)).astype(np.uint32)
    return np.bitwise_or.reduce(b << shifts, axis=-1).astype(np.uint32)


def smem_image(rows_by_k: np.ndarray, fmt: str) -> np.ndarray:
    """K-major no-swizzle image: [R, K] values -> uint32 words; core matrix (8 rows x 16 bytes)
    (rb, kb) at byte rb*256 + kb*128, row r of it at +16 r."""
    by = np.ascontiguousarray(element_bits(rows_by_k, fmt)).view(np.uint8)
    by = by.reshape(rows_by_k.shape[0], 32)
    rb = by.shape[0] // 8
    img = by.reshape(rb, 8, 2, 16).transpose(0, 2, 1, 3).reshape(-1)
    return img.view(np.uint32)


def _wgmma_cases(n: int, k: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """A [3, 64, K] and B [3, K, N]: row code, column code, random integers."""
    i = np.arange(64)
    j = np.arange(n)
    a = np.zeros((3, 64, k), np.float32)
    b = np.zeros((3, k, n), np.float32)
    if k == 16:  # bf16: integers up to 256 are exact
        a[0, :, 0], b[0, 0, :] = i, 1
        a[1, :, 0], b[1, 0, :] = 1, j
    else:  # e4m3: keep every factor exact (3 mantissa bits)
        a[0, :, 0], a[0, :, 1], b[0, 0, :], b[0, 1, :] = 8 * (i // 8), i % 8, 1, 1
        a[1, :, 0:3] = 1
        b[1, 0, :], b[1, 1, :], b[1, 2, :] = 64 * (j // 64), 8 * ((j // 8) % 8), j % 8
    a[2] = rng.integers(-3, 4, (64, k))
    b[2] = rng.integers(-3, 4, (k, n))
    return a, b


def _exact_int(d: np.ndarray, lo: int, hi: int) -> np.ndarray | None:
    ok = np.all(np.isfinite(d)) and np.all(d == np.round(d)) and d.min() >= lo and d.max() <= hi
    return d.astype(np.int64) if ok else None


def _is_bijection(row, col, rows, cols) -> bool:
    if row is None or col is None:
        return False
    flat = row * cols + col
    return bool(np.all(np.bincount(flat.ravel(), minlength=rows * cols) == 1))


def _a_slot_mismatches(thread_m, elem_m, alay, rec: dict, prefix: str) -> int | None:
    """A-operand slots decoded from the device (thread and element of every matrix entry)
    against the emulator's layout ``alay``: the number of entries that differ, or None when the
    device's codes did not decode to integers. Records the decoded maps as
    ``<prefix>thread_of`` / ``<prefix>elem_of`` (uint8)."""
    if thread_m is None or elem_m is None:
        return None
    mismatches = int(np.sum((thread_m != alay.thread_of) | (elem_m != alay.reg_of)))
    rec[f"{prefix}thread_of"], rec[f"{prefix}elem_of"] = (thread_m.astype(np.uint8),
                                                          elem_m.astype(np.uint8))
    return mismatches


def _random_mismatches(d, a, b, dlay, rec: dict, prefix: str, keep=lambda x: x) -> int:
    """Outputs of random integer tiles (exact in float32) that differ from ``a @ b``: ``d``
    [tiles, threads, registers] the device's accumulators, ``a`` [tiles, M, K], ``b``
    [tiles, K, N]. Records ``<prefix>rand_a`` / ``rand_b`` (int8) and ``rand_d``, each through
    ``keep`` (the recorded shape)."""
    ref = np.einsum("cik,ckj->cij", a, b).astype(np.float32)
    mismatches = int(np.sum(dlay.to_matrix(d) != ref))
    rec[f"{prefix}rand_a"], rec[f"{prefix}rand_b"] = keep(a.astype(np.int8)), keep(b.astype(np.int8))
    rec[f"{prefix}rand_d"] = keep(d)
    return mismatches


# ---- (a) layouts ------------------------------------------------------------------------
def probe_layouts(mod, cupy, rng, progress) -> tuple[dict, dict]:
    report, rec = {"wgmma_ss": {}, "wgmma_rs": {}, "mma_sync": {}}, {}
    good_variant = {}
    for fmt, k in INSTRUCTION_K.items():
        for n in WGMMA_N:
            shape = f"m64n{n}k{k}"
            lay = accumulator_layout(shape)
            a, b = _wgmma_cases(n, k, rng)
            a_img = np.stack([smem_image(a[c], fmt) for c in range(3)])
            b_img = np.stack([smem_image(b[c].T, fmt) for c in range(3)])
            kern = mod.get_function(f"wgmma_ss_{fmt}_n{n}")
            entry = {"registers_per_thread": n // 2, "variants": {}}
            for vname, (lbo, sbo) in DESCRIPTOR_VARIANTS.items():
                out = cupy.zeros((3, 128, n // 2), dtype=cupy.float32)
                kern((3,), (128,), (cupy.asarray(a_img), cupy.asarray(b_img),
                                    np.uint32(b_img.shape[1]), np.uint32(lbo), np.uint32(sbo),
                                    np.uint32(lbo), np.uint32(sbo), out))
                d = out.get()
                row, col = _exact_int(d[0], 0, 63), _exact_int(d[1], 0, n - 1)
                bij = _is_bijection(row, col, 64, n)
                v = {"decodes_to_bijection": bij}
                if bij:
                    v["row_col_mismatches"] = int(np.sum((row != lay.row) | (col != lay.col)))
                    ref = (a[2] @ b[2]).astype(np.float32)
                    v["random_mismatches"] = int(np.sum(lay.to_matrix(d[2]) != ref))
                    v["slots"] = int(row.size)
                    rec[f"ss_{fmt}_n{n}_row"] = row.astype(np.uint8)
                    rec[f"ss_{fmt}_n{n}_col"] = col.astype(np.uint8)
                    if n in RANDOM_KEEP_N:
                        rec[f"ss_{fmt}_n{n}_rand_a"] = a[2].astype(np.int8)
                        rec[f"ss_{fmt}_n{n}_rand_b"] = b[2].astype(np.int8)
                        rec[f"ss_{fmt}_n{n}_rand_d"] = d[2]
                    good_variant[fmt] = vname
                entry["variants"][vname] = v
            report["wgmma_ss"][shape + f".{fmt}"] = entry
        progress(f"wgmma ss {fmt}: {len(WGMMA_N)} shapes; good descriptor: {good_variant.get(fmt)}")

        # wgmma with A in registers: B = identity, D returns A
        n = RS_N[fmt]
        lbo, sbo = DESCRIPTOR_VARIANTS[good_variant.get(fmt, "leading=K")]
        alay = a_operand_layout(f"m64n{n}k{k}")
        dlay = accumulator_layout(f"m64n{n}k{k}")
        t = np.broadcast_to(np.arange(128)[:, None], (128, alay.registers))
        e = np.broadcast_to(np.arange(alay.registers)[None, :], (128, alay.registers))
        codes = [t, e] if fmt == "bf16" else [t % 16, t // 16, e]
        rand_a = rng.integers(-3, 4, (64, k)).astype(np.float32)
        rand_b = rng.integers(-3, 4, (k, n)).astype(np.float32)
        elems = [c.astype(np.float32) for c in codes] + [alay.from_matrix(rand_a)]
        bmats = [np.eye(k, dtype=np.float32)] * len(codes) + [rand_b]
        a_regs = np.stack([pack_registers(element_bits(x, fmt)) for x in elems])
        b_img = np.stack([smem_image(bm.T, fmt) for bm in bmats])
        out = cupy.zeros((len(elems), 128, n // 2), dtype=cupy.float32)
        mod.get_function(f"wgmma_rs_{fmt}_n{n}")(
            (len(elems),), (128,), (cupy.asarray(a_regs), cupy.asarray(b_img),
                                    np.uint32(b_img.shape[1]), np.uint32(lbo), np.uint32(sbo), out))
        d = out.get()
        mats = [dlay.to_matrix(d[c]) for c in range(len(codes))]
        thread_m = _exact_int(mats[0] if fmt == "bf16" else mats[0] + 16 * mats[1], 0, 127)
        elem_m = _exact_int(mats[-1], 0, alay.registers - 1)
        slots = _a_slot_mismatches(thread_m, elem_m, alay, rec, f"rs_{fmt}_")
        rs = {"elements_per_thread": alay.registers, "decoded": slots is not None}
        if slots is not None:
            rs["slot_mismatches"] = slots
            rs["slots"] = int(thread_m.size)
        rs["random_mismatches"] = _random_mismatches(d[-1:], rand_a[None], rand_b[None], dlay, rec,
                                                     f"rs_{fmt}_", keep=lambda x: x[0])
        report["wgmma_rs"][f"m64n{n}k{k}.{fmt}"] = rs
        progress(f"wgmma rs {fmt}: {rs}")

        # mma.sync
        shape = f"m16n8k{k}"
        alay, blay, dlay = a_operand_layout(shape), b_operand_layout(shape), accumulator_layout(shape)
        i16, j8 = np.arange(16), np.arange(8)
        a_list, b_list = [], []
        row_a, row_b = np.zeros((16, k), np.float32), np.zeros((k, 8), np.float32)
        row_a[:, 0], row_b[0, :] = i16, 1
        col_a, col_b = np.zeros((16, k), np.float32), np.zeros((k, 8), np.float32)
        col_a[:, 0], col_b[0, :] = 1, j8
        a_list += [alay.from_matrix(row_a), alay.from_matrix(col_a)]
        b_list += [blay.from_matrix(row_b), blay.from_matrix(col_b)]
        lane = np.broadcast_to(np.arange(32)[:, None], (32, alay.registers))
        el = np.broadcast_to(np.arange(alay.registers)[None, :], (32, alay.registers))
        a_codes = [lane % 16, lane // 16, el]
        shifts = k // 8
        for h in range(shifts):  # B[k', j] = 1 where k' = j + 8 h: D[:, j] = A[:, j + 8 h]
            bm = np.zeros((k, 8), np.float32)
            bm[j8 + 8 * h, j8] = 1
            for code in a_codes:
                a_list.append(code.astype(np.float32))
                b_list.append(blay.from_matrix(bm))
        n_rand = 8
        ra = rng.integers(-3, 4, (n_rand, 16, k)).astype(np.float32)
        rb = rng.integers(-3, 4, (n_rand, k, 8)).astype(np.float32)
        a_list += list(alay.from_matrix(ra))
        b_list += list(blay.from_matrix(rb))
        a_regs = np.stack([pack_registers(element_bits(x, fmt)) for x in a_list])
        b_regs = np.stack([pack_registers(element_bits(x, fmt)) for x in b_list])
        out = cupy.zeros((len(a_list), 32, 4), dtype=cupy.float32)
        mod.get_function(f"mma_m16n8k{k}_{fmt}")((len(a_list),), (32,),
                                                 (cupy.asarray(a_regs), cupy.asarray(b_regs), out))
        d = out.get()
        row, col = _exact_int(d[0], 0, 15), _exact_int(d[1], 0, 7)
        ms = {"decodes_to_bijection": _is_bijection(row, col, 16, 8)}
        if ms["decodes_to_bijection"]:
            ms["row_col_mismatches"] = int(np.sum((row != dlay.row) | (col != dlay.col)))
            rec[f"mma_{fmt}_row"], rec[f"mma_{fmt}_col"] = row.astype(np.uint8), col.astype(np.uint8)
        amat = np.zeros((3, 16, k))
        for h in range(shifts):
            for ci in range(3):
                amat[ci, :, 8 * h:8 * h + 8] = dlay.to_matrix(d[2 + 3 * h + ci])
        thread_m = _exact_int(amat[0] + 16 * amat[1], 0, 31)
        elem_m = _exact_int(amat[2], 0, alay.registers - 1)
        ms["a_slot_mismatches"] = _a_slot_mismatches(thread_m, elem_m, alay, rec, f"mma_{fmt}_a_")
        ms["random_mismatches"] = _random_mismatches(d[-n_rand:], ra, rb, dlay, rec, f"mma_{fmt}_")
        ms["random_cases"] = n_rand
        report["mma_sync"][f"{shape}.{fmt}"] = ms
        progress(f"mma.sync {shape} {fmt}: {ms}")
    report["descriptor_variant"] = good_variant
    return report, rec


# ---- (b) shuffles -----------------------------------------------------------------------


def probe_shuffles(mod, cupy, rng, progress) -> tuple[dict, dict]:
    report, rec = {}, {}
    for mode in ("bfly", "idx", "up", "down"):
        b, c, m = shuffle_cases(mode, rng)
        rec.update({f"{mode}_b": b, f"{mode}_c": c, f"{mode}_mask": m})
        de, pe, defined = emulate_shuffles(mode, b, c, m)
        source = shuffle_input(len(c))[np.arange(len(c))[:, None],
                                       source_lanes_all(mode, b, c)]
        active = ((m[:, None].astype(np.int64) >> np.arange(32)) & 1).astype(bool)
        undefined = active & ~defined
        for variant in ("exited", "diverged"):
            suffix = "" if variant == "exited" else "_diverged"
            d_dev = cupy.zeros((len(c), 32), dtype=cupy.uint32)
            p_dev = cupy.zeros((len(c), 32), dtype=cupy.uint32)
            mod.get_function(f"shfl_probe_{mode}{suffix}")(
                (len(c),), (32,), (cupy.asarray(b), cupy.asarray(c), cupy.asarray(m), d_dev, p_dev))
            d, p = d_dev.get(), p_dev.get()
            key = f"{mode}{suffix}"
            report[key] = {
                "cases": len(c), "non_member_lanes": variant, "lanes_executing": int(active.sum()),
                "defined_lanes": int(defined.sum()),
                "value_mismatches": int(np.sum(defined & (d != de))),
                "pred_mismatches": int(np.sum(active & (p != pe.astype(np.uint32)))),
                "undefined_lanes": int(undefined.sum()),
                "undefined_lanes_zero": int(np.sum(undefined & (d == 0))),
                "undefined_lanes_equal_to_source_value": int(np.sum(undefined & (d == source))),
                "undefined_lanes_mismatching_emulator_zero_policy": int(np.sum(undefined & (d != de))),
            }
            rec.update({f"{key}_d": d, f"{key}_p": p.astype(np.uint8)})
            progress(f"shfl.sync.{key}: {report[key]}")
    return report, rec


# ---- (c) reductions ---------------------------------------------------------------------


def load_module_noftz(relpath: str, options=OPTIONS_NOFTZ):
    """Compile ``kernels/<relpath>`` with NVRTC directly (CuPy's RawModule would append
    -ftz=true) and load the cubin through ``cupy.RawModule(path=...)``."""
    import tempfile

    import cupy
    from cupy.cuda import nvrtc

    from ..device.runtime import kernel_source

    prog = nvrtc.createProgram(kernel_source(relpath), os.path.basename(relpath), [], [])
    try:
        try:
            nvrtc.compileProgram(prog, list(options))
        except Exception as exc:
            raise RuntimeError(f"NVRTC: {exc}\n{nvrtc.getProgramLog(prog)}") from exc
        cubin = nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)
    fd, path = tempfile.mkstemp(suffix=".cubin")
    with os.fdopen(fd, "wb") as fh:
        fh.write(cubin)
    return cupy.RawModule(path=path)


def probe_reduce(mods: dict, cupy, progress) -> tuple[dict, dict]:
    report, rec = {}, {}
    for sname, nreg in REDUCE_SHAPES.items():
        frag, init = reduce_inputs(nreg)
        rec[f"{sname}_input_sha256"] = np.frombuffer(
            hashlib.sha256(frag.tobytes() + init.tobytes()).digest(), np.uint8)
        df, di = cupy.asarray(frag.view(np.uint32)), cupy.asarray(init.view(np.uint32))
        for opts, mod in mods.items():
            for op in ("sum", "max"):
                for zi in (True, False):
                    name = f"reduce_{op}_{sname}_{'zi' if zi else 'acc'}"
                    ot = cupy.zeros((REDUCE_BLOCKS, 128, 2), dtype=cupy.uint32)
                    oq = cupy.zeros((REDUCE_BLOCKS, 128, 2), dtype=cupy.uint32)
                    mod.get_function(name)((REDUCE_BLOCKS,), (128,), (df, di, ot, oq))
                    dev_t, dev_q = ot.get(), oq.get()
                    key = f"{name}_{opts}"
                    entry = {}
                    for ftz in (True, False):
                        et, eq = emulate_reduce(op, zi, frag, init, ftz)
                        entry[f"emulator_ftz={ftz}"] = {
                            "thread_mismatches": int(np.sum(et.view(np.uint32) != dev_t)),
                            "quad_mismatches": int(np.sum(eq.view(np.uint32) != dev_q)),
                        }
                    if op == "sum":  # the same adds in another column order: order matters
                        view = rowcol_view(f"m64n{2 * nreg}k16")
                        rev = thread_reduce(view.apply(frag)[..., ::-1], init, op=op,
                                            zero_init=zi, ftz=REDUCE_BUILDS[opts])
                        entry["emulator_reversed_column_order_thread_mismatches"] = int(
                            np.sum(rev.view(np.uint32) != dev_t))
                    entry["values"] = int(dev_t.size)
                    report[key] = entry
                    rec[f"{key}_thread_digest"] = block_digests(dev_t)
                    rec[f"{key}_quad_digest"] = block_digests(dev_q)
                    rec[f"{key}_thread_head"] = dev_t[:REDUCE_KEEP_BLOCKS]
                    rec[f"{key}_quad_head"] = dev_q[:REDUCE_KEEP_BLOCKS]
                    progress(f"{key}: {entry}")
    return report, rec


# ---- driver -----------------------------------------------------------------------------
def _total(report: dict) -> int:
    bad = 0
    for sec in report["layouts"]["wgmma_ss"].values():
        good = [v for v in sec["variants"].values() if v["decodes_to_bijection"]]
        bad += 1 if len(good) != 1 else good[0]["row_col_mismatches"] + good[0]["random_mismatches"]
    for sec in report["layouts"]["wgmma_rs"].values():
        bad += (sec.get("slot_mismatches", 1) if sec["decoded"] else 1) + sec["random_mismatches"]
    for sec in report["layouts"]["mma_sync"].values():
        bad += (sec.get("row_col_mismatches", 1) + (sec["a_slot_mismatches"] or 0)
                + (1 if sec["a_slot_mismatches"] is None else 0) + sec["random_mismatches"])
    for sec in report["shuffle"].values():
        bad += sec["value_mismatches"] + sec["pred_mismatches"]
    for key, sec in report["reduce"].items():
        e = sec[f"emulator_ftz={REDUCE_BUILDS[key.rsplit('_', 1)[1]]}"]
        bad += e["thread_mismatches"] + e["quad_mismatches"]
    return bad


def main(argv=None) -> int:
    ap = OneLineParser(prog="python -m simulator measure hw_probe",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="folder for hw_report.json and the recorded .npz files")
    ap.add_argument("--write-kernel", action="store_true",
                    help="regenerate the wgmma wrappers in kernels/probes/layouts.cu and exit")
    args = ap.parse_args(argv)
    if args.write_kernel:
        print(write_kernel())
        return 0
    if not args.out:
        ap.error("--out is required")
    from ..device.runtime import device_info, load_module, require_gpu, source_sha256

    cupy = require_gpu()
    t0 = time.time()

    def progress(msg):
        print(f"[{time.time() - t0:6.1f} s] {msg}", flush=True)

    rng = np.random.default_rng(REDUCE_SEED)
    report = {"device": device_info(),
              "kernels": {k: {"path": f"kernels/{k}", "sha256": source_sha256(k)}
                          for k in (KERNEL_LAYOUTS, KERNEL_SHUFFLE)},
              "options": {"fast": list(OPTIONS_FAST), "nofast": list(OPTIONS_NOFAST),
                          "noftz": list(OPTIONS_NOFTZ)},
              "notes": {"nofast": "CuPy's RawModule appends -ftz=true to every NVRTC compile",
                        "noftz": "NVRTC called directly (cupy.cuda.nvrtc), cubin loaded by path"}}
    mod_l = load_module(KERNEL_LAYOUTS, OPTIONS_FAST)
    progress("compiled layouts.cu")
    mods = {"fast": load_module(KERNEL_SHUFFLE, OPTIONS_FAST),
            "nofast": load_module(KERNEL_SHUFFLE, OPTIONS_NOFAST)}
    try:
        mods["noftz"] = load_module_noftz(KERNEL_SHUFFLE)
    except Exception as exc:  # record and go on: the FA3 build is what matters
        report["noftz_build_error"] = f"{type(exc).__name__}: {exc}"
    progress(f"compiled shuffle.cu ({', '.join(mods)})")
    report["layouts"], rec_l = probe_layouts(mod_l, cupy, rng, progress)
    report["shuffle"], rec_s = probe_shuffles(mods["fast"], cupy, rng, progress)
    report["reduce"], rec_r = probe_reduce(mods, cupy, progress)
    report["total_mismatches"] = _total(report)
    report["seconds"] = round(time.time() - t0, 1)
    os.makedirs(args.out, exist_ok=True)
    write_json_atomic(os.path.join(args.out, "hw_report.json"), report)
    save_npz_atomic(os.path.join(args.out, "hw_layouts.npz"), **rec_l)
    save_npz_atomic(os.path.join(args.out, "hw_shuffle.npz"), **rec_s)
    save_npz_atomic(os.path.join(args.out, "hw_reduce.npz"), **rec_r)
    progress(f"total mismatches: {report['total_mismatches']}")
    return 0 if report["total_mismatches"] == 0 else 1


if __name__ == "__main__":
    from .common import run_script

    sys.exit(run_script(main))
