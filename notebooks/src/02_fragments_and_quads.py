# ---
# jupyter:
#   jupytext:
#     formats: ipynb,src//py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 2. Fragments and quads: who owns what in m64nNk16, and how a row is reduced
#
# A `wgmma.m64nNk16` leaves its `64 x N` float32 result spread over the 128 threads of a
# warpgroup, `N/2` registers each (PTX ISA, "Register Fragments"; docs/hw.md). FlashAttention-3
# reduces rows of that fragment in two stages (`hopper/softmax.h`; docs/forward.md, step 4):
# `thread_reduce_` folds each thread's own columns, then `quad_allreduce_` combines the four
# threads of a **quad** with two butterfly shuffles. This notebook draws both, and checks the
# pictures against the layout API.

# %%
# %matplotlib inline
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap

from simulator import hw, notebook
from simulator import numerics as nm
from simulator.compare import bits

NB = notebook.setup()  # the clock, bf16, static mode under CI


# %% [markdown]
# ## The accumulator layout
#
# Thread `t` is warp `w = t // 32`, lane `t % 32`, quad `g = lane >> 2`, lane in quad
# `q = lane % 4`. Register `i` of thread `t` holds
#
# `row = 16 w + g + 8 ((i >> 1) & 1)`, `col = 8 (i >> 2) + 2 q + (i & 1)`.
#
# So a quad owns exactly two rows (`16w + g` and `16w + g + 8`), and each of its four lanes
# holds a pair of adjacent columns in every group of 8.

# %%
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

# %% [markdown]
# ## The picture
#
# Left: `Fragment.plot` of the whole tile coloured by quad: 32 quads, 32 colours (matplotlib's
# `tab20` and the first twelve of `tab20b`).
# Right: a zoom on warp 0, rows 0..7 and columns 0..7, drawn here from `layout.thread_of`
# and `layout.reg_of`; each cell says `thread/register` (quads 0..7, eight colours). The
# assert after the figure reads every label of the zoom back through `layout.locate`
# (thread, register -> row, col) and `Fragment.to_matrix`: the picture and the API say the
# same thing.

# %%
frag_coords = hw.Fragment.from_matrix(
    (np.arange(64)[:, None] * 1000 + np.arange(N)[None, :]).astype(np.float32), layout)
quad_colours = ListedColormap(list(plt.get_cmap("tab20").colors)
                              + list(plt.get_cmap("tab20b").colors)[:12])  # 32 quads
fig, axes = plt.subplots(1, 2, figsize=(14, 6), gridspec_kw={"width_ratios": [1, 1.1]})
frag_coords.plot(color_by="quad", annotate=False, ax=axes[0], cmap=quad_colours)
zoom_t, zoom_r = layout.thread_of[:8, :8], layout.reg_of[:8, :8]
qcol = ti.quad_in_warpgroup[zoom_t]
axes[1].imshow(qcol, cmap=quad_colours, vmin=0, vmax=31)
for r, c in np.ndindex(8, 8):
    axes[1].text(c, r, f"t{zoom_t[r, c]}\nr{zoom_r[r, c]}", ha="center", va="center", fontsize=11)
axes[1].set_title("warp 0, rows 0-7, cols 0-7: thread / register (colour = quad)")
axes[1].set_xlabel("col")
axes[1].set_ylabel("row")
fig.tight_layout()

r_back, c_back = layout.locate(zoom_t, zoom_r)
assert np.array_equal(r_back, np.arange(8)[:, None] * np.ones(8, int))
assert np.array_equal(c_back, np.ones(8, int)[:, None] * np.arange(8))
assert np.array_equal(frag_coords.to_matrix()[:8, :8],
                      frag_coords.data[zoom_t, zoom_r])

# %% [markdown]
# `dump_quad` prints the same thing as text. To keep it short, an `m64n8k16` tile (4
# registers per thread) holding `1000 * row + col` in every element, so each value reads as
# its own coordinates; the assert checks every register of all 128 threads the same way.

# %%
small = hw.accumulator_layout("m64n8k16")
coords = np.arange(64)[:, None] * 1000 + np.arange(8)[None, :]
frag_small = hw.Fragment.from_matrix(coords.astype(np.float32), small)
print(frag_small.dump_quad(0, warp=0))
want = small.row.astype(np.int64) * 1000 + small.col.astype(np.int64)     # [128, 4]
assert np.array_equal(frag_small.data, want.astype(np.float32))
assert np.array_equal(frag_coords.data,
                      (layout.row.astype(np.int64) * 1000 + layout.col).astype(np.float32))

# %% [markdown]
# ## The row/column view
#
# `convert_layout_acc_rowcol` (hopper/utils.h) gives each thread a `(nrow, ncol) = (2, N/4)`
# tensor; `softmax.h` loops over it. Entry `(mi, ni)` is register
# `(ni & 1) + 2 mi + 4 (ni >> 1)`: row `mi = 0` walks registers 0, 1, 4, 5, 8, 9, ...

# %%
view = hw.rowcol_view(layout)
print("reg[mi, ni] =\n", view.reg)
mi, ni = np.meshgrid(np.arange(view.nrow), np.arange(view.ncol), indexing="ij")
assert np.array_equal(view.reg, (ni & 1) + 2 * mi + 4 * (ni >> 1))
assert np.array_equal(view.row[:, 0], 16 * ti.warp + ti.quad)
assert np.array_equal(view.row[:, 1], 16 * ti.warp + ti.quad + 8)
print("thread 5 sees rows", view.row[5], "and columns", view.col[5])

# %% [markdown]
# ## thread_reduce, then the quad allreduce, step by step
#
# A score tile with random values. Stage 1 (`thread_reduce`, `op="sum"`): each thread adds its
# 8 columns of a row left to right in `ni` order. Stage 2: `x = x + shfl_xor(x, 2)`, then
# `x = x + shfl_xor(x, 1)` (offsets 2 then 1, `Allreduce<4>` in hopper/utils.h). After the
# first shuffle, lanes 0 and 2 hold `p0 + p2`, lanes 1 and 3 hold `p1 + p3`; after the second,
# every lane holds `(p0 + p2) + (p1 + p3)` (float addition commutes, so all four lanes get the
# same bits, though it does not associate).

# %%
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


# %% [markdown]
# The picture: quad 0, row 0 (`mi = 0`). Each box is one lane's register; arrows show which
# lane's value each lane receives in each butterfly step.

# %%
def draw_quad_steps(stages, titles, mrow=0, quad=0):
    fig, axes = plt.subplots(1, len(stages), figsize=(4.2 * len(stages), 3.2))
    for s, (ax, x, title) in enumerate(zip(axes, stages, titles, strict=True)):
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

# assigned, not the cell's value: a returned Figure would be displayed a second time
fig_quad = draw_quad_steps([partial, step1, step2],
                           ["after thread_reduce (own columns)", "after + shfl_xor(x, 2)",
                            "after + shfl_xor(x, 1): the row sum"])

# %%
print(NB.finish())
