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
# # 8. A decode step with split-KV: what each split computes and how the combine merges them
#
# `flash_attn_with_kvcache` defaults to `num_splits=0`: FA3's host code picks a split count
# (`get_num_splits`, hopper/flash_api.cpp), and for a varlen launch (every call with
# `cache_seqlens`) its prepare kernel decides each batch's count
# (hopper/flash_prepare_scheduler.cu). The Split kernel then runs the forward once per split
# over that split's K/V blocks and writes each split's O (normalised by its own row sum, in
# float32) and LSE; the combine kernel merges them (hopper/flash_fwd_combine_kernel.h,
# docs/combine.md). This notebook takes one call the real library ran on the H200
# (`simulator/data/device/fa3_api_report.json`, call 40: 64 query tokens against a cache of
# 1,285 keys, head dim 80, softcap 30), redoes each stage and checks the bits against the
# library's.

# %%
# %matplotlib inline
import matplotlib.pyplot as plt
import numpy as np

from simulator import flash, notebook

NB = notebook.setup()  # the clock, bf16, static mode under CI
BF16 = NB.bf16


# %%
from simulator import fa3
from simulator.compare import bits
from simulator.fa3 import combine as fa3_combine
from simulator.fa3 import scheduler
from simulator.flash.dispatch import fa3_dispatch
from simulator.replay import fa3_api, fa3_api_cases

report, sample = fa3_api.load()
INDEX = 40
record = report["cases"][INDEX]
name, args = fa3_api_cases.call_args(record["case"])
q, k_cache, v_cache = args["q"], args["k_cache"], args["v_cache"]
seqlen = int(args["cache_seqlens"][0])
b, sq, h, d = q.shape
print(name, "| q", q.shape, q.dtype, "| cache", k_cache.shape, "| cache_seqlens", f"{seqlen:,}",
      "| causal", args["causal"], "| num_splits", args["num_splits"])

# %% [markdown]
# ## What FA3's host code decides
#
# The static count comes from the occupancy heuristic (`num_splits_heuristic`: split until
# the batch x heads x query tiles fill about 85% of the best wave efficiency on 132 SMs); the
# prepare kernel then caps each batch by its own K/V blocks over the blocks per SM of the
# whole launch.

# %%
disp = fa3_dispatch("bf16", d, sq, causal=args["causal"], softcap=args["softcap"])
static = fa3_combine.get_num_splits(b, h, 1, sq, k_cache.shape[1], d, d, "bf16",
                                    causal=args["causal"], softcap=args["softcap"], varlen=True)
splits = scheduler.dynamic_num_splits([sq], [seqlen], kblock_m=disp.kblock_m,
                                      kblock_n=disp.kblock_n, heads=h, heads_kv=1,
                                      num_sms=132, num_splits_static=static, pack_gqa=True)
n_max = -(-seqlen // disp.kblock_n)
print(disp.describe())
print(f"static num_splits {static}; this batch: {int(splits[0]):,} splits over {n_max:,} K/V blocks")
for s in range(int(splits[0])):
    lo, hi = fa3_combine.n_block_range_for_split(0, n_max, s, int(splits[0]))
    last = min(hi * disp.kblock_n, seqlen) - 1
    print(f"  split {s}: blocks {lo:,}..{hi - 1:,} (keys {lo * disp.kblock_n:,}..{last:,})")
assert int(splits[0]) > 1

# %% [markdown]
# ## The Split kernel: one forward per split
#
# `simulator.flash.forward(..., num_splits=n)` is that launch: its output is every split's
# partial O (float32, each normalised by its own row sum) and LSE.

# %%
keys, values = k_cache[:, :seqlen], v_cache[:, :seqlen]
part = flash.forward(q, keys, values, causal=args["causal"], softcap=args["softcap"],
                     num_splits=int(splits[0]), max_seqlen_q=sq, max_seqlen_k=k_cache.shape[1])
o_part, lse_part = part.out, part.lse            # [splits, 1, sq, h, d], [splits, 1, h, sq]
print("partial O", o_part.shape, o_part.dtype, "| partial LSE", lse_part.shape)
row = sq - 1
print(f"LSE of the last query row per split: {np.round(lse_part[:, 0, 0, row], 4)}")

# %% [markdown]
# ## The combine: LSE-weighted sum of the partial outputs
#
# Per row: `lse_max` over the splits, `scale_s = expf(lse_s - lse_max)` (an FMUL by log2(e)
# then MUFU.EX2), the sum over splits in the kernel's order (each thread's own splits, then a
# butterfly), `LSE = lg2(sum) * ln2 + lse_max` in one FFMA, and `O = sum_s (scale_s / sum) *
# O_s` by FFMAs in split order, rounded to bf16 at the end.

# %%
out, lse = fa3_combine.combine(o_part, lse_part, BF16, head_dim_v=d)
w = np.exp(lse_part[:, 0, 0, :] - lse[0, 0, :][None, :])      # float64 weights, for the picture
assert np.allclose(w.sum(axis=0), 1, atol=1e-4)
full = fa3.flash_attn_with_kvcache(**{**args, "k_cache": k_cache.copy(), "v_cache": v_cache.copy()})
assert np.array_equal(bits(full[0]), bits(out)) and np.array_equal(bits(full[1]), bits(lse))
lib_out, lib_lse = sample[f"c{INDEX}_out"], sample[f"c{INDEX}_lse"]
n_out = int(np.count_nonzero(bits(out) != lib_out))
n_lse = int(np.count_nonzero(bits(lse) != lib_lse))
print(f"against the H200's library: O {n_out:,} of {out.size:,} values differ, "
      f"LSE {n_lse:,} of {lse.size:,}")
assert n_out == 0 and n_lse == 0
unsplit = flash.forward(q, keys, values, causal=args["causal"], softcap=args["softcap"])
n_diff = int(np.count_nonzero(bits(unsplit.out) != lib_out))
print(f"the unsplit kernel differs from the library in {n_diff:,} O values: the split is part "
      "of what FA3 computes")
assert n_diff > 0

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 3))
im = axes[0].imshow(w, aspect="auto", cmap="viridis")
axes[0].set(title="combine weight of each split, per query row", xlabel="query row", ylabel="split")
fig.colorbar(im, ax=axes[0])
axes[1].plot(lse_part[:, 0, 0, :].T, lw=0.8)
axes[1].plot(lse[0, 0, :], "k", lw=2, label="combined LSE")
axes[1].set(title="LSE per split (colours) and combined (black)", xlabel="query row")
axes[1].legend()
fig.tight_layout()

# %% [markdown]
# ## Live, where a GPU and the library are present
#
# With torch, an sm_90 GPU and `fa3-fwd` installed, the same call runs on the library.

# %%
from simulator.device import fa3_library

ok, why = fa3_library.available()
if ok:
    got = fa3_library.call(name, {**args, "k_cache": k_cache.copy(), "v_cache": v_cache.copy()})
    assert np.array_equal(bits(got["out"]), bits(out))
    print("live: identical bits")
else:
    print("live check skipped:", why)

# %%
print(NB.finish())
