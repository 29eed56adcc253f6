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
# # 9. The backward: P from LSE, dPsum, one key block's dS, and dQ's atomic adds
#
# FA3's backward (hopper/flash_bwd_launch_template.h, docs/backward.md) runs three kernels: a
# preprocess (dPsum = rowsum(dO * O), LSE in log2 units), a mainloop with one CTA per key
# block (S and P recomputed, dS, the dV / dK / dQ GEMMs) and a postprocess (dQ scaled and
# rounded). This notebook takes one call the real FA3 backward ran on the H200
# (`simulator/data/device/fa3_backward_report.json`, matrix case 307: fp16, 384 queries, 512
# keys, 2 heads, head dim 128, causal), redoes one CTA's work by hand, and shows why three runs
# of the library's default mode did not give the same dQ.

# %%
# %matplotlib inline
import importlib

import matplotlib.pyplot as plt
import numpy as np

from simulator import fa3, flash, mma, notebook
from simulator.flash.grid import pad_rows
from simulator.flash.masks import allowed
from simulator.flash.spread import ordered_sum
from simulator.io import read_json, read_npz
from simulator.numerics import convert, ffma, fmul, fsub
from simulator.numerics.mufu import ex2

NB = notebook.setup()  # the clock, bf16, static mode under CI
bwd = importlib.import_module("simulator.flash.backward")  # the module behind flash.backward

# %%
from simulator.replay import bwd_cases, fa3_backward
from simulator.replay.common import digest

report = read_json(fa3_backward.REPORT, fa3_backward.REGENERATE)
INDEX = 307
entry = report["matrix"][INDEX]
case = entry["case"]
x = bwd_cases.case_inputs(case)
q, k, v, dout = x["q"], x["k"], x["v"], x["dout"]
print(case["name"], "| q", q.shape, q.dtype, "| k", k.shape, "| window", x["window"])
out, lse = fa3.flash_attn_func(q, k, v, causal=x["causal"], window_size=x["window"],
                               return_attn_probs=True)
assert digest(out.view(np.uint16)).hex() == entry["out"]        # the library's forward bits
assert digest(lse.view(np.uint32)).hex() == entry["lse"]

# %% [markdown]
# ## Why the forward keeps LSE
#
# The backward needs P = softmax(S) block by block. The forward kept one float32 per row,
# LSE = m + log(sum exp(s - m)); the backward recomputes `P = exp2(S * scale_log2 - LSE_log2)`
# with one FFMA and one MUFU.EX2 per score and no max or sum: the row's normalisation is in LSE.
# Summed over every key, the recomputed P of a row is 1 to float32 rounding.

# %%
res = flash.backward(dout, q, k, v, out, lse, causal=True, spread=True)
cfg = bwd.make_backward_config(dout, q, k, v, out, lse, causal=True)
M, N, kd = cfg.tiles.kblock_m, cfg.tiles.kblock_n, cfg.tiles.kernel_head_dim
print("FA3's backward:", cfg.tiles.describe(), "| scale_log2", cfg.scale_log2)
head = 0
s_all = (q[0, :, head].astype(np.float64) @ k[0, :, head].astype(np.float64).T)
rows, cols = np.arange(cfg.seqlen_q)[:, None], np.arange(cfg.seqlen_k)[None, :]
ok = allowed(rows, cols, cfg.seqlen_q, cfg.seqlen_k, cfg.window)
lse2 = res.lse_log2[0, head, : cfg.seqlen_q, None].astype(np.float64)
p_all = np.where(ok, np.exp2(s_all * float(cfg.scale_log2) - lse2), 0)
print("row sums of the recomputed P: min", p_all.sum(1).min(), "max", p_all.sum(1).max())
assert np.allclose(p_all.sum(1), 1, atol=1e-5)

# %% [markdown]
# ## The preprocess: dPsum and LSE_log2
#
# dPsum[row] = sum_d dO * O: 16 threads read a row of 128 values, 8 each; a thread's sum is an
# FMUL then seven FFMAs, and the 16 sums meet in a butterfly of shuffles. The bits below are the
# library's (the recorded digest of its `softmax_d` output).

# %%
assert digest(res.dpsum.view(np.uint32)).hex() == entry["det"]["dpsum"]
assert digest(res.lse_log2.view(np.uint32)).hex() == entry["det"]["lse_log2"]
exact = (dout[0, :, head].astype(np.float64) * out[0, :, head].astype(np.float64)).sum(1)
print("dPsum of head 0, first rows:", res.dpsum[0, head, :4])
print("largest difference from the float64 sum:", np.abs(res.dpsum[0, head, : cfg.seqlen_q] - exact).max())

# %% [markdown]
# ## One key block's dS, by hand
#
# The CTA of key block n_block 2 (head 0) at m_block 2, the key block on that m_block's causal
# edge (n_block 1 lies wholly below the diagonal: nothing of it is masked): S = Q K^T and
# dP = dO V^T on the tensor cores (k16 steps, zero-initialised), the causal mask, P through
# FFMA + MUFU.EX2, dS = P (dP - dPsum), both rounded to fp16 for the next GEMMs. Its dQ
# partial dS K is what it reduce-adds into dQaccum.

# %%
ins = mma.parse("wgmma", f"m64n{N}k16.f32.f16.f16")


def tile(m_block, n_block, h=head):
    """(P, dS, dQ partial) of one CTA step, as the mainloop computes them."""
    qp, dop = pad_rows(q, cfg.m_blocks * M, kd), pad_rows(dout, cfg.m_blocks * M, kd)
    kp, vp = pad_rows(k, cfg.n_blocks * N, kd), pad_rows(v, cfg.n_blocks * N, kd)
    r, c = m_block * M + np.arange(M), n_block * N + np.arange(N)
    qm, dom, kt, vt = qp[0, r, h], dop[0, r, h], kp[0, c, h], vp[0, c, h]
    zero = np.full((M, N), -0.0, np.float32)
    s = mma.gemm(qm, kt.T, zero, instruction=ins)
    dp = mma.gemm(dom, vt.T, zero, instruction=ins)
    s = np.where(allowed(r[:, None], c[None, :], cfg.seqlen_q, cfg.seqlen_k, cfg.window), s,
                 np.float32(-np.inf))
    p = ex2(ffma(s, cfg.scale_log2, -res.lse_log2[0, h, r][:, None], ftz=True))
    ds = fmul(p, fsub(dp, res.dpsum[0, h, r][:, None], ftz=True), ftz=True)
    ds16 = convert(ds, "f16")
    return p, ds16, mma.gemm(ds16, kt, np.full((M, kd), -0.0, np.float32), instruction=ins)


def masked_count(m_block, n_block):
    """Scores of the (m_block, n_block) tile the mask removes."""
    r, c = m_block * M + np.arange(M), n_block * N + np.arange(N)
    return int(np.count_nonzero(~allowed(r[:, None], c[None, :], cfg.seqlen_q, cfg.seqlen_k,
                                         cfg.window)))


# the causal edge of m_block 2: the key block its mask cuts partly
edge = next(n for n in range(cfg.n_blocks) if 0 < masked_count(2, n) < M * N)
assert edge == 2 and masked_count(2, 1) == 0 and 0 < masked_count(2, edge) < M * N
p, ds16, part = tile(2, edge)
assert np.count_nonzero(p.view(np.uint32) == 0) >= masked_count(2, edge)  # a masked score gives P = +0
fig, axes = plt.subplots(1, 2, figsize=(11, 3))
axes[0].imshow(p, aspect="auto", cmap="viridis")
axes[0].set(title=f"P of CTA n_block {edge} at m_block 2 (causal edge: "
                  f"{masked_count(2, edge):,} of {M * N:,} scores masked)",
            xlabel="key", ylabel="query row")
axes[1].imshow(ds16.astype(np.float32), aspect="auto", cmap="coolwarm")
axes[1].set(title="dS (fp16)", xlabel="key")
fig.tight_layout()

# %% [markdown]
# ## dQ: partials from several key blocks, added in some order
#
# m_block 2 (rows 128..191) is visited by the n_blocks whose keys it may see. Each adds its
# float32 partial into dQaccum with a reduce-add. With `deterministic=True` FA3's semaphores
# make them arrive in a fixed order (for a causal mask, the highest n_block first); without
# it they arrive as the CTAs finish. Two orders, two sets of bits:

# %%
m_block = 2
m_min, m_max = bwd.m_block_range(cfg, np.arange(cfg.n_blocks))
visits = [n for n in range(cfg.n_blocks) if m_min[n] <= m_block < m_max[n]]
order = sorted(visits, key=lambda n: bwd.dq_order(cfg, np.array(n)))
print("n_blocks visiting m_block", m_block, ":", visits, "| deterministic order:", order)
parts = np.stack([tile(m_block, n)[2] for n in order])
fa3_order = ordered_sum(parts)
other = ordered_sum(parts[::-1])
print(f"{np.sum(fa3_order.view(np.uint32) != other.view(np.uint32)):,} of {fa3_order.size:,} "
      "float32 dQaccum values differ between the two orders")
rows_m = slice(m_block * M, (m_block + 1) * M)
mine = convert(fmul(fa3_order[:, : cfg.head_dim], cfg.softmax_scale, ftz=True), "f16")
assert np.array_equal(mine.view(np.uint16), res.dq[0, rows_m, head].view(np.uint16))

# %% [markdown]
# ## What the library's default mode did, and the spread
#
# The library ran this call three times with `deterministic=False`; the recorded differences
# from its deterministic run are below. `backward_spread` gives, per value, the smallest and
# largest dQ any arrival order can give; every recorded value lies inside.

# %%
diffs = bwd_cases.unpack_diffs(read_npz(fa3_backward.DIFFS, fa3_backward.REGENERATE))
lo, hi = (a.astype(np.float32).ravel() for a in res.spread["dq"])
assert digest(res.dq.view(np.uint16)).hex() == entry["det"]["dq"]   # deterministic: the library's bits
changed = []
for j in range(3):
    idx, bits16 = diffs[f"m{INDEX}_r{j}_dq"]
    vals = bits16.view(np.float16).astype(np.float32)
    assert np.all((lo[idx] <= vals) & (vals <= hi[idx]))
    changed.append(idx)
    print(f"default run {j}: {idx.size} dq values differ from the deterministic run")
where = np.flatnonzero(lo != hi)
print(f"{where.size:,} of {lo.size:,} dq values can change with the order; the runs changed "
      f"{len(set(np.concatenate(changed)))} of them")

# %%
flat_rows = lambda i: np.unravel_index(i, res.dq.shape)[1]  # noqa: E731
fig, ax = plt.subplots(figsize=(8, 2.5))
ax.hist(flat_rows(where), bins=np.arange(0, cfg.seqlen_q + M, M // 4), color="0.7",
        label="can change (spread)")
for j, idx in enumerate(changed):
    ax.plot(flat_rows(idx), np.full(idx.size, 0.5 + j), "o", label=f"changed in run {j}")
ax.set(xlabel="query row", ylabel="values", title="dq values whose bits depend on the order")
ax.legend(fontsize=7)
fig.tight_layout()

# %% [markdown]
# With `deterministic=True` the spread collapses to the one order FA3's semaphores impose:

# %%
det = fa3.flash_attn_backward(dout, q, k, v, out, lse, causal=True, deterministic=True)
assert all(np.array_equal(a.view(np.uint16), b.view(np.uint16)) for a, b in zip(det, res, strict=True))
print("deterministic=True: the recorded bits, every run")

# %%
print(NB.finish())
