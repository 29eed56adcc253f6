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
# # 1. Three ways to compute softmax(QK^T)V: passes over memory, and the results side by side
#
# As docs/forward.md, "Background: one pass over K and V", tells it: the *safe* softmax reads
# the scores three times (max, sum, normalise), the *online* softmax (Milakov and Gimelshein,
# 2018) folds the max into the sum and needs two passes, and FlashAttention fuses the online
# softmax with the `P V` product so that K and V are read **once** (the rescaling recurrence
# of `O` and `l`).
#
# In attention the score matrix `S = Q K^T` is never stored (it is `seqlen_q x seqlen_k`), so
# every pass over the scores means loading K again from HBM. Below, each strategy runs on the
# same data through a small `HBM` object that counts every block it hands out. All three are
# written in plain NumPy float32 (the *algorithm*, not the hardware); at the end the emulated
# H200 kernel (`simulator.flash.forward`, which is strategy 3 on tensor cores and MUFU) joins
# them.

# %%
# %matplotlib inline
import matplotlib.pyplot as plt
import numpy as np

from simulator import flash, notebook
from simulator.compare import bits

NB = notebook.setup()  # the clock, bf16, static mode under CI
BF16 = NB.bf16


# %% [markdown]
# ## Data
#
# 8 query rows, 512 keys in 8 blocks of 64, head dimension 64, in bf16 so that the emulated
# kernel sees exactly the same numbers. `flash.reference` is float64 attention on those values.

# %%
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


# %%
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
    """Safe softmax: max, then sum, then normalise and multiply by V; S recomputed each pass."""
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
    """Online softmax: running max and rescaled running sum, then one pass for P V."""
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
    """The fused FlashAttention loop; O is rescaled, normalised once at the end."""
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

# %% [markdown]
# ## Passes over memory
#
# The claim of the three forms, counted: K is read 3, 2 and 1 times, V once in every strategy.
# The picture shows the order of the loads (each dot is one block handed out by `HBM`).

# %%
for (name, mem), k_passes in zip(memories.items(), (3, 2, 1), strict=True):
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
    for i, (p, what, _j) in enumerate(memories[name].log):
        axes[1].scatter(i, row + (0.15 if what == "V" else -0.15), s=12,
                        color=f"C{p - 1}", marker="s" if what == "V" else "o")
axes[1].set_yticks(range(3), names)
axes[1].set_xlabel("load number (o = K block, square = V block; colour = pass 1/2/3)")
axes[1].invert_yaxis()
fig.tight_layout()

# %% [markdown]
# ## The results side by side
#
# The three strategies compute the same mathematical function with different roundings.
#
# * The row **max is exact** (a maximum never rounds), so all three find the same bits.
# * The sum `l` is accumulated in different orders and, in the online forms, rescaled by
#   `exp(m_old - m_new)`; its bits may differ, but each is within a few float32 roundings per
#   term of the float64 value.
# * `O` agrees with the float64 reference to float32 accuracy in all three.
#
# The bounds asserted below are deliberately generous multiples of float32's unit roundoff
# `u = 2^-24` for 512 terms.

# %%
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

# %% [markdown]
# ## The emulated H200 kernel is strategy 3
#
# `flash.forward` runs the fused loop as FlashAttention-3 does on the H200 (docs/forward.md):
# bf16 tensor-core GEMMs, `exp2` through FFMA + MUFU.EX2, `P` rounded to bf16 before `P V`,
# the output rounded to bf16. Its error is therefore bounded by the bf16 roundings of `P`
# and `O` (unit roundoff `2^-9`), not float32's: about 2^-8 of `max|V|` is the bound asserted.
# Its LSE stays at float32 accuracy because `l` and `m` are float32 throughout.

# %%
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

# %%
print(NB.finish())
