"""Write the teaching notebooks under notebooks/ from the cell sources in this file.

The notebooks are generated, not edited by hand, so that a review reads Python instead of JSON
and so that the committed .ipynb files carry no outputs (CI executes them; see
tests/test_notebooks.py and docs/notebooks.md).

    python scripts/make_notebooks.py            # (re)write every notebook
    python scripts/make_notebooks.py --check    # exit 1 if a committed notebook is out of date

Cell ids are derived from the notebook name and the cell position, so the output is
byte-for-byte reproducible.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
SEED = "the seed (`shared/seed/000_cee6ab8e43e321ff.txt`)"


def md(text: str) -> tuple[str, str]:
    return "md", textwrap.dedent(text).strip("\n")


def code(text: str) -> tuple[str, str]:
    return "code", textwrap.dedent(text).strip("\n")


# Shared first code cell: imports, a bit-view helper, the static/interactive switch.
SETUP = code(r'''
    %matplotlib inline
    import os
    import time

    import matplotlib.pyplot as plt
    import ml_dtypes
    import numpy as np

    from simulator import compare, flash, hw, mma
    from simulator import numerics as nm
    from simulator.numerics import mufu

    T0 = time.perf_counter()
    BF16, E4M3 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn
    # CI (tests/test_notebooks.py) sets this: no widgets, static figures only
    STATIC = bool(os.environ.get("SIMULATOR_NOTEBOOK_STATIC"))
    UINT = {4: np.uint32, 2: np.uint16, 1: np.uint8}


    def bits(x):
        """The bit patterns of a float array (float32 -> uint32, bf16/f16 -> uint16, fp8 -> uint8)."""
        a = np.asarray(x)
        return a.view(UINT[a.dtype.itemsize])


    def ulp_distance(a, b):
        """Signed distance in float32 ulps (count of representable values from b to a)."""
        def ordered(x):
            u = bits(np.asarray(x, dtype=np.float32)).astype(np.int64)
            return np.where(u >= 2**31, -(u - 2**31), u)
        return ordered(a) - ordered(b)
''')

FOOTER = code(r'''
    print(f"notebook ran in {time.perf_counter() - T0:.1f} s; every assertion above holds")
''')


# ----------------------------------------------------------------------------------------------
# 1. Three softmax strategies
# ----------------------------------------------------------------------------------------------
NB1 = [
    md(rf'''
    # 1. Three ways to compute softmax(QK^T)V: passes over memory, and the results side by side

    Following section 2 of {SEED}: the *safe* softmax reads the scores three times (max, sum,
    normalise), the *online* softmax (Milakov and Gimelshein, 2018) folds the max into the sum
    and needs two passes, and FlashAttention fuses the online softmax with the `P V` product so
    that K and V are read **once** (section 2.3, the recurrence of section 1).

    In attention the score matrix `S = Q K^T` is never stored (it is `seqlen_q x seqlen_k`), so
    every pass over the scores means loading K again from HBM. Below, each strategy runs on the
    same data through a small `HBM` object that counts every block it hands out. All three are
    written in plain NumPy float32 (the *algorithm*, not the hardware); at the end the emulated
    H200 kernel (`simulator.flash.forward`, which is strategy 3 on tensor cores and MUFU) joins
    them.
    '''),
    SETUP,
    md('''
    ## Data

    8 query rows, 512 keys in 8 blocks of 64, head dimension 64, in bf16 so that the emulated
    kernel sees exactly the same numbers. `flash.reference` is float64 attention on those values.
    '''),
    code(r'''
    rng = np.random.default_rng(2024)
    N_ROWS, N_KEYS, D, BLOCK = 8, 512, 64, 64
    N_BLOCKS = N_KEYS // BLOCK
    q = (1.5 * rng.standard_normal((1, N_ROWS, 1, D))).astype(np.float32).astype(BF16)
    k = (1.5 * rng.standard_normal((1, N_KEYS, 1, D))).astype(np.float32).astype(BF16)
    v = rng.standard_normal((1, N_KEYS, 1, D)).astype(np.float32).astype(BF16)
    scale = np.float32(1 / np.sqrt(D))
    Q, K, V = (x[0, :, 0].astype(np.float32) for x in (q, k, v))   # exact widening of bf16
    ref_out, ref_lse = flash.reference(q, k, v)
    ref_out, ref_lse = ref_out[0, :, 0], ref_lse[0, 0]
    print("scores: std", float(np.std(Q @ K.T * scale)), " reference LSE of row 0:", ref_lse[0])
    '''),
    code(r'''
    class HBM:
        """Hands out blocks of K and V and records every load (which pass, which block)."""

        def __init__(self, **arrays):
            self.arrays = arrays
            self.log = []          # (pass, name, block)
            self.current_pass = 0

        def load(self, name, j):
            self.log.append((self.current_pass, name, j))
            return self.arrays[name][j * BLOCK:(j + 1) * BLOCK]

        def loads(self, name):
            return sum(1 for _, n, _ in self.log if n == name)

        def passes(self, name):
            return len({p for p, n, _ in self.log if n == name and p})


    f32 = np.float32


    def safe_three_pass(hbm):
        """Section 2.1: max, then sum, then normalise and multiply by V; S recomputed each pass."""
        m = np.full(N_ROWS, -np.inf, f32)
        hbm.current_pass = 1
        for j in range(N_BLOCKS):
            s = (Q @ hbm.load("K", j).T) * scale
            m = np.maximum(m, s.max(axis=1))
        hbm.current_pass = 2
        l = np.zeros(N_ROWS, f32)
        for j in range(N_BLOCKS):
            s = (Q @ hbm.load("K", j).T) * scale
            l = l + np.exp(s - m[:, None]).sum(axis=1, dtype=f32)
        hbm.current_pass = 3
        o = np.zeros((N_ROWS, D), f32)
        for j in range(N_BLOCKS):
            s = (Q @ hbm.load("K", j).T) * scale
            o = o + (np.exp(s - m[:, None]) / l[:, None]) @ hbm.load("V", j)
        return o, m, l


    def online_two_pass(hbm):
        """Section 2.2: running max and rescaled running sum, then one pass for P V."""
        m = np.full(N_ROWS, -np.inf, f32)
        l = np.zeros(N_ROWS, f32)
        hbm.current_pass = 1
        for j in range(N_BLOCKS):
            s = (Q @ hbm.load("K", j).T) * scale
            m_new = np.maximum(m, s.max(axis=1))
            l = np.exp(m - m_new) * l + np.exp(s - m_new[:, None]).sum(axis=1, dtype=f32)
            m = m_new
        hbm.current_pass = 2
        o = np.zeros((N_ROWS, D), f32)
        for j in range(N_BLOCKS):
            s = (Q @ hbm.load("K", j).T) * scale
            o = o + (np.exp(s - m[:, None]) / l[:, None]) @ hbm.load("V", j)
        return o, m, l


    def fused_one_pass(hbm):
        """Section 2.3: the FlashAttention loop; O is rescaled, normalised once at the end."""
        m = np.full(N_ROWS, -np.inf, f32)
        l = np.zeros(N_ROWS, f32)
        o = np.zeros((N_ROWS, D), f32)
        hbm.current_pass = 1
        for j in range(N_BLOCKS):
            s = (Q @ hbm.load("K", j).T) * scale
            m_new = np.maximum(m, s.max(axis=1))
            corr = np.exp(m - m_new)
            p = np.exp(s - m_new[:, None])
            l = corr * l + p.sum(axis=1, dtype=f32)
            o = corr[:, None] * o + p @ hbm.load("V", j)
            m = m_new
        return o / l[:, None], m, l


    results, memories = {}, {}
    for name, fn in [("safe (3 passes)", safe_three_pass), ("online (2 passes)", online_two_pass),
                     ("fused (1 pass)", fused_one_pass)]:
        memories[name] = HBM(K=K, V=V)
        results[name] = fn(memories[name])
    for name, mem in memories.items():
        print(f"{name:18s}: K blocks loaded {mem.loads('K'):2d} (passes over K: {mem.passes('K')}), "
              f"V blocks loaded {mem.loads('V'):2d}")
    '''),
    md('''
    ## Passes over memory

    The claim of section 2.4, counted: K is read 3, 2 and 1 times, V once in every strategy.
    The picture shows the order of the loads (each dot is one block handed out by `HBM`).
    '''),
    code(r'''
    for (name, mem), k_passes in zip(memories.items(), (3, 2, 1)):
        assert mem.loads("K") == k_passes * N_BLOCKS and mem.passes("K") == k_passes, name
        assert mem.loads("V") == N_BLOCKS, name

    fig, axes = plt.subplots(1, 2, figsize=(12, 3.4), gridspec_kw={"width_ratios": [1, 2.2]})
    names = list(memories)
    axes[0].bar(np.arange(3) - 0.2, [memories[n].loads("K") for n in names], 0.4, label="K blocks")
    axes[0].bar(np.arange(3) + 0.2, [memories[n].loads("V") for n in names], 0.4, label="V blocks")
    axes[0].set_xticks(range(3), names, rotation=15)
    axes[0].set_ylabel("blocks loaded from HBM")
    axes[0].legend()
    for row, name in enumerate(names):
        for i, (p, what, j) in enumerate(memories[name].log):
            axes[1].scatter(i, row + (0.15 if what == "V" else -0.15), s=12,
                            color=f"C{p - 1}", marker="s" if what == "V" else "o")
    axes[1].set_yticks(range(3), names)
    axes[1].set_xlabel("load number (o = K block, square = V block; colour = pass 1/2/3)")
    axes[1].invert_yaxis()
    fig.tight_layout()
    '''),
    md('''
    ## The results side by side

    The three strategies compute the same mathematical function with different roundings.

    * The row **max is exact** (a maximum never rounds), so all three find the same bits.
    * The sum `l` is accumulated in different orders and, in the online forms, rescaled by
      `exp(m_old - m_new)`; its bits may differ, but each is within a few float32 roundings per
      term of the float64 value.
    * `O` agrees with the float64 reference to float32 accuracy in all three.

    The bounds asserted below are deliberately generous multiples of float32's unit roundoff
    `u = 2^-24` for 512 terms.
    '''),
    code(r'''
    u32 = 2.0**-24
    m_bits = [bits(m) for _, m, _ in results.values()]
    assert all(np.array_equal(m_bits[0], mb) for mb in m_bits[1:]), "max must agree bit for bit"

    l_ref = np.exp(ref_lse - results["safe (3 passes)"][1].astype(np.float64))   # sum at the same max
    for name, (o, m, l) in results.items():
        l_err = np.max(np.abs(l / l_ref - 1))
        o_err = np.max(np.abs(o - ref_out))
        lse = m.astype(np.float64) + np.log(l.astype(np.float64))
        print(f"{name:18s}: max rel. error of l {l_err:.2e}, max |O - O_ref| {o_err:.2e}, "
              f"max |LSE - LSE_ref| {np.max(np.abs(lse - ref_lse)):.2e}")
        assert l_err < 4 * N_KEYS * u32
        assert o_err < 4 * N_KEYS * u32 * np.abs(V).max()
        assert np.max(np.abs(lse - ref_lse)) < 1e-5

    differ = {n: int(np.count_nonzero(bits(o) != bits(results["safe (3 passes)"][0])))
              for n, (o, _, _) in results.items()}
    print("elements of O whose float32 bits differ from the safe strategy:", differ)
    '''),
    md('''
    ## The emulated H200 kernel is strategy 3

    `flash.forward` runs the fused loop as FlashAttention-3 does on the H200 (docs/forward.md):
    bf16 tensor-core GEMMs, `exp2` through FFMA + MUFU.EX2, `P` rounded to bf16 before `P V`,
    the output rounded to bf16. Its error is therefore bounded by the bf16 roundings of `P`
    and `O` (unit roundoff `2^-9`), not float32's: about 2^-8 of `max|V|` is the bound asserted.
    Its LSE stays at float32 accuracy because `l` and `m` are float32 throughout.
    '''),
    code(r'''
    emu = flash.forward(q, k, v, kblock_m=64, kblock_n=BLOCK)
    emu_out = emu.out[0, :, 0].astype(np.float32)
    emu_err = np.max(np.abs(emu_out - ref_out))
    emu_lse_err = np.max(np.abs(emu.lse[0, 0] - ref_lse))
    print(f"emulated H200: max |O - O_ref| = {emu_err:.2e}, max |LSE - LSE_ref| = {emu_lse_err:.2e}")
    assert emu_err < 2.0**-8 * np.abs(V).max()
    assert emu_lse_err < 1e-5
    fused_o = results["fused (1 pass)"][0]
    assert np.max(np.abs(emu_out - fused_o)) < 2.0**-8 * np.abs(V).max()

    fig, axes = plt.subplots(1, 2, figsize=(12, 3.6))
    dims = np.arange(16)
    axes[0].plot(dims, ref_out[0, :16], "k-", lw=3, alpha=0.3, label="float64 reference")
    for i, (name, (o, _, _)) in enumerate(results.items()):
        axes[0].plot(dims, o[0, :16], "o:x+"[i], ms=5, label=name, fillstyle="none")
    axes[0].plot(dims, emu_out[0, :16], "s", ms=7, fillstyle="none", label="emulated H200 (bf16)")
    axes[0].set_title("row 0 of O, first 16 dims")
    axes[0].legend(fontsize=7)
    errs = {**{n: np.abs(o - ref_out).ravel() for n, (o, _, _) in results.items()},
            "emulated H200 (bf16)": np.abs(emu_out - ref_out).ravel()}
    axes[1].boxplot([np.maximum(e, 1e-12) for e in errs.values()], whis=(0, 100))
    axes[1].set_xticks(range(1, 5), list(errs), rotation=12, fontsize=8)
    axes[1].set_yscale("log")
    axes[1].set_title("|O - O_ref| over all elements")
    fig.tight_layout()
    '''),
    FOOTER,
]


# ----------------------------------------------------------------------------------------------
# 2. Fragments and quads
# ----------------------------------------------------------------------------------------------
NB2 = [
    md(rf'''
    # 2. Fragments and quads: who owns what in m64nNk16, and how a row is reduced

    A `wgmma.m64nNk16` leaves its `64 x N` float32 result spread over the 128 threads of a
    warpgroup, `N/2` registers each (PTX ISA, "Register Fragments"; docs/hw.md). FlashAttention-3
    reduces rows of that fragment in two stages (section 4.2 of {SEED}):
    `thread_reduce_` folds each thread's own columns, then `quad_allreduce_` combines the four
    threads of a **quad** with two butterfly shuffles. This notebook draws both, and checks the
    pictures against the layout API.
    '''),
    SETUP,
    md('''
    ## The accumulator layout

    Thread `t` is warp `w = t // 32`, lane `t % 32`, quad `g = lane >> 2`, lane in quad
    `q = lane % 4`. Register `i` of thread `t` holds

    `row = 16 w + g + 8 ((i >> 1) & 1)`, `col = 8 (i >> 2) + 2 q + (i & 1)`.

    So a quad owns exactly two rows (`16w + g` and `16w + g + 8`), and each of its four lanes
    holds a pair of adjacent columns in every group of 8.
    '''),
    code(r'''
    N = 32
    layout = hw.accumulator_layout(f"m64n{N}k16")
    ti = hw.thread_index()
    t, i = np.meshgrid(np.arange(128), np.arange(layout.registers), indexing="ij")
    w, g, qq = ti.warp[:, None], ti.quad[:, None], ti.lane_in_quad[:, None]
    assert np.array_equal(layout.row, 16 * w + g + 8 * ((i >> 1) & 1))
    assert np.array_equal(layout.col, 8 * (i >> 2) + 2 * qq + (i & 1))

    # every matrix row is owned by the 4 threads of one quad, and no other thread
    owner_quad = ti.quad_in_warpgroup[layout.thread_of]                      # [64, N]
    assert np.all(owner_quad == owner_quad[:, :1])
    rows = np.arange(64)
    assert np.array_equal(owner_quad[:, 0], (rows // 16) * 8 + rows % 8)
    assert all(len(np.unique(layout.thread_of[r])) == 4 for r in rows)
    print(layout, "| registers per thread:", layout.registers)
    '''),
    md('''
    ## The picture

    Left: `Fragment.plot` of the whole tile coloured by quad (32 quads, one colour per quad).
    Right: a zoom on warp 0, rows 0..15 and columns 0..15, drawn here from `layout.thread_of`
    and `layout.reg_of`; each cell says `thread/register`. The assert after the figure reads
    every label of the zoom back through `layout.locate` (thread, register -> row, col) and
    `Fragment.to_matrix`: the picture and the API say the same thing.
    '''),
    code(r'''
    frag_coords = hw.Fragment.from_matrix(
        (np.arange(64)[:, None] * 1000 + np.arange(N)[None, :]).astype(np.float32), layout)
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.5), gridspec_kw={"width_ratios": [1, 1.1]})
    frag_coords.plot(color_by="quad", annotate=False, ax=axes[0], cmap="tab20")
    zoom_t, zoom_r = layout.thread_of[:16, :16], layout.reg_of[:16, :16]
    qcol = ti.quad_in_warpgroup[zoom_t]
    axes[1].imshow(qcol % 20, cmap="tab20", vmin=0, vmax=19)
    for r, c in np.ndindex(16, 16):
        axes[1].text(c, r, f"t{zoom_t[r, c]}\nr{zoom_r[r, c]}", ha="center", va="center", fontsize=6)
    axes[1].set_title("warp 0, rows 0-15, cols 0-15: thread / register (colour = quad)")
    axes[1].set_xlabel("col")
    axes[1].set_ylabel("row")
    fig.tight_layout()

    r_back, c_back = layout.locate(zoom_t, zoom_r)
    assert np.array_equal(r_back, np.arange(16)[:, None] * np.ones(16, int))
    assert np.array_equal(c_back, np.ones(16, int)[:, None] * np.arange(16))
    assert np.array_equal(frag_coords.to_matrix()[:16, :16],
                          frag_coords.data[zoom_t, zoom_r])
    '''),
    md('''
    `dump_quad` prints the same thing as text. To keep it short, an `m64n8k16` tile (4
    registers per thread) holding `1000 * row + col` in every element, so each value reads as
    its own coordinates; the assert checks every register of all 128 threads the same way.
    '''),
    code(r'''
    small = hw.accumulator_layout("m64n8k16")
    coords = np.arange(64)[:, None] * 1000 + np.arange(8)[None, :]
    frag_small = hw.Fragment.from_matrix(coords.astype(np.float32), small)
    print(frag_small.dump_quad(0, warp=0))
    want = small.row.astype(np.int64) * 1000 + small.col.astype(np.int64)     # [128, 4]
    assert np.array_equal(frag_small.data, want.astype(np.float32))
    assert np.array_equal(frag_coords.data,
                          (layout.row.astype(np.int64) * 1000 + layout.col).astype(np.float32))
    '''),
    md('''
    ## The row/column view

    `convert_layout_acc_rowcol` (hopper/utils.h) gives each thread a `(nrow, ncol) = (2, N/4)`
    tensor; `softmax.h` loops over it. Entry `(mi, ni)` is register
    `(ni & 1) + 2 mi + 4 (ni >> 1)`: row `mi = 0` walks registers 0, 1, 4, 5, 8, 9, ...
    '''),
    code(r'''
    view = hw.rowcol_view(layout)
    print("reg[mi, ni] =\n", view.reg)
    mi, ni = np.meshgrid(np.arange(view.nrow), np.arange(view.ncol), indexing="ij")
    assert np.array_equal(view.reg, (ni & 1) + 2 * mi + 4 * (ni >> 1))
    assert np.array_equal(view.row[:, 0], 16 * ti.warp + ti.quad)
    assert np.array_equal(view.row[:, 1], 16 * ti.warp + ti.quad + 8)
    print("thread 5 sees rows", view.row[5], "and columns", view.col[5])
    '''),
    md('''
    ## thread_reduce, then the quad allreduce, step by step

    A score tile with random values. Stage 1 (`thread_reduce`, `op="sum"`): each thread adds its
    8 columns of a row left to right in `ni` order. Stage 2: `x = x + shfl_xor(x, 2)`, then
    `x = x + shfl_xor(x, 1)` (offsets 2 then 1, `Allreduce<4>` in hopper/utils.h). After the
    first shuffle, lanes 0 and 2 hold `p0 + p2`, lanes 1 and 3 hold `p1 + p3`; after the second,
    every lane holds `(p0 + p2) + (p1 + p3)` (float addition commutes, so all four lanes get the
    same bits, though it does not associate).
    '''),
    code(r'''
    rng = np.random.default_rng(7)
    S = (4 * rng.standard_normal((64, N))).astype(np.float32)
    frag = hw.Fragment.from_matrix(S, layout)
    rc = frag.rowcol()                                                   # [128, 2, N/4]
    partial = hw.thread_reduce(rc, op="sum")                             # stage 1: [128, 2]
    step1 = nm.fadd(partial, hw.shfl_xor(partial, 2), ftz=True)          # butterfly, offset 2
    step2 = nm.fadd(step1, hw.shfl_xor(step1, 1), ftz=True)              # butterfly, offset 1

    assert np.array_equal(bits(step2), bits(hw.quad_allreduce(partial, "sum")))
    assert np.array_equal(bits(step2), bits(hw.reduce_sum(frag)))
    quads = step2.reshape(32, 4, 2)
    assert np.all(bits(quads) == bits(quads[:, :1]))                     # one value per quad row

    # the same order written out by hand in float32, for every row
    for r in range(64):
        quad_threads = np.nonzero(view.row[:, 0] == r)[0]
        mrow = 0
        if quad_threads.size == 0:
            quad_threads, mrow = np.nonzero(view.row[:, 1] == r)[0], 1
        p = []
        for th in quad_threads:                                          # lanes q = 0..3
            acc = np.float32(S[r, view.col[th, 0]])
            for c in view.col[th, 1:]:
                acc = np.float32(acc + S[r, c])
            p.append(acc)
        by_hand = np.float32(np.float32(p[0] + p[2]) + np.float32(p[1] + p[3]))
        assert bits(step2[quad_threads[0], mrow]) == bits(by_hand), r

    # max is order-independent: it must equal NumPy's row max exactly
    mx = hw.reduce_max(frag)
    assert np.array_equal(bits(mx), bits(S.max(axis=1)[view.row]))

    seq = np.array([np.float32(0)] * 64)
    for c in range(N):
        seq = (seq + S[:, c]).astype(np.float32)
    row_sum_emul = np.empty(64, np.float32)
    row_sum_emul[view.row] = step2
    n_diff = int(np.count_nonzero(bits(row_sum_emul) != bits(seq)))
    print(f"rows whose quad-order sum differs in bits from a left-to-right float32 sum: {n_diff} of 64")
    '''),
    md('''
    The picture: quad 0, row 0 (`mi = 0`). Each box is one lane's register; arrows show which
    lane's value each lane receives in each butterfly step.
    '''),
    code(r'''
    def draw_quad_steps(stages, titles, mrow=0, quad=0):
        fig, axes = plt.subplots(1, len(stages), figsize=(4.2 * len(stages), 3.2))
        for s, (ax, x, title) in enumerate(zip(axes, stages, titles)):
            vals = x[4 * quad:4 * quad + 4, mrow]
            for lane in range(4):
                ax.add_patch(plt.Rectangle((0.1, 3 - lane - 0.35), 0.8, 0.7, fc=f"C{lane}", alpha=0.3))
                ax.text(0.5, 3 - lane, f"lane {lane}\n{vals[lane]:.6f}", ha="center", va="center",
                        fontsize=9)
            if s < len(stages) - 1:
                off = (2, 1)[s]
                for lane in range(4):
                    src = lane ^ off
                    ax.annotate("", xy=(1.05, 3 - lane), xytext=(1.05, 3 - src),
                                arrowprops=dict(arrowstyle="->", color=f"C{src}",
                                                connectionstyle="arc3,rad=-0.4"))
                ax.text(1.35, 1.5, f"shfl_xor\noffset {off}", ha="center", fontsize=9)
            ax.set_xlim(0, 1.6)
            ax.set_ylim(-0.6, 3.6)
            ax.axis("off")
            ax.set_title(title, fontsize=10)
        fig.tight_layout()
        return fig

    draw_quad_steps([partial, step1, step2],
                    ["after thread_reduce (own columns)", "after + shfl_xor(x, 2)",
                     "after + shfl_xor(x, 1): the row sum"]);
    '''),
    FOOTER,
]


# ----------------------------------------------------------------------------------------------
# 3. One K/V block, step by step
# ----------------------------------------------------------------------------------------------
NB3 = [
    md(rf'''
    # 3. One K/V block, step by step, then the whole loop

    Section 3 of {SEED} lists the four phases of the online softmax in the SM90 mainloop, and
    section 4 their code: `max_get_scale` (4.5), `online_softmax` (4.6, with
    `scale_apply_exp2`, 4.3), `rescale_o` (4.8) and, after the loop, `finalize` (4.7) with the
    LSE. Here the emulated kernel records a trace of one CTA; we replay the same steps by hand
    with the public API (`mma.gemm`, `flash.Softmax`, `flash.rescale_o`, `nm.convert`) and check
    that every traced register agrees bit for bit. Then we follow one quad through a block.
    '''),
    SETUP,
    code(r'''
    rng = np.random.default_rng(3)
    D, SK, BN = 64, 256, 64
    q = (1.5 * rng.standard_normal((1, 64, 1, D))).astype(np.float32).astype(BF16)
    k = (1.5 * rng.standard_normal((1, SK, 1, D))).astype(np.float32).astype(BF16)
    v = rng.standard_normal((1, SK, 1, D)).astype(np.float32).astype(BF16)
    res = flash.forward(q, k, v, kblock_m=64, kblock_n=BN, schedule="plain", trace=[(0, 0, 0)])
    events = res.trace.for_cta((0, 0, 0))
    for e in events[:6]:
        print(e)
    print("...", len(events), "events; K/V blocks visited in the order",
          list(dict.fromkeys(e.n_block for e in events if e.n_block is not None)))
    '''),
    md('''
    ## Replaying the trace with the public API

    Blocks are visited from the last to the first (FA3's order). For each block: `S = Q K^T` on
    tensor cores (the first k-step adds to `-0.0`, docs/forward.md step 1), the scores as the
    row/column view, `max_get_scale`, `online_softmax`, then (schedule `"plain"`) `rescale_o`
    and `O += P V` with `P` rounded to bf16. Finally `finalize` and one last `rescale_o`.
    '''),
    code(r'''
    Qm = q[0, :, 0]
    acc_s_layout = hw.accumulator_layout(f"m64n{BN}k16")
    acc_o_layout = hw.accumulator_layout(f"m64n{D}k16")
    view = hw.rowcol_view(acc_s_layout)
    consts = flash.host_constants(D, None, 0.0)
    scale_log2 = consts["scale_log2"]
    soft = flash.Softmax((), 2, scale_log2)       # one warpgroup, kNRows = 2
    O = np.zeros((64, D), np.float32)
    replay = []                                   # (step, n_block, name, array) in trace order


    def row_values(per_thread):                   # [128, 2] quad-uniform -> [64] per matrix row
        out = np.empty(64, np.float32)
        out[view.row] = per_thread
        return out


    for step, n in enumerate(range(SK // BN - 1, -1, -1)):
        Kn, Vn = k[0, n * BN:(n + 1) * BN, 0], v[0, n * BN:(n + 1) * BN, 0]
        S = mma.gemm(Qm, Kn.T.copy(), np.full((64, BN), -0.0, np.float32),
                     instruction=f"wgmma.m64n{BN}k16.f32.bf16.bf16")
        replay.append(("qk_gemm", n, "acc_s", acc_s_layout.from_matrix(S)))
        scores = hw.Fragment.from_matrix(S, acc_s_layout).rowcol()            # [128, 2, BN/4]
        sc = soft.max_get_scale(scores, is_first=step == 0, check_inf=True)
        replay += [("max_get_scale", n, "row_max", soft.row_max), ("max_get_scale", n, "row_sum",
                   soft.row_sum), ("max_get_scale", n, "scores_scale", sc)]
        p = soft.online_softmax(scores, is_first=step == 0, check_inf=True)
        P = hw.Fragment(view.unapply(p), acc_s_layout).to_matrix()
        replay += [("online_softmax", n, "acc_s", acc_s_layout.from_matrix(P)),
                   ("online_softmax", n, "row_sum", soft.row_sum)]
        O = flash.rescale_o(O, row_values(sc))
        replay.append(("rescale_o", n, "acc_o", acc_o_layout.from_matrix(O)))
        O = mma.gemm(nm.convert(P, "bf16"), Vn.copy(), O, instruction=f"wgmma.m64n{D}k16.f32.bf16.bf16")
        replay.append(("pv_gemm", n, "acc_o", acc_o_layout.from_matrix(O)))
    final_scale = soft.finalize()
    replay += [("finalize", None, "lse", soft.lse), ("finalize", None, "row_sum", soft.row_sum),
               ("finalize", None, "scores_scale", final_scale)]
    O = flash.rescale_o(O, row_values(final_scale))
    replay.append(("epilogue", None, "acc_o", acc_o_layout.from_matrix(O)))

    by_key = {(e.step, e.n_block): e for e in events}
    for step_name, n, name, arr in replay:
        traced = by_key[(step_name, n)].data[name][0]          # warpgroup 0
        assert np.array_equal(bits(traced), bits(arr)), (step_name, n, name)
    assert np.array_equal(bits(nm.convert(O, "bf16")), bits(res.out[0, :, 0]))
    assert np.array_equal(bits(row_values(soft.lse)), bits(res.lse[0, 0]))
    print(f"{len(replay)} traced arrays replayed: all agree bit for bit, and so do out and LSE")
    '''),
    md('''
    ## One quad through one block

    Quad 0 of warp 0 (threads 0..3) owns rows 0 (`mi = 0`) and 8 (`mi = 1`). The table shows its
    state after each step of the **second** block visited (`n = 2`), where the running max can
    grow and `scores_scale < 1` appears. What to look for:

    * after `max_get_scale`, `row_max` is the same in all four lanes (it was quad-allreduced);
    * after `online_softmax`, `row_sum` differs between the lanes: it is each thread's partial
      sum, rescaled by `scores_scale`; the quad reduction waits for `finalize` (section 4.6:
      `warp_reduce=false`);
    * after `finalize`, `row_sum` is again the same in all four lanes.
    '''),
    code(r'''
    def quad_state(event, quad=0):
        lines = [f"{event.step:15s} n_block={event.n_block}"]
        for name in ("row_max", "row_sum", "scores_scale", "lse"):
            if name in event.data:
                a = event.data[name][0, 4 * quad:4 * quad + 4]                 # [4 lanes, 2 rows]
                for mrow in range(2):
                    vals = "  ".join(f"{x:12.6g}" for x in a[:, mrow])
                    lines.append(f"   {name:12s} row {view.row[4 * quad, mrow]:2d}: {vals}")
        if "acc_s" in event.data:
            rcv = view.apply(event.data["acc_s"][0])[4 * quad:4 * quad + 4, 0, :4]
            lines.append("   acc_s row 0, first 4 columns of each lane: "
                         + " | ".join(" ".join(f"{x:.3g}" for x in lane) for lane in rcv))
        return "\n".join(lines)

    second = [e for e in events if e.n_block == 2 or e.step == "finalize"]
    for e in second:
        if e.step in ("max_get_scale", "online_softmax", "finalize", "qk_gemm"):
            print(quad_state(e))
    '''),
    code(r'''
    def quad_uniform(x):                       # [128, 2] -> are the 4 lanes of every quad equal?
        b = bits(x).reshape(32, 4, 2)
        return np.all(b == b[:, :1])

    seen_max = np.full(64, -np.inf, np.float32)
    for step, n in enumerate(range(SK // BN - 1, -1, -1)):
        mgs, osm = by_key[("max_get_scale", n)].data, by_key[("online_softmax", n)].data
        S = hw.Fragment(by_key[("qk_gemm", n)].data["acc_s"][0], acc_s_layout).to_matrix()
        seen_max = np.maximum(seen_max, S.max(axis=1))
        assert quad_uniform(mgs["row_max"][0])
        assert np.array_equal(bits(row_values(mgs["row_max"][0])), bits(seen_max))
        sc = mgs["scores_scale"][0]
        if step == 0:
            assert np.all(bits(sc) == bits(np.float32(1.0)))
        else:
            prev = by_key[("max_get_scale", n + 1)].data["row_max"][0]
            same = prev == mgs["row_max"][0]
            assert np.all(sc[same] == 1.0) and np.all(sc[~same] < 1.0)
            print(f"block {n}: the max grew in {np.count_nonzero(~same) // 4} of 64 rows")
        assert not quad_uniform(osm["row_sum"][0])          # partial sums until finalize
    fin = by_key[("finalize", None)].data
    assert quad_uniform(fin["row_sum"][0]) and quad_uniform(fin["lse"][0])
    '''),
    md('''
    ## The whole loop: running max, running sum, and the LSE

    Left: the running max of rows 0..7 after each block (it only grows). Middle: the quad total
    of the running sum, i.e. `sum exp2((s - m_current) * scale_log2)` so far; it jumps down when
    the max grows (the old sum is rescaled) and up as each block adds its terms. Right: the LSE
    of all 64 rows, emulator against the float64 reference (section 8: `LSE = m / sqrt(d) +
    ln l`).
    '''),
    code(r'''
    order = list(range(SK // BN - 1, -1, -1))
    maxes = np.array([row_values(by_key[("max_get_scale", n)].data["row_max"][0]) for n in order])
    sums = np.array([row_values(hw.quad_allreduce(by_key[("online_softmax", n)].data["row_sum"][0]))
                     for n in order])
    ref_out, ref_lse = flash.reference(q, k, v)
    lse_err = np.abs(res.lse[0, 0] - ref_lse[0, 0])
    print(f"max |LSE - LSE_ref| = {lse_err.max():.2e}; max |O - O_ref| = "
          f"{np.abs(res.out.astype(np.float64) - ref_out).max():.2e}")
    assert lse_err.max() < 1e-5
    assert np.abs(res.out.astype(np.float64) - ref_out).max() < 2.0**-8 * np.abs(v.astype(float)).max()

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.5))
    for r in range(8):
        axes[0].plot(range(len(order)), maxes[:, r], "o-", ms=3)
        axes[1].plot(range(len(order)), sums[:, r], "o-", ms=3)
    for ax, title in zip(axes[:2], ("row_max (rows 0-7)", "quad total of row_sum (rows 0-7)")):
        ax.set_xticks(range(len(order)), [f"n={n}" for n in order])
        ax.set_title(title)
    axes[2].plot(ref_lse[0, 0], res.lse[0, 0], ".")
    axes[2].set_xlabel("float64 reference LSE")
    axes[2].set_ylabel("emulated LSE")
    axes[2].set_title(f"LSE, max error {lse_err.max():.1e}")
    fig.tight_layout()
    '''),
    md('''
    ## Stepping through the trace

    With a live kernel and `ipywidgets` installed, the slider below walks every event of the
    trace. Without them (CI, a static render), the same drawing function shows a few steps.
    '''),
    code(r'''
    def draw_event(i, ax=None):
        e = events[i]
        ax = ax or plt.subplots(figsize=(6, 3.2))[1]
        if "acc_s" in e.data or "acc_o" in e.data:
            name = "acc_s" if "acc_s" in e.data else "acc_o"
            lay = acc_s_layout if name == "acc_s" else acc_o_layout
            mat = hw.Fragment(e.data[name][0], lay).to_matrix()
            im = ax.imshow(mat, aspect="auto", cmap="viridis")
            plt.colorbar(im, ax=ax)
            ax.set_ylabel("row")
        else:                                      # row state: row_max left, the rest right
            ax.plot(row_values(e.data["row_max"][0]), "k.", label="row_max")
            ax.set_ylabel("row_max")
            ax2 = ax.twinx()
            for j, name in enumerate(x for x in ("row_sum", "scores_scale", "lse") if x in e.data):
                vals = e.data[name][0]
                if name == "row_sum" and e.step != "finalize":
                    vals = hw.quad_allreduce(vals)     # show the quad total of the partial sums
                ax2.plot(row_values(vals), "x+1"[j], color=f"C{j}", label=name)
            ax.set_xlabel("row")
            ax2.legend(fontsize=7, loc="upper right")
        ax.set_title(f"event {i}: {e.step}, n_block={e.n_block}", fontsize=9)
        return ax

    try:
        import ipywidgets
    except ImportError:
        ipywidgets = None
    if ipywidgets is not None and not STATIC:
        ipywidgets.interact(lambda i: (draw_event(i), plt.show()),
                            i=ipywidgets.IntSlider(min=0, max=len(events) - 1, value=0))
    else:
        picks = [i for i, e in enumerate(events) if e.n_block == 2][:6]
        fig, axes = plt.subplots(2, 3, figsize=(15, 6))
        for i, ax in zip(picks, axes.ravel()):
            draw_event(i, ax)
        fig.tight_layout()
    '''),
    FOOTER,
]


# ----------------------------------------------------------------------------------------------
# 4. exp2 through FFMA and MUFU.EX2
# ----------------------------------------------------------------------------------------------
NB4 = [
    md(rf'''
    # 4. exp2 through FFMA and MUFU.EX2: the hardware's error, and what it does to P, O, LSE

    Section 5 of {SEED}: FlashAttention computes `exp(x - m)` as `exp2f(x * scale_log2 -
    max_scaled)`, which compiles to one **FFMA** (multiply-add, one rounding) and one
    **MUFU.EX2** (the special function unit's approximate `2^x`). docs/mufu.md describes the
    model measured on the H200 over all 2^32 inputs; `arch="ideal"` is the correctly rounded
    `2^x` with the same special cases. Here we measure the error in ulp, look at its structure,
    and follow it into `P`, `O` and the LSE.
    '''),
    SETUP,
    md('''
    ## MUFU.EX2 against the correctly rounded 2^x

    A dense sweep over the softmax range [-30, 8] plus random float32 in the same range.
    docs/mufu.md states the error is -2..+1 ulp, and -1..+1 for `x >= 0`.
    '''),
    code(r'''
    rng = np.random.default_rng(4)
    x = np.concatenate([np.linspace(-30, 8, 1 << 19, dtype=np.float32),
                        rng.uniform(-30, 8, 1 << 19).astype(np.float32)])
    hwv, ideal = mufu.ex2(x, arch="sm90"), mufu.ex2(x, arch="ideal")
    err = ulp_distance(hwv, ideal)
    neg, pos = err[x < 0], err[x >= 0]
    print("ulp error, x < 0:", {int(e): int(np.count_nonzero(neg == e)) for e in np.unique(neg)})
    print("ulp error, x >= 0:", {int(e): int(np.count_nonzero(pos == e)) for e in np.unique(pos)})
    print(f"fraction exactly rounded: {np.mean(err == 0):.3f}")
    assert err.min() >= -2 and err.max() <= 1
    assert pos.min() >= -1 and pos.max() <= 1

    fig, axes = plt.subplots(1, 2, figsize=(13, 3.4))
    sub = slice(None, 1 << 19, 64)
    axes[0].plot(x[sub], err[sub], ",", alpha=0.5)
    axes[0].set_xlabel("x")
    axes[0].set_ylabel("ulp error")
    axes[0].set_title("MUFU.EX2 - correctly rounded 2^x (every 64th point of the sweep)")
    vals, counts = np.unique(err, return_counts=True)
    axes[1].bar(vals, counts / counts.sum())
    axes[1].set_xlabel("ulp error")
    axes[1].set_title("distribution over all 2^20 inputs")
    fig.tight_layout()
    '''),
    md('''
    ### A structural fact: the unit reads |x| as fixed point with 23 fractional bits

    docs/mufu.md: the result depends only on the sign and `trunc(|x| * 2^23)`. For `|x|` in
    `[1/4, 1/2)` a float32 has 25 fractional bits, so the two lowest mantissa bits are ignored:
    clearing them never changes the result (an exact check on the bit patterns).
    '''),
    code(r'''
    xs = rng.uniform(0.25, 0.5, 1 << 16).astype(np.float32) * rng.choice([-1, 1], 1 << 16).astype(np.float32)
    cleared = (bits(xs) & np.uint32(0xFFFFFFFC)).view(np.float32)
    assert np.array_equal(bits(mufu.ex2(xs)), bits(mufu.ex2(cleared)))
    ideal_xs, ideal_cleared = mufu.ex2(xs, arch="ideal"), mufu.ex2(cleared, arch="ideal")
    changed_ideal = np.count_nonzero(bits(ideal_xs) != bits(ideal_cleared))
    print(f"the correctly rounded 2^x does see those bits: {changed_ideal} of {xs.size} results change")
    '''),
    md('''
    ## FFMA: one rounding for `x * scale_log2 - max_scaled`

    Section 5.1: writing the argument as `x * scale - max_scaled` lets the compiler emit one
    FFMA. Against `FMUL` then `FADD` (two roundings), the FFMA result is always within half an
    ulp of the exact value (computed in float64, where the product of two float32 is exact).
    The two-instruction form is much worse *in ulps of the argument* near the row max: there
    the argument is small, but `FMUL` has already rounded `x * scale` at the precision of a
    number near `max * scale`, and the subtraction cancels the leading bits and keeps that error
    (catastrophic cancellation). Those are the elements with `P` near 1, the ones that matter
    most.
    '''),
    code(r'''
    D = 128
    scale_log2 = flash.host_constants(D, None, 0.0)["scale_log2"]
    s = (rng.standard_normal(1 << 18) * 12).astype(np.float32)
    m = s.max()
    max_scaled = nm.fmul(m, scale_log2, ftz=True)
    arg_fma = nm.ffma(s, scale_log2, -max_scaled, ftz=True)
    arg_two = nm.fadd(nm.fmul(s, scale_log2, ftz=True), -max_scaled, ftz=True)
    exact = s.astype(np.float64) * np.float64(scale_log2) - np.float64(max_scaled)
    ulp_of = np.spacing(np.abs(arg_fma)).astype(np.float64)
    abs_fma, abs_two = np.abs(arg_fma - exact), np.abs(arg_two - exact)
    e_fma, e_two = abs_fma / ulp_of, abs_two / ulp_of
    print(f"the two forms differ in {np.mean(bits(arg_fma) != bits(arg_two)):.1%} of the arguments")
    print(f"FFMA     : max error {e_fma.max():.3f} ulp of the argument, max absolute {abs_fma.max():.2e}")
    print(f"FMUL+FADD: max error {e_two.max():.3g} ulp of the argument, max absolute {abs_two.max():.2e}")
    assert e_fma.max() <= 0.5 + 1e-6
    assert e_two.max() > 1 and abs_two.max() > abs_fma.max()
    '''),
    md('''
    ### What the argument's rounding costs in P

    An absolute error `e` in the argument is a relative error `e ln 2` in `2^arg`. Near the row
    max the argument is small and precise, but for a strongly negative argument (a small
    probability) its ulp is `2^-19` at `|arg| ~ 16`: the argument's rounding then dominates the
    MUFU's own 2 ulp. Both are measured below against `exp((s - m) / sqrt(d))` in float64.
    '''),
    code(r'''
    p_hw = mufu.ex2(arg_fma)
    p_true = np.exp2(s.astype(np.float64) * np.float64(scale_log2) - np.float64(max_scaled))
    rel_total = np.abs(p_hw / p_true - 1)
    rel_arg = np.abs(np.exp2(arg_fma.astype(np.float64) - exact) - 1)
    live = p_true > 2.0**-126
    fig, ax = plt.subplots(figsize=(9, 3.4))
    ax.semilogy(arg_fma[live][::8], rel_total[live][::8] + 1e-12, ",", label="P: total relative error")
    ax.semilogy(arg_fma[live][::8], rel_arg[live][::8] + 1e-12, ",", label="from the FFMA rounding alone")
    ax.axhline(2.0**-23, color="k", lw=0.8, ls="--", label="1 float32 ulp (relative)")
    ax.set_xlabel("argument of exp2")
    ax.legend(markerscale=20, fontsize=8)
    ax.set_title("relative error of P = ex2(ffma(s, scale_log2, -max_scaled))")
    bound = (0.5 * ulp_of * np.log(2) + 3 * 2.0**-23)[live]
    assert np.all(rel_total[live] <= bound * 1.001)
    '''),
    md('''
    ## Into P, O and the LSE: the same forward with `arch="sm90"` and `arch="ideal"`

    Both runs use identical GEMMs and float32 arithmetic; only the MUFU models differ (`ex2`,
    and `rcp`, `lg2` in `finalize`). `compare.diff` gives the bit differences in ulp.

    * `P` (the `online_softmax` output) differs exactly by the ex2 error: the argument is the
      same FFMA in both runs, so at most 2 ulp.
    * `O` is rounded to bf16 (8 significant bits): a 1-2 ulp float32 perturbation almost
      never crosses a bf16 rounding boundary.
    * The LSE is float32; it moves by at most a few ulp.
    '''),
    code(r'''
    q = (1.5 * rng.standard_normal((1, 128, 2, D))).astype(np.float32).astype(BF16)
    k = (1.5 * rng.standard_normal((1, 512, 2, D))).astype(np.float32).astype(BF16)
    v = rng.standard_normal((1, 512, 2, D)).astype(np.float32).astype(BF16)
    ctas = [(0, h, 0) for h in range(2)]
    run = {a: flash.forward(q, k, v, kblock_m=128, kblock_n=128, arch=a, trace=ctas)
           for a in ("sm90", "ideal")}

    def p_of(tr):
        return np.concatenate([e.data["acc_s"].ravel() for e in tr if e.step == "online_softmax"])

    d_p = compare.diff(p_of(run["sm90"].trace), p_of(run["ideal"].trace))
    d_o = compare.diff(run["sm90"].out, run["ideal"].out)
    d_l = compare.diff(run["sm90"].lse, run["ideal"].lse)
    for name, d in (("P (float32)", d_p), ("O (bf16)", d_o), ("LSE (float32)", d_l)):
        print(f"--- {name}\n{d}\n")
    assert d_p.max_ulp <= 2 and d_p.nan_mismatch == 0
    assert d_o.max_ulp <= 1
    assert d_l.max_ulp <= 4
    print(compare.first_divergence(run["sm90"].trace, run["ideal"].trace))
    '''),
    code(r'''
    ref_out, ref_lse = flash.reference(q, k, v)
    for a, r in run.items():
        print(f"{a:6s}: max |O - O_ref| {np.abs(r.out.astype(np.float64) - ref_out).max():.3e}, "
              f"max |LSE - LSE_ref| {np.abs(r.lse - ref_lse).max():.3e}")
    err_hw = np.abs(run["sm90"].lse - ref_lse)
    err_id = np.abs(run["ideal"].lse - ref_lse)
    assert err_hw.max() < 1e-5 and err_id.max() < 1e-5

    fig, axes = plt.subplots(1, 2, figsize=(12, 3.4))
    pd = ulp_distance(p_of(run["sm90"].trace), p_of(run["ideal"].trace))
    vals, counts = np.unique(pd, return_counts=True)
    axes[0].bar(vals, counts)
    axes[0].set_yscale("log")
    axes[0].set_title("P: sm90 - ideal, ulp (all traced elements)")
    ld = ulp_distance(run["sm90"].lse, run["ideal"].lse).ravel()
    vals, counts = np.unique(ld, return_counts=True)
    axes[1].bar(vals, counts)
    axes[1].set_title("LSE: sm90 - ideal, ulp")
    fig.tight_layout()
    '''),
    FOOTER,
]


# ----------------------------------------------------------------------------------------------
# 5. FP8
# ----------------------------------------------------------------------------------------------
NB5 = [
    md(rf'''
    # 5. FP8: Max_offset = 8, the E4M3 range, saturation, the sum correction, underflow

    Section 6 of {SEED}: with FP8 inputs, `P` is converted to E4M3 before the `P V` GEMM. A
    probability in `[0, 1]` would use only part of E4M3's range, so FA3 computes
    `P' = 2^((s - m) * scale + 8) = 256 P` (`Max_offset = 8`, folded into `max_scaled` with an
    FFMA, docs/forward.md step 5) and undoes the factor in `finalize`: the LSE's sum is
    multiplied by `2^-8` (section 6.3), and `O` is divided by the sum of `P'`, in which the 256
    cancels.
    '''),
    SETUP,
    md('''
    ## E4M3 in numbers

    `cvt.rn.satfinite.e4m3x2.f32` (docs/numerics.md): 4 exponent bits (bias 7), 3 mantissa bits,
    no infinities, largest finite value 448 (`0x7e`), NaN `0x7f`; subnormals down to
    `2^-9` (`0x01`). `.satfinite` clamps numbers and infinities to +-448.
    '''),
    code(r'''
    def e4m3_bits(values):
        return bits(nm.convert(np.asarray(values, dtype=np.float32), "e4m3"))

    facts = {1.0: 0x38, 256.0: 0x78, 448.0: 0x7E, 2.0**-6: 0x08, 2.0**-9: 0x01,
             2.0**-10: 0x00,                       # the tie between 0 and 2^-9 rounds to even: 0
             2.0**-10 * 1.0001: 0x01, 464.0: 0x7E, 1e6: 0x7E, np.inf: 0x7E, np.nan: 0x7F}
    got = e4m3_bits(list(facts))
    for (x, want), b in zip(facts.items(), got):
        print(f"{x!s:>22} -> 0x{int(b):02x}")
        assert b == want, x

    codes = np.arange(0x7F, dtype=np.uint8).view(E4M3)          # 0x00 .. 0x7e, all finite >= 0
    values = nm.to_float32(codes)
    n_unit, n_256 = int(np.count_nonzero(values <= 1)), int(np.count_nonzero(values <= 256))
    print(f"non-negative finite codes: {values.size}; of them <= 1: {n_unit}; <= 256: {n_256}")
    assert (n_unit, n_256) == (57, 121)
    '''),
    md('''
    ## The kernel's P' on real data

    An E4M3 forward with a trace. The histogram shows the values of `P'` (the `online_softmax`
    output, float32, before the conversion) on a log2 scale, and the same values divided by 256
    (what would be converted without the offset), against E4M3's zones: the offset moves the
    whole distribution 8 binades up, out of the flush-to-zero and subnormal zones, and still
    below 448.
    '''),
    code(r'''
    rng = np.random.default_rng(5)
    D = 64
    def mk(*shape, std=1.0):
        return (std * rng.standard_normal(shape)).astype(np.float32).astype(E4M3)

    q, k, v = mk(1, 64, 1, D, std=1.5), mk(1, 512, 1, D, std=1.5), mk(1, 512, 1, D)
    res = flash.forward(q, k, v, kblock_m=64, kblock_n=128, schedule="plain", trace=[(0, 0, 0)])
    ev = res.trace.for_cta((0, 0, 0))
    P = np.concatenate([e.data["acc_s"].ravel() for e in ev if e.step == "online_softmax"])
    print(f"P': {P.size} elements, max {P.max()!r}, min {P.min()!r}")
    assert P.max() <= 256 * (1 + 2.0**-16)            # 2^8 up to FFMA rounding: far below 448
    assert P.max() >= 256 * (1 - 2.0**-16)            # every row's max element gives ~2^8

    fig, ax = plt.subplots(figsize=(11, 3.6))
    edges = np.arange(-28, 10, 0.25)
    ax.hist(np.log2(P[P > 0]) - 8, bins=edges, histtype="step", lw=1.5, label="P (no offset)")
    ax.hist(np.log2(P[P > 0]), bins=edges, histtype="stepfilled", alpha=0.4, label="P' = 256 P")
    ax.axvspan(-28, -10, color="red", alpha=0.08, label="E4M3 rounds to 0 (< 2^-10)")
    ax.axvspan(-10, -6, color="orange", alpha=0.08, label="E4M3 subnormal (2^-9 .. 2^-6)")
    ax.axvline(np.log2(448), color="k", ls="--", lw=0.8, label="448: E4M3 max")
    ax.set_xlabel("log2 of the value converted to E4M3")
    ax.set_ylabel("elements")
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title("the same probabilities, converted without and with Max_offset = 8")
    fig.tight_layout()
    '''),
    md('''
    ### How much of the range, and what underflows

    The same probabilities, converted with and without the offset (`P = P' * 2^-8`, exact in
    float32): how many E4M3 codes are used, how many elements flush to 0 (E4M3 cannot hold
    anything below `2^-10`, the midpoint to `2^-9`), and how much probability mass those
    zeros carry. Without the offset every `P < 2^-10` vanishes; with it only `P < 2^-18`.
    '''),
    code(r'''
    P_plain = nm.fmul(P, np.float32(2.0**-8))
    c_off, c_plain = nm.convert(P, "e4m3"), nm.convert(P_plain, "e4m3")
    stats = {}
    for name, p, c, factor in (("Max_offset = 8", P, c_off, 256.0), ("no offset", P_plain, c_plain, 1.0)):
        z = nm.to_float32(c) == 0
        lost = p[z].astype(np.float64).sum() / p.astype(np.float64).sum()
        rel = np.abs(nm.to_float32(c).astype(np.float64) / np.maximum(p, 1e-30) - 1)[~z]
        stats[name] = (len(np.unique(bits(c))), np.mean(z), lost, np.median(rel))
        print(f"{name:15s}: codes used {stats[name][0]:3d}, flushed to 0: {stats[name][1]:.2%} "
              f"of elements carrying {lost:.2e} of the mass; median rel. rounding error {stats[name][3]:.3f}")
    assert stats["Max_offset = 8"][0] > stats["no offset"][0]
    assert stats["Max_offset = 8"][1] <= stats["no offset"][1]
    assert stats["Max_offset = 8"][2] <= stats["no offset"][2]
    assert np.all(nm.to_float32(nm.convert(np.float32([2.0**-10 * 0.999, 2.0**-10]), "e4m3")) == 0)
    '''),
    md('''
    ### Saturation

    With `Max_offset = 8`, `P'` tops out at 256 and never reaches 448: nothing saturates. Had
    the offset been 9, the row max would give `P' = 512`, which `.satfinite` clamps to 448: the
    largest probability of every row would be 12.5% too small.
    '''),
    code(r'''
    assert not np.any(bits(c_off) == 0x7E)
    print("512 -> 0x%02x = %g" % (e4m3_bits(512.0), nm.to_float32(nm.convert(np.float32(512), "e4m3"))))
    assert e4m3_bits(512.0) == 0x7E
    '''),
    md('''
    ## The sum correction in finalize

    `finalize` reduces `row_sum` (a sum of `P'`, so about 256 times too large) over the quad,
    takes `1 / sum` for `O` (where the 256 cancels), then multiplies the sum by `2^-8` before
    `LSE = row_max * (scale_log2 * ln 2) + ln(sum)` (docs/forward.md, "finalize"). Below the
    traced LSE is recomputed from the traced row state with the public numerics API, bit for
    bit, and compared with the LSE one would get without the correction: off by `8 ln 2`.
    Against float64 the FP8 LSE is less accurate than the bf16 one (notebook 3): the E4M3
    `wgmma` keeps only about 14 significant bits of `S` (docs/mma.md), and that error enters
    the LSE directly.
    '''),
    code(r'''
    fin = [e for e in ev if e.step == "finalize"][0].data
    row_sum, row_max, lse = fin["row_sum"][0], fin["row_max"][0], fin["lse"][0]
    LN2 = np.uint32(0x3F317218).view(np.float32)
    scale_log2 = flash.host_constants(D, None, 0.0)["scale_log2"]
    ln2_scale = nm.fmul(scale_log2, LN2, ftz=True)

    def lse_from(total):
        return nm.ffma(row_max, ln2_scale, nm.fmul(mufu.lg2(total), LN2, ftz=True), ftz=True)

    corrected = lse_from(nm.fmul(row_sum, np.float32(2.0**-8), ftz=True))
    uncorrected = lse_from(row_sum)
    assert np.array_equal(bits(corrected), bits(lse))
    shift = (uncorrected - corrected).astype(np.float64)
    print(f"uncorrected - corrected LSE: {shift.min():.6f} .. {shift.max():.6f}; "
          f"8 ln 2 = {8 * np.log(2):.6f}")
    assert np.all(np.abs(shift - 8 * np.log(2)) < 1e-4)

    ref_out, ref_lse = flash.reference(q, k, v)
    lse_err = np.abs(res.lse - ref_lse).max()
    out_err = np.abs(res.out.astype(np.float64) - ref_out).max()
    vmax = np.abs(v.astype(np.float64)).max()
    print(f"against float64: max |LSE - LSE_ref| = {lse_err:.2e}, max |O - O_ref| = {out_err:.2e} "
          f"(max |V| = {vmax})")
    assert lse_err < 3e-3
    assert out_err < 2.0**-4 * vmax     # P' keeps 3 mantissa bits: relative rounding <= 2^-4
    '''),
    FOOTER,
]


# ----------------------------------------------------------------------------------------------
# 6. Edge cases
# ----------------------------------------------------------------------------------------------
NB6 = [
    md(rf'''
    # 6. Edge cases: -inf rows and Check_inf, sum = 0 or NaN, huge logits, softcap

    Section 7 of {SEED} explains the guards in `softmax.h`: `Check_inf` replaces a `-inf` row
    max by 0 before it meets another `-inf` (section 7.1), `finalize` turns a sum of 0 or NaN
    into `inv_sum = 0` and `LSE = -inf` (7.2, 7.3). Each guard is shown below with and without
    it, first on `flash.Softmax` directly, then through the whole emulated forward. Then two
    cases that need no guard: huge logits, and softcapping.
    '''),
    SETUP,
    md('''
    ## A fully masked row: Check_inf

    Row 0 (quad 0, `mi = 0`) of a score tile is `-inf` everywhere. Without `Check_inf`,
    `max_scaled = -inf * scale_log2 = -inf`, and the FFMA computes `-inf * scale - (-inf)` =
    `-inf + inf` = NaN: the whole row of `P` is NaN (`0x7fffffff`). With it, `max_scaled = 0`
    and `P = ex2(-inf) = +0`.
    '''),
    code(r'''
    rng = np.random.default_rng(6)
    scale_log2 = flash.host_constants(64, None, 0.0)["scale_log2"]
    scores = (3 * rng.standard_normal((128, 2, 16))).astype(np.float32)
    scores[0:4, 0, :] = -np.inf                              # row 0 lives in threads 0..3, mi = 0
    out = {}
    for check in (True, False):
        sm = flash.Softmax((), 2, scale_log2)
        sm.max_get_scale(scores, is_first=True, check_inf=check)
        p = sm.online_softmax(scores, is_first=True, check_inf=check)
        inv = sm.finalize()
        out[check] = (p, sm, inv)
        print(f"check_inf={check!s:5}: P of row 0 = 0x{int(bits(p[0, 0, 0])):08x}, row_sum "
              f"{sm.row_sum[0, 0]}, inv_sum {inv[0, 0]}, LSE {sm.lse[0, 0]}")
    assert np.all(bits(out[True][0][0:4, 0]) == 0)                      # +0.0
    assert np.all(bits(out[False][0][0:4, 0]) == 0x7FFFFFFF)           # canonical NaN
    for check in (True, False):
        p, sm, inv = out[check]
        assert inv[0, 0] == 0 and np.isneginf(sm.lse[0, 0])   # finalize's guard catches both
        assert np.array_equal(bits(p[4:]), bits(out[True][0][4:]))      # other rows unaffected
    '''),
    md('''
    The NaN guard in `finalize` rescues the LSE, but not `O`: without `Check_inf` the NaN row
    of `P` has already gone through `O += P V`, and `NaN * inv_sum = NaN * 0` is still NaN.
    `Check_inf` is what keeps a masked row's output at 0.

    The same guard matters in `max_get_scale` of a later block (section 4.5): if a row has been
    masked in every block so far, `prev = cur = -inf`, and `prev - cur` is NaN unless `cur` is
    replaced by 0.
    '''),
    code(r'''
    for check in (True, False):
        sm = flash.Softmax((), 2, scale_log2)
        sm.max_get_scale(scores, is_first=True, check_inf=check)
        sm.online_softmax(scores, is_first=True, check_inf=check)
        sc = sm.max_get_scale(scores, is_first=False, check_inf=check)       # row 0 still all -inf
        print(f"check_inf={check!s:5}: second block scores_scale of row 0 = {sc[0, 0]}, "
              f"row_sum = {sm.row_sum[0, 0]}")
        if check:
            assert sc[0, 0] == 0 and sm.row_sum[0, 0] == 0
        else:
            assert np.isnan(sc[0, 0]) and np.isnan(sm.row_sum[0, 0])
    '''),
    md('''
    ## Through the forward: rows that see no key

    Causal attention with `seqlen_q = 96 > seqlen_k = 32` (bottom-right aligned, docs/forward.md):
    query row `i` may see key `j <= i - 64`, so rows 0..63 see nothing. With `kblock_m = 128`
    one CTA holds all 96 rows and visits the single K block, in which rows 0..63 are entirely
    `-inf` (the `Check_inf` path). A second batch has `seqlens_k = 0`: its CTA visits no block
    at all and writes `O = 0`, `LSE = -inf` directly. Both must give `O` = +0.0 exactly.
    '''),
    code(r'''
    q = rng.standard_normal((2, 96, 1, 64)).astype(np.float32).astype(BF16)
    k = rng.standard_normal((2, 32, 1, 64)).astype(np.float32).astype(BF16)
    v = rng.standard_normal((2, 32, 1, 64)).astype(np.float32).astype(BF16)
    kw = dict(causal=True, seqlens_k=np.array([32, 0]))
    res = flash.forward(q, k, v, kblock_m=128, kblock_n=64, trace=[(0, 0, 0)], **kw)
    ref_out, ref_lse = flash.reference(q, k, v, **kw)
    mask_event = [e for e in res.trace if e.step == "mask"][0]
    S = hw.Fragment(mask_event.data["acc_s"][0], "m64n64k16").to_matrix()   # warpgroup 0: rows 0..63
    assert np.all(np.isneginf(S))                                            # fully masked tile
    assert np.all(bits(res.out[0, :64]) == 0) and np.all(np.isneginf(res.lse[0, 0, :64]))
    assert np.all(bits(res.out[1]) == 0) and np.all(np.isneginf(res.lse[1]))
    seen = np.isfinite(ref_lse)
    assert np.array_equal(np.isfinite(res.lse), seen)
    print("rows with a key: max |LSE - LSE_ref| =", np.abs(res.lse[seen] - ref_lse[seen]).max())
    assert np.abs(res.lse[seen] - ref_lse[seen]).max() < 1e-5
    '''),
    md('''
    ## sum = NaN

    A NaN in one query row makes that row's scores NaN. `fmax` lets a number win over NaN
    (docs/numerics.md), but here every score of the row is NaN, so the max, `P` and the sum
    are NaN. `finalize` sets `inv_sum = 0` and `LSE = -inf`, yet `O` is NaN: as above, the
    NaN reached `O` through `P V` before the guard. (`flash.reference`, exact math, returns
    NaN for both `O` and the LSE of such a row; the emulator follows the kernel.)
    '''),
    code(r'''
    qn = q[:1].copy()
    qn[0, 70, 0, 5] = np.nan
    rn = flash.forward(qn, k[:1], v[:1], causal=True, kblock_m=128, kblock_n=64, trace=[(0, 0, 0)])
    fin = [e for e in rn.trace if e.step == "finalize"][0].data
    thread, mrow = 4 * 6, 0                           # row 70 = warpgroup 1, local row 6: quad 6, mi = 0
    print("row 70: row_sum", fin["row_sum"][1, thread, mrow], " inv_sum",
          fin["scores_scale"][1, thread, mrow], " LSE", rn.lse[0, 0, 70], " O[:3]", rn.out[0, 70, 0, :3])
    assert np.isnan(fin["row_sum"][1, thread, mrow]) and fin["scores_scale"][1, thread, mrow] == 0
    assert np.isneginf(rn.lse[0, 0, 70]) and np.all(np.isnan(rn.out[0, 70].astype(np.float32)))
    others = np.arange(96) != 70
    assert np.array_equal(bits(rn.out[0, others]), bits(res.out[0, others]))
    ref_o, ref_lse = flash.reference(qn, k[:1], v[:1], causal=True)
    assert np.isnan(ref_o[0, 70, 0, 0]) and np.isnan(ref_lse[0, 0, 70])
    '''),
    md('''
    ## Huge logits

    With `q` and `k` scaled by 40 the scores reach tens of thousands; `exp` of them overflows
    float32 at 88.7. The online softmax never exponentiates a score, only `score - max` (section
    7), so the kernel is as accurate as with small logits, relative to the LSE's size.

    One subtlety of the FFMA form (section 5): at the row's max element the exponent argument is
    `ffma(m, scale, -fmul(m, scale))`, the *rounding error* of `m * scale`, not 0. For large `m`
    that is up to half an ulp of `m * scale` (`2^-10` near 2^13), so `P` at the max is
    `2^error`, not exactly 1. It is a factor common to the whole row (every element is computed
    against the same `max_scaled`), so it cancels in `O = P V / sum`.
    '''),
    code(r'''
    qh = (40 * rng.standard_normal((1, 64, 1, 64))).astype(np.float32).astype(BF16)
    kh = (40 * rng.standard_normal((1, 128, 1, 64))).astype(np.float32).astype(BF16)
    vh = v[:1, :32].repeat(4, axis=1)
    rh = flash.forward(qh, kh, vh, kblock_m=64, kblock_n=128, trace=[(0, 0, 0)])
    oh, lh = flash.reference(qh, kh, vh)
    qk_event = [e for e in rh.trace if e.step == "qk_gemm"][0]
    S = hw.Fragment(qk_event.data["acc_s"][0], "m64n128k16").to_matrix()
    with np.errstate(over="ignore"):
        naive = np.exp(S * np.float32(0.125))
    print(f"|score| up to {np.abs(S).max():.0f}; float32 exp overflows for "
          f"{np.mean(np.isinf(naive)):.0%} of the scaled scores")
    lse_ulps = np.abs(rh.lse - lh) / np.spacing(np.abs(lh).astype(np.float32))
    print(f"LSE error: at most {lse_ulps.max():.2f} float32 ulp of the LSE; "
          f"max |O - O_ref| = {np.abs(rh.out.astype(np.float64) - oh).max():.2e}")
    assert np.all(np.isfinite(rh.lse)) and np.all(np.isfinite(rh.out.astype(np.float32)))
    assert lse_ulps.max() <= 4
    assert np.abs(rh.out.astype(np.float64) - oh).max() < 2.0**-8 * np.abs(vh.astype(np.float64)).max()

    osm = [e for e in rh.trace if e.step == "online_softmax"][0].data["acc_s"][0]
    P = hw.Fragment(osm, "m64n128k16").to_matrix()
    p_at_max = P[np.arange(64), S.argmax(axis=1)]
    m_scaled = nm.fmul(S.max(axis=1), flash.host_constants(64, None, 0.0)["scale_log2"], ftz=True)
    bound = 0.5 * np.spacing(np.abs(m_scaled)) * np.log(2) + 2.0**-22
    print("P at the row max - 1: from", (p_at_max - 1).min(), "to", (p_at_max - 1).max())
    assert np.all(np.abs(p_at_max.astype(np.float64) - 1) <= bound)
    assert np.any(p_at_max != 1)
    '''),
    md('''
    ## Softcap

    `softcap * tanh(s / softcap)` bounds every score to `(-softcap, softcap)`. FA3 folds the
    constants (docs/forward.md): `s' = tanh(s * (softmax_scale / softcap))` on MUFU.TANH, and the
    softmax then uses `scale_log2 = softcap * log2(e)`. So the traced scores after the softcap
    step lie in [-1, 1], and the huge logits above become harmless even before the max is
    subtracted.
    '''),
    code(r'''
    cap = 30.0
    rc = flash.forward(qh, kh, vh, kblock_m=64, kblock_n=128, softcap=cap, trace=[(0, 0, 0)])
    rc_ideal = flash.forward(qh, kh, vh, kblock_m=64, kblock_n=128, softcap=cap, arch="ideal")
    oc, lc = flash.reference(qh, kh, vh, softcap=cap)
    capped = [e for e in rc.trace if e.step == "softcap"][0].data["acc_s"][0]
    assert np.all(bits(np.abs(capped)) <= bits(np.float32(1.0)))
    print(f"after softcap: |s'| <= {np.abs(capped).max()}; max |LSE - LSE_ref| = "
          f"{np.abs(rc.lse - lc).max():.2e}, "
          f"max |O - O_ref| = {np.abs(rc.out.astype(np.float64) - oc).max():.2e}")
    assert np.abs(rc.lse - lc).max() < 1e-4
    assert np.abs(rc.out.astype(np.float64) - oc).max() < 2.0**-7 * np.abs(vh.astype(np.float64)).max()
    print("MUFU.TANH against a correctly rounded tanh, in the output:", compare.diff(rc.out, rc_ideal.out))

    # the softcap step on moderate raw scores, with the same constants as the kernel
    softcap_val = flash.host_constants(64, None, cap)["softcap_val"]
    s_raw = np.linspace(-1200, 1200, 4001, dtype=np.float32)          # raw q.k
    t_hw = mufu.tanh(nm.fmul(s_raw, softcap_val, ftz=True))
    t_id = mufu.tanh(nm.fmul(s_raw, softcap_val, ftz=True), arch="ideal")
    x_scaled = s_raw / np.sqrt(64)
    fig, axes = plt.subplots(1, 2, figsize=(13, 3.4))
    axes[0].plot(x_scaled, cap * t_hw, "-", label="softcap * tanh.approx(s * softcap_val)")
    axes[0].plot(x_scaled, x_scaled, ":", color="grey", label="uncapped s / sqrt(d)")
    axes[0].set_ylim(-2.5 * cap, 2.5 * cap)
    axes[0].axhline(cap, color="k", lw=0.5)
    axes[0].axhline(-cap, color="k", lw=0.5)
    axes[0].set_xlabel("s / sqrt(d)")
    axes[0].legend(fontsize=8)
    axes[0].set_title(f"softcap = {cap:g}")
    axes[1].plot(x_scaled, ulp_distance(t_hw, t_id), ".", ms=2)
    axes[1].set_xlabel("s / sqrt(d)")
    axes[1].set_ylabel("ulp")
    axes[1].set_title("MUFU.TANH - correctly rounded tanh (docs/mufu.md: up to ~134 ulp)")
    fig.tight_layout()
    assert np.all(np.abs(ulp_distance(t_hw, t_id)) <= 134)
    '''),
    FOOTER,
]


# ----------------------------------------------------------------------------------------------
# 7. Emulator against the device
# ----------------------------------------------------------------------------------------------
NB7 = [
    md(rf'''
    # 7. Emulator against the device: recorded H200 traces, and finding a first divergence

    The emulator claims to be the H200's forward **bit for bit**, not just close to it. The
    CUDA twin `simulator/kernels/fa3_forward.cu`, built with `-DFA_TRACE=1`, stores every thread's state
    after each step of the mainloop of section 3.2 of {SEED} (`qk_gemm`, `mask`,
    `max_get_scale`, `online_softmax`, `rescale_o`, `pv_gemm`, then `finalize` and the
    epilogue) for a few chosen CTAs; `simulator.device.forward_trace.decode` turns such a dump
    into a `simulator.trace.Trace` with exactly the emulator's events (docs/kernel.md, "Step
    traces"). `compare.first_divergence(a, b)` walks two traces in execution order and names the
    first step, CTA, warpgroup, thread and register where they part.

    This notebook

    1. loads the traces recorded on an H200 (and their provenance), replays the emulator on the
       same inputs and CTAs, and checks that every event and register agrees, and O and the LSE
       too;
    2. puts one CTA's steps side by side, device against emulator, for one quad;
    3. changes **one** emulator setting at a time (the correctly rounded MUFU of
       `arch="ideal"`, the FFMA of section 5.1 split into FMUL + FADD, the other schedule) and
       lets `first_divergence` find where the H200 and the altered emulator part, and why there;
    4. runs the kernel live when a GPU is present (CI has none: the recordings stand in).
    '''),
    SETUP,
    code(r'''
    import contextlib
    from pathlib import Path

    from simulator.device import forward as dev
    from simulator.device import forward_goldens as fg
    from simulator.device import forward_trace as ft
    from simulator.device import gpu_available, runtime
    from simulator.flash import softmax as emu_softmax

    DATA = Path(ft.__file__).resolve().parents[1] / "data" / "device"
    meta, recorded = ft.load_traces(DATA / ft.TRACES_FILE)
    prov = meta["provenance"]
    print(f"recorded on an {prov['gpu']} (compute capability {prov['compute_capability']}, "
          f"{prov['multiprocessors']} SMs), driver {prov['driver']}, CUDA runtime "
          f"{prov['cuda_runtime']}, NVRTC {prov['nvrtc']}, CuPy {prov['cupy']}, {prov['date_utc']}")
    print(f"kernel {prov['kernel']}, sha256 {prov['kernel_sha256']}")
    print(f"NVRTC options: {' '.join(prov['nvrtc_options'])}")
    # the recording belongs to the kernel source of this checkout, and was clean when recorded
    assert prov["kernel_sha256"] == runtime.source_sha256(dev.KERNEL)
    assert prov["gpu"].startswith("NVIDIA H") and meta["failures"] == 0
    assert [rec["index"] for rec, _ in recorded] == list(range(len(ft.CONFIGS)))

    print(f"\n{'configuration':33s} {'dtype':5s} {'schedule':16s} {'mask':6s} {'d':>3s} "
          f"{'M x N':>8s}  traced CTAs (b, h, m_block)      dump [T, slots, words]")
    for rec, raw in recorded:
        extra = (f" softcap {rec['softcap']:g}" if rec["softcap"] else "") + (
            " descales" if rec["descales"] else "")
        print(f"{rec['name']:33s} {rec['dtype']:5s} {rec['schedule']:16s} {rec['mask']:6s} "
              f"{rec['head_dim']:3d} {rec['kblock_m']:>3d} x {rec['kblock_n']:<3d}  "
              f"{str([tuple(c) for c in rec['trace']]):32s} {list(raw.shape)}{extra}")
    '''),
    md('''
    ## Replaying the emulator on the recorded CTAs

    The inputs are not stored: `ft.make_inputs(config)` regenerates them from the recorded seed
    (`simulator.flash.inputs.attention_inputs`, a frozen PCG64 recipe). For each configuration
    we decode the dump, run `flash.forward` with the same arguments and `trace=` the same CTAs,
    and require `first_divergence(...).found is False`: same events in the same order, same
    shapes, same bits in every register of every thread.

    The dumps hold registers, so O and the LSE of a traced CTA are read from its `epilogue`
    (`acc_o`, rounded to the output format as the epilogue's store does) and `finalize` (`lse`)
    events and diffed against the emulator's output tensors with `compare.diff`. (When the
    traces were recorded, the GPU also checked the whole O / LSE tensors of the trace build
    against the normal build and the emulator: the `emulator_same_output` and
    `trace_build_same_output` flags.) Batch 1 of `e4m3_none_overlap_descales` has no keys: its
    traced CTA records nothing on either side.
    '''),
    code(r'''
    OUT_FMT = {np.dtype(BF16): "bf16", np.dtype(np.float16): "f16"}


    def row_values(per_thread, view):
        """[..., 128, 2] quad-uniform row state -> [..., 64] per matrix row."""
        out = np.empty(per_thread.shape[:-2] + (64,), per_thread.dtype)
        out[..., view.row] = per_thread
        return out


    def cta_out_lse(trace, lcfg, cta):
        """Rows, O (output format) and LSE of one traced CTA, from its epilogue and finalize."""
        last = {e.step: e for e in trace.for_cta(cta) if e.n_block is None}
        lay_o = hw.accumulator_layout(f"m64n{lcfg.head_dim}k16")
        O = lay_o.to_matrix(last["epilogue"].data["acc_o"]).reshape(-1, lcfg.head_dim)
        L = row_values(last["finalize"].data["lse"], hw.rowcol_view(lay_o)).reshape(-1)
        rows = cta[2] * lcfg.kblock_m + np.arange(lcfg.kblock_m)
        keep = rows < lcfg.seqlen_q
        return rows[keep], nm.convert(O[keep], OUT_FMT[lcfg.out_dtype]), L[keep]


    runs = {}
    print(f"{'configuration':33s} events  registers compared  first_divergence   O of the traced "
          f"CTAs     LSE")
    for rec, raw in recorded:
        inputs = ft.make_inputs(rec)
        lcfg = ft.launch_config(rec, inputs)          # the validated configuration of the launch
        ctas = ft.trace_ctas([tuple(c) for c in rec["trace"]])
        device = ft.decode(raw, lcfg, ctas)
        emu = flash.forward(inputs["q"], inputs["k"], inputs["v"], **ft.call_kwargs(rec, inputs))
        div = compare.first_divergence(emu.trace, device)
        assert div.found is False, str(div)
        assert len(device) == len(emu.trace) == rec["events"] > 0
        n_values = sum(a.size for e in device for a in e.data.values())
        o_total = l_total = 0
        for cta in device.ctas():
            b, h, _ = cta
            rows, o_dev, l_dev = cta_out_lse(device, lcfg, cta)
            o_rep = compare.diff(o_dev, emu.out[b, rows, h])
            l_rep = compare.diff(l_dev, emu.lse[b, h, rows])
            assert o_rep.identical and l_rep.identical, (str(o_rep), str(l_rep))
            o_total, l_total = o_total + o_rep.total, l_total + l_rep.total
        assert rec["emulator_same_output"] and rec["trace_build_same_output"]
        runs[rec["name"]] = {"rec": rec, "inputs": inputs, "lcfg": lcfg, "device": device, "emu": emu}
        print(f"{rec['name']:33s} {len(device):6d} {n_values:19,d}  found={div.found!s:5s}  "
              f"identical ({o_total:,} values)  identical ({l_total})")
    print("\nas first_divergence puts it:", div)
    '''),
    md('''
    The traces are the strongest check but cover a few CTAs. The recorded **goldens**
    (`forward_goldens.npz`, same kernel source) hold the device's whole O and LSE tensors for 24
    larger configurations; one of them, diffed against a fresh emulator run:
    '''),
    code(r'''
    gmeta, goldens = fg.load_goldens(DATA / fg.GOLDENS_FILE)
    assert gmeta["provenance"]["kernel_sha256"] == prov["kernel_sha256"]
    grec, g_out, g_lse = next(r for r in goldens if r[0]["name"] == "bf16_d32_causal_overlap_m64_n80")
    ginputs = fg.make_inputs(grec)
    g_emu = flash.forward(ginputs["q"], ginputs["k"], ginputs["v"], **fg.call_kwargs(grec, ginputs))
    print(f"{grec['name']}: q {ginputs['q'].shape}, k {ginputs['k'].shape}")
    for name, d_arr, e_arr in (("O  ", g_out, g_emu.out), ("LSE", g_lse, g_emu.lse)):
        report = compare.diff(d_arr, e_arr)
        print(f"  {name} device vs emulator: {report}")
        assert report.identical
    '''),
    md('''
    ## One CTA side by side, one quad

    `bf16_causal_plain` traces CTA `(0, 1, 1)`: query rows 64..127 under a causal mask, so it
    visits K/V block 1 (the diagonal, partly masked) and then block 0. Quad 0 (threads 0..3 of
    warp 0) owns rows 64 and 72 of the sequence (accumulator rows `g = 0` and `g + 8`). Below,
    every event that carries row state, device value on the left and emulator on the right;
    `=` means the float32 bits agree (asserted). The section 4.5 / 4.6 facts show in both
    columns: `row_max` is the same in the four lanes (quad-allreduced), `scores_scale` is 1 in
    the first block, and `row_sum` stays a per-lane partial sum until `finalize` reduces it.
    Row 64 sees a single key in block 1 (key 64, a column of lane 0), so lanes 1-3 hold a
    partial sum of 0 there; in block 0 its max grows from -4.4 to 62.6 and `scores_scale`
    (already applied to `row_sum` by `max_get_scale`) is 2.3e-4.
    '''),
    code(r'''
    run = runs["bf16_causal_plain"]
    lcfg = run["lcfg"]
    dev_events, emu_events = run["device"].events, run["emu"].trace.events
    lay_s = hw.accumulator_layout(f"m64n{lcfg.kblock_n}k16")
    lay_o = hw.accumulator_layout(f"m64n{lcfg.head_dim}k16")
    view = hw.rowcol_view(lay_s)
    cta = dev_events[0].cta
    first_row = cta[2] * lcfg.kblock_m
    QUAD = 0
    print(f"CTA {cta}: {len(dev_events)} events: " + ", ".join(
        f"{e.step}" + ("" if e.n_block is None else f"({e.n_block})") for e in dev_events))
    checked = 0
    for i, (de, ee) in enumerate(zip(dev_events, emu_events)):
        names = [x for x in ("row_max", "row_sum", "scores_scale") if x in de.data]
        if not names:
            continue
        print(f"\nevent {i}: {de.step}, n_block {de.n_block}    (device = emulator)")
        print("  lane  row " + " ".join(f"{n:^29s}" for n in names))
        for t in range(4 * QUAD, 4 * QUAD + 4):
            for mi in range(2):
                cells = []
                for n in names:
                    d, e = de.data[n][0, t, mi], ee.data[n][0, t, mi]
                    same = bits(d) == bits(e)
                    assert same, (i, n, t, mi)
                    checked += 1
                    cells.append(f"{d:13.7g} {'=' if same else '!'} {e:<13.7g}")
                print(f"  {t:4d}  {first_row + view.row[t, mi]:3d} " + " ".join(cells))
    print(f"\n{checked} row-state values of quad {QUAD} shown, all identical in bits")
    '''),
    md('''
    And the fragments: `P` (`acc_s` after the first `online_softmax`, before the conversion to
    bf16) and the final `O` (`acc_o` in the epilogue) of warpgroup 0 as matrices, device,
    emulator, and their difference, which is zero everywhere.
    '''),
    code(r'''
    p_i = next(i for i, e in enumerate(dev_events) if e.step == "online_softmax")
    o_i = next(i for i, e in enumerate(dev_events) if e.step == "epilogue")
    fig, axes = plt.subplots(2, 3, figsize=(13, 5.5))
    for ax_row, (i, name, lay) in zip(axes, ((p_i, "acc_s", lay_s), (o_i, "acc_o", lay_o))):
        d = lay.to_matrix(dev_events[i].data[name][0])
        e = lay.to_matrix(emu_events[i].data[name][0])
        n_bad = int(np.count_nonzero(bits(d) != bits(e)))
        assert n_bad == 0
        what = f"{name} at event {i} ({dev_events[i].step})"
        for ax, m, title, cmap in ((ax_row[0], d, f"H200: {what}", "viridis"),
                                   (ax_row[1], e, f"emulator: {what}", "viridis"),
                                   (ax_row[2], d.astype(np.float64) - e,
                                    f"H200 - emulator ({n_bad} of {d.size} differ)", "coolwarm")):
            im = ax.imshow(m, aspect="auto", cmap=cmap, **({"vmin": -1, "vmax": 1}
                                                           if cmap == "coolwarm" else {}))
            ax.set_title(title, fontsize=9)
            ax.set_ylabel("row")
            plt.colorbar(im, ax=ax)
    fig.tight_layout()
    '''),
    md('''
    ## Changing one setting: where does the emulator part from the H200?

    Agreement is only convincing if a wrong model would **not** agree. We change one thing at a
    time and ask `first_divergence(altered_emulator, device)` for the first event, warpgroup,
    thread (warp, lane, quad) and register that differ (`a` is the altered emulator, `b` the
    H200, in hex and decimal). In `bf16_causal_plain` the events are, in order: `qk_gemm(1)`
    (0), `mask(1)` (1), `max_get_scale(1)` (2), `online_softmax(1)` (3), `rescale_o(1)` (4),
    `pv_gemm(1)` (5), then block 0, `finalize` and `epilogue`.

    ### (a) `arch="ideal"`: correctly rounded MUFU instead of the H200's approximations

    `ex2`, `rcp`, `lg2` and `tanh` become correctly rounded (notebook 4 measures the
    difference: -2..+1 ulp for `ex2`).
    '''),
    code(r'''
    def replay(name, **change):
        """The emulator on a recorded configuration, with some arguments changed."""
        r = runs[name]
        inp = r["inputs"]
        kw = {**ft.call_kwargs(r["rec"], inp), **change}
        return flash.forward(inp["q"], inp["k"], inp["v"], **kw)


    def profile(a, b):
        """Per event of two traces of the same structure: how many values differ."""
        return [sum(int(np.count_nonzero(bits(x.data[k]) != bits(y.data[k]))) for k in x.data)
                for x, y in zip(a, b)]


    device0 = run["device"]
    ideal = replay("bf16_causal_plain", arch="ideal")
    div_a = compare.first_divergence(ideal.trace, device0)
    print(div_a)
    assert div_a.found and not div_a.note
    assert (div_a.event_index, div_a.step, div_a.array, div_a.n_block) == (3, "online_softmax", "acc_s", 1)
    assert [e.step for e in dev_events[:3]] == ["qk_gemm", "mask", "max_get_scale"]
    prof = profile(ideal.trace, device0)
    print("\nvalues that differ, per event:", ", ".join(
        e.step + ("" if e.n_block is None else f"({e.n_block})") + f" {c}"
        for e, c in zip(dev_events, prof)))
    assert prof[:3] == [0, 0, 0] and prof[3] > 0
    assert prof[4:6] == [0, 0]        # rescale_o(1) multiplies O = 0; P V sees P rounded to bf16
    '''),
    md('''
    **Why event 3 and not earlier.** Events 0-2 contain no MUFU instruction: `Q K^T` runs on the
    tensor cores, the mask is a select, and `max_get_scale` of the **first** block is a row max,
    two shuffles and `scores_scale = 1` (section 4.5: `Is_first` skips the `exp2f`). The first
    `MUFU.EX2` of the CTA is in `online_softmax` of the first block (`scale_apply_exp2`,
    section 4.3), so that is where P first differs, in roughly a third of its elements (by one
    float32 ulp), and `row_sum` with it. The next two events still agree: `rescale_o(1)`
    multiplies an O that is still zero, and `pv_gemm(1)` multiplies P **rounded to bf16**, where
    these one-ulp float32 differences vanish. From block 0 on, `scores_scale` (an `ex2`), `O`,
    `finalize` (`rcp`, `lg2`) and the epilogue all differ.

    With a softcap the first MUFU instruction comes earlier, `tanh.approx.f32` (MUFU.TANH) right
    after `qk_gemm`:
    '''),
    code(r'''
    div_cap = compare.first_divergence(replay("f16_local_plain_softcap", arch="ideal").trace,
                                       runs["f16_local_plain_softcap"]["device"])
    print(div_cap)
    assert (div_cap.event_index, div_cap.step, div_cap.array) == (1, "softcap", "acc_s")
    '''),
    md(rf'''
    ### (b) The exp2 argument without the FFMA: FMUL + FADD

    Section 5.1 of {SEED}: `exp2f(x * scale - max_scaled)` compiles to **one** FFMA (one
    rounding) and MUFU.EX2. Suppose the emulator computed the argument as FMUL then FADD (two
    roundings). We patch the `ffma` that `simulator.flash.softmax` uses, only for the score
    tensor of `scale_apply_exp2` (5-d: `[CTAs, warpgroups, 128, 2, N/4]`; the row-state FFMAs
    keep theirs), inside a context manager that puts the original back on exit, as
    tests/test_device_trace.py does with `monkeypatch`.
    '''),
    code(r'''
    @contextlib.contextmanager
    def exp2_argument_unfused():
        """Within the block, online_softmax computes s * scale_log2 - max_scaled as FMUL + FADD."""
        real_ffma = emu_softmax.ffma

        def unfused(a, b, c, ftz=True):
            if np.ndim(a) == 5:                      # the scores of scale_apply_exp2
                return nm.fadd(nm.fmul(a, b, ftz=ftz), c, ftz=ftz)
            return real_ffma(a, b, c, ftz=ftz)

        emu_softmax.ffma = unfused
        try:
            yield
        finally:
            emu_softmax.ffma = real_ffma


    real_ffma = emu_softmax.ffma
    with exp2_argument_unfused():
        split = replay("bf16_causal_plain")
    assert emu_softmax.ffma is real_ffma                   # the patch is undone
    div_b = compare.first_divergence(split.trace, device0)
    print(div_b)
    assert (div_b.event_index, div_b.step, div_b.array, div_b.n_block) == (3, "online_softmax", "acc_s", 1)
    # undone for real: the unpatched emulator agrees with the H200 again
    assert not compare.first_divergence(replay("bf16_causal_plain").trace, device0).found
    '''),
    md('''
    **Why there.** Events 0-2 never evaluate `s * scale - max_scaled` (the only FFMA that
    changed), so they cannot differ. In `online_softmax` the argument is `s * scale` minus a
    number of the same size, the row max times the scale: the subtraction cancels the leading
    bits and exposes the rounding error of the separate FMUL, which FFMA never makes. Rebuilding
    the reported element from the H200's own `mask` and `max_get_scale` registers shows the
    mechanism: the fused argument through `mufu.ex2` reproduces the H200's P everywhere, the
    split argument is off by ulps, and wherever that changes `ex2`'s result P differs (MUFU.EX2
    reads its input in fixed point, notebook 4, so not every changed argument changes P).
    '''),
    code(r'''
    wg, t, (reg,) = div_b.warpgroup, div_b.thread, div_b.position
    S = lay_s.to_matrix(dev_events[1].data["acc_s"][wg])               # H200 scores after the mask
    row_max = row_values(dev_events[2].data["row_max"][wg], view)       # H200 row max
    scale = lcfg.consts["scale_log2"]
    max_scaled = np.where(row_max == -np.inf, np.float32(0), nm.fmul(row_max, scale, ftz=True))
    arg_fused = nm.ffma(S, scale, -max_scaled[:, None], ftz=True)
    arg_split = nm.fadd(nm.fmul(S, scale, ftz=True), -max_scaled[:, None], ftz=True)
    p_fused, p_split = mufu.ex2(arg_fused), mufu.ex2(arg_split)
    P_dev = lay_s.to_matrix(dev_events[3].data["acc_s"][wg])
    assert np.array_equal(bits(p_fused), bits(P_dev))            # FFMA + MUFU.EX2 = the H200's P
    n_arg = int(np.count_nonzero(bits(arg_fused) != bits(arg_split)))
    n_p = int(np.count_nonzero(bits(p_fused) != bits(p_split)))
    assert n_p == div_b.differing

    r, c = (int(x) for x in lay_s.locate(t, reg))


    def hexval(x):
        return f"0x{int(bits(np.float32(x))):08x} ({float(x):.9g})"


    print(f"thread {t}, register {reg} holds P[row {r}, col {c}] of warpgroup {wg} "
          f"(sequence row {first_row + 64 * wg + r}, key {dev_events[3].n_block * lcfg.kblock_n + c})")
    print(f"  s = {float(S[r, c]):.9g},  scale_log2 = {float(scale):.9g},  max_scaled = "
          f"{float(max_scaled[r]):.9g}")
    exact = float(S[r, c]) * float(scale) - float(max_scaled[r])       # float64: exact enough
    print(f"  s * scale - max_scaled, exact  = {exact:.12g}")
    print(f"  FFMA (one rounding)            = {hexval(arg_fused[r, c])}")
    print(f"  FMUL + FADD (two roundings)    = {hexval(arg_split[r, c])}  "
          f"{int(ulp_distance(arg_split[r, c], arg_fused[r, c])):+d} ulp")
    print(f"  ex2 of the FFMA argument       = {hexval(p_fused[r, c])}   the H200's P: "
          f"{hexval(P_dev[r, c])}")
    print(f"  ex2 of the FMUL + FADD one     = {hexval(p_split[r, c])}   the altered emulator's")
    print(f"\nin this event: {n_arg} of {S.size} arguments differ, {n_p} values of P differ")
    assert bits(p_split[r, c]) != bits(P_dev[r, c])
    '''),
    md('''
    ### (c) The other schedule

    `schedule="intra_wg_overlap"` (FA3's default) delays each block's `P V` until after the next
    block's softmax. The arithmetic of the first block is the same, so events 0-3 agree in every
    bit; then the H200 (plain) records `rescale_o(1)` while the overlapped emulator records the
    next `qk_gemm(0)`: a **structural** divergence, reported as a note.
    '''),
    code(r'''
    div_c = compare.first_divergence(replay("bf16_causal_plain", schedule="intra_wg_overlap").trace,
                                     device0)
    print(div_c)
    assert div_c.found and div_c.note and div_c.event_index == 4
    '''),
    md('''
    ### The same three changes on every recorded configuration

    The rule behind the three answers: the first divergence is the first event that executes the
    changed operation. `ideal` parts at the first MUFU instruction (`softcap` when there is one,
    else the first `online_softmax`); the unfused argument at the first `online_softmax`; the
    other schedule right after the first block's `online_softmax` events (of all traced CTAs of
    the group: the emulator interleaves them step by step, as in `bf16_causal_overlap_2ctas`).
    '''),
    code(r'''
    OTHER = {"plain": "intra_wg_overlap", "intra_wg_overlap": "plain"}
    print(f"{'configuration':33s} {'ideal MUFU':22s} {'FMUL + FADD':22s} other schedule")
    for name, r in runs.items():
        events = r["device"].events
        first = {}
        for i, e in enumerate(events):
            first.setdefault(e.step, i)
        n_ctas = len(r["device"].ctas())
        after_first_softmax = [i for i, e in enumerate(events) if e.step == "online_softmax"][n_ctas - 1] + 1
        d_ideal = compare.first_divergence(replay(name, arch="ideal").trace, r["device"])
        with exp2_argument_unfused():
            d_split = compare.first_divergence(replay(name).trace, r["device"])
        d_sched = compare.first_divergence(
            replay(name, schedule=OTHER[r["rec"]["schedule"]]).trace, r["device"])
        assert d_ideal.event_index == first["softcap" if r["rec"]["softcap"] else "online_softmax"]
        assert d_split.event_index == first["online_softmax"] and d_split.array == "acc_s"
        assert d_sched.note and d_sched.event_index == after_first_softmax
        cols = [f"event {d.event_index} {d.step}" for d in (d_ideal, d_split)]
        print(f"{name:33s} {cols[0]:22s} {cols[1]:22s} event {d_sched.event_index} (structure)")
    assert emu_softmax.ffma is real_ffma
    '''),
    md('''
    ## A live run

    With a CUDA GPU and CuPy (`pip install -e '.[gpu]'`), the kernel runs here on a fresh case
    that was never recorded, with a trace of two CTAs, and is compared event by event and in O
    and LSE with the emulator. Without one (CI), the recorded H200 traces above are the
    evidence, and the cell says so.
    '''),
    code(r'''
    has_gpu, gpu_name = gpu_available()
    if has_gpu:
        from simulator.flash.inputs import attention_inputs

        live_in = attention_inputs(7, batch=1, seqlen_q=100, seqlen_k=130, heads=2, heads_kv=1,
                                   head_dim=64, dtype="bf16")
        live_kw = {"causal": True, "kblock_m": 64, "kblock_n": 64, "schedule": "intra_wg_overlap",
                   "trace": [(0, 1, 1), (0, 0, 0)]}
        live = dev.forward(live_in["q"], live_in["k"], live_in["v"], **live_kw)
        twin = flash.forward(live_in["q"], live_in["k"], live_in["v"], **live_kw)
        live_div = compare.first_divergence(twin.trace, live.trace)
        print(f"live run on {gpu_name}: {len(live.trace)} events; {live_div}")
        assert not live_div.found and len(live.trace) == len(twin.trace) > 0
        for name, d_arr, e_arr in (("O  ", live.out, twin.out), ("LSE", live.lse, twin.lse)):
            report = compare.diff(d_arr, e_arr)
            print(f"  {name} device vs emulator: {report}")
            assert report.identical
    else:
        print(f"no GPU present ({gpu_name.split(';')[0]}): the recorded H200 traces above were "
              f"used instead of a live run")
    '''),
    md('''
    ## Stepping through the trace

    With `ipywidgets` installed (and not under CI), a slider walks the events of
    `bf16_causal_plain`: left the H200's values (fragments as a matrix, row state per row),
    right where the emulator's bits differ, which is nowhere. Without it, a few steps are drawn
    statically.
    '''),
    code(r'''
    def draw_step(i, axes=None):
        de, ee = dev_events[i], emu_events[i]
        if axes is None:
            axes = plt.subplots(1, 2, figsize=(10, 3))[1]
        differ = {k: bits(de.data[k]) != bits(ee.data[k]) for k in de.data}
        frag = next((k for k in ("acc_s", "acc_o") if k in de.data), None)
        if frag:
            lay = lay_s if frag == "acc_s" else lay_o
            m = lay.to_matrix(de.data[frag][0])
            axes[0].imshow(np.where(np.isfinite(m), m, np.nan), aspect="auto", cmap="viridis")
            axes[0].set_ylabel("row")
            bad = lay.to_matrix(differ[frag][0])
            axes[1].set_ylabel("row")
        else:
            for j, k in enumerate(x for x in ("row_max", "row_sum", "scores_scale", "lse") if x in de.data):
                axes[0].plot(row_values(de.data[k][0], view), ".", ms=3, color=f"C{j}", label=k)
            axes[0].legend(fontsize=7)
            axes[0].set_xlabel("row")
            bad = np.concatenate([differ[k][0] for k in sorted(differ)], axis=-1)
            axes[1].set_ylabel("thread")
            axes[1].set_xlabel(", ".join(sorted(differ)) + " (2 rows each)", fontsize=8)
        n_bad = sum(int(np.count_nonzero(x)) for x in differ.values())
        axes[0].set_title(f"event {i}: {de.step}, n_block {de.n_block} (H200)", fontsize=9)
        axes[1].imshow(bad.astype(float), aspect="auto", cmap="Reds", vmin=0, vmax=1)
        axes[1].set_title(f"bits that differ from the emulator: {n_bad}", fontsize=9)
        return n_bad

    try:
        import ipywidgets
    except ImportError:
        ipywidgets = None
    if ipywidgets is not None and not STATIC:
        ipywidgets.interact(lambda i: (draw_step(i), plt.show()),
                            i=ipywidgets.IntSlider(min=0, max=len(dev_events) - 1, value=0))
    else:
        picks = [1, 2, p_i, o_i]
        fig, axes = plt.subplots(len(picks), 2, figsize=(11, 2.6 * len(picks)))
        assert sum(draw_step(i, ax_row) for i, ax_row in zip(picks, axes)) == 0
        fig.tight_layout()
    '''),
    FOOTER,
]

# ----------------------------------------------------------------------------------------------
# 8. Split-KV decode: the Split kernel and the combine, against the recorded library
# ----------------------------------------------------------------------------------------------
NB8 = [
    md(r'''
    # 8. A decode step with split-KV: what each split computes and how the combine merges them

    `flash_attn_with_kvcache` defaults to `num_splits=0`: FA3's host code picks a split count
    (`get_num_splits`, hopper/flash_api.cpp), and for a varlen launch (every call with
    `cache_seqlens`) its prepare kernel decides each batch's count
    (hopper/flash_prepare_scheduler.cu). The Split kernel then runs the forward once per split
    over that split's K/V blocks and writes each split's O (normalised by its own row sum, in
    float32) and LSE; the combine kernel merges them (hopper/flash_fwd_combine_kernel.h,
    docs/combine.md). This notebook takes one call the real library ran on the H200
    (`simulator/data/device/fa3_api_report.json`, call 40: 64 query tokens against a cache of
    1,285 keys, head dim 80, softcap 30), redoes each stage and checks the bits against the
    library's.
    '''),
    SETUP,
    code(r'''
    from simulator import fa3
    from simulator.device.numerics_evidence import digest
    from simulator.fa3 import combine as fa3_combine, scheduler
    from simulator.flash.dispatch import fa3_dispatch
    from simulator.replay import fa3_api, fa3_api_cases

    report, sample = fa3_api.load()
    INDEX = 40
    record = report["cases"][INDEX]
    name, args = fa3_api_cases.call_args(record["case"])
    q, k_cache, v_cache = args["q"], args["k_cache"], args["v_cache"]
    seqlen = int(args["cache_seqlens"][0])
    b, sq, h, d = q.shape
    print(name, "| q", q.shape, q.dtype, "| cache", k_cache.shape, "| cache_seqlens", seqlen,
          "| causal", args["causal"], "| num_splits", args["num_splits"])
    '''),
    md(r'''
    ## What FA3's host code decides

    The static count comes from the occupancy heuristic (`num_splits_heuristic`: split until
    the batch x heads x query tiles fill about 85% of the best wave efficiency on 132 SMs); the
    prepare kernel then caps each batch by its own K/V blocks over the blocks per SM of the
    whole launch.
    '''),
    code(r'''
    disp = fa3_dispatch("bf16", d, sq, causal=args["causal"], softcap=args["softcap"])
    static = fa3_combine.get_num_splits(b, h, 1, sq, k_cache.shape[1], d, d, "bf16",
                                        causal=args["causal"], softcap=args["softcap"], varlen=True)
    splits = scheduler.dynamic_num_splits([sq], [seqlen], kblock_m=disp.kblock_m,
                                          kblock_n=disp.kblock_n, heads=h, heads_kv=1,
                                          num_sms=132, num_splits_static=static, pack_gqa=True)
    n_max = -(-seqlen // disp.kblock_n)
    print(disp.describe())
    print(f"static num_splits {static}; this batch: {int(splits[0])} splits over {n_max} K/V blocks")
    for s in range(int(splits[0])):
        lo, hi = fa3_combine.n_block_range_for_split(0, n_max, s, int(splits[0]))
        last = min(hi * disp.kblock_n, seqlen) - 1
        print(f"  split {s}: blocks {lo}..{hi - 1} (keys {lo * disp.kblock_n}..{last})")
    assert int(splits[0]) > 1
    '''),
    md(r'''
    ## The Split kernel: one forward per split

    `simulator.flash.forward(..., num_splits=n)` is that launch: its output is every split's
    partial O (float32, each normalised by its own row sum) and LSE.
    '''),
    code(r'''
    keys, values = k_cache[:, :seqlen], v_cache[:, :seqlen]
    part = flash.forward(q, keys, values, causal=args["causal"], softcap=args["softcap"],
                         num_splits=int(splits[0]), max_seqlen_q=sq, max_seqlen_k=k_cache.shape[1])
    o_part, lse_part = part.out, part.lse            # [splits, 1, sq, h, d], [splits, 1, h, sq]
    print("partial O", o_part.shape, o_part.dtype, "| partial LSE", lse_part.shape)
    row = sq - 1
    print(f"LSE of the last query row per split: {np.round(lse_part[:, 0, 0, row], 4)}")
    '''),
    md(r'''
    ## The combine: LSE-weighted sum of the partial outputs

    Per row: `lse_max` over the splits, `scale_s = expf(lse_s - lse_max)` (an FMUL by log2(e)
    then MUFU.EX2), the sum over splits in the kernel's order (each thread's own splits, then a
    butterfly), `LSE = lg2(sum) * ln2 + lse_max` in one FFMA, and `O = sum_s (scale_s / sum) *
    O_s` by FFMAs in split order, rounded to bf16 at the end.
    '''),
    code(r'''
    out, lse = fa3_combine.combine(o_part, lse_part, BF16, head_dim_v=d)
    w = np.exp(lse_part[:, 0, 0, :] - lse[0, 0, :][None, :])      # float64 weights, for the picture
    assert np.allclose(w.sum(axis=0), 1, atol=1e-4)
    full = fa3.flash_attn_with_kvcache(**{**args, "k_cache": k_cache.copy(), "v_cache": v_cache.copy()})
    assert np.array_equal(bits(full[0]), bits(out)) and np.array_equal(bits(full[1]), bits(lse))
    lib_out, lib_lse = sample[f"c{INDEX}_out"], sample[f"c{INDEX}_lse"]
    n_out = int(np.count_nonzero(bits(out) != lib_out))
    n_lse = int(np.count_nonzero(bits(lse) != lib_lse))
    print(f"against the H200's library: O {n_out} of {out.size} values differ, LSE {n_lse} of {lse.size}")
    assert n_out == 0 and n_lse == 0
    unsplit = flash.forward(q, keys, values, causal=args["causal"], softcap=args["softcap"])
    n_diff = int(np.count_nonzero(bits(unsplit.out) != lib_out))
    print(f"the unsplit kernel differs from the library in {n_diff} O values: the split is part "
          "of what FA3 computes")
    assert n_diff > 0
    '''),
    code(r'''
    fig, axes = plt.subplots(1, 2, figsize=(11, 3))
    im = axes[0].imshow(w, aspect="auto", cmap="viridis")
    axes[0].set(title="combine weight of each split, per query row", xlabel="query row", ylabel="split")
    fig.colorbar(im, ax=axes[0])
    axes[1].plot(lse_part[:, 0, 0, :].T, lw=0.8)
    axes[1].plot(lse[0, 0, :], "k", lw=2, label="combined LSE")
    axes[1].set(title="LSE per split (colours) and combined (black)", xlabel="query row")
    axes[1].legend()
    fig.tight_layout()
    '''),
    md(r'''
    ## Live, where a GPU and the library are present

    With torch, an sm_90 GPU and `fa3-fwd` installed, the same call runs on the library.
    '''),
    code(r'''
    from simulator.device import fa3_library

    ok, why = fa3_library.available()
    if ok:
        got = fa3_library.call(name, {**args, "k_cache": k_cache.copy(), "v_cache": v_cache.copy()})
        assert np.array_equal(bits(got["out"]), bits(out))
        print("live: identical bits")
    else:
        print("live check skipped:", why)
    '''),
    FOOTER,
]


NOTEBOOKS = {
    "01_three_softmax_strategies": NB1,
    "02_fragments_and_quads": NB2,
    "03_one_block_step_by_step": NB3,
    "04_exp2_ffma_mufu": NB4,
    "05_fp8_max_offset": NB5,
    "06_edge_cases": NB6,
    "07_emulator_vs_device": NB7,
    "08_split_kv_decode": NB8,
}


def build(name: str, cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    """One clean notebook (no outputs, no execution counts, deterministic cell ids)."""
    nb = new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    for i, (kind, source) in enumerate(cells):
        cell = new_markdown_cell(source) if kind == "md" else new_code_cell(source)
        cell.id = f"{name[:2]}-{i:02d}"
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def render(name: str) -> str:
    return nbformat.writes(build(name, NOTEBOOKS[name])) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 if a notebook differs from its generated form")
    args = parser.parse_args(argv)
    NOTEBOOK_DIR.mkdir(exist_ok=True)
    stale = []
    for name in NOTEBOOKS:
        path = NOTEBOOK_DIR / f"{name}.ipynb"
        text = render(name)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path.name)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print("out of date (run python scripts/make_notebooks.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
