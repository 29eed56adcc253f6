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
# # 10. The mainloop's call order and the IntraWGOverlap schedule, from a trace
#
# The consumer warpgroups of FA3's forward (`hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp`, `mma`)
# call the four methods of `Softmax` (`hopper/softmax.h`) in a fixed order around the two
# GEMMs of each K/V block: `max_get_scale` and `online_softmax` once per block, `rescale_o`
# to bring O to the new row max, and `finalize` once after the loop. Where the PV GEMM of a
# block sits in that order is the schedule (docs/forward.md, "One block `n`", step 7):
#
# * **plain**: block `n` is `S = QK^T`, softmax, rescale O, `O += P V`, all of block `n`;
# * **IntraWGOverlap**: the PV GEMM of the *previous* block `n + 1` is issued right after
#   `QK^T` of block `n`, runs on the tensor cores while the warpgroup does block `n`'s
#   softmax, and is waited for before O is rescaled (`fwd_step`: `warpgroup_wait<1>` for
#   QK^T, `warpgroup_wait<0>` for PV);
# * **RescaleOBeforeGemm** (IntraWGOverlap with a head dim over 128): O is rescaled with the
#   previous block's `scores_scale` before that PV GEMM, not after.
#
# Every picture below is drawn from the emulator's step trace (`flash.forward(...,
# trace=...)`), whose events are in the consumer warpgroup's program order, with one
# exception: with RescaleOBeforeGemm FA3 rescales O between issuing `QK^T` and issuing the PV
# GEMM, and the emulator records that `rescale_o` just before the PV GEMM (it multiplies by
# the previous block's `scores_scale`, so both places give the same bits). The claims are
# asserted on the trace.

# %%
# %matplotlib inline
import matplotlib.pyplot as plt
import numpy as np

from simulator import flash, hw, mma, notebook
from simulator import numerics as nm
from simulator.compare import bits

NB = notebook.setup()
BF16 = NB.bf16


def traced(head_dim, schedule, seed=10):
    """One CTA (64 query rows, 3 K/V blocks of 64 keys) traced under ``schedule``."""
    rng = np.random.default_rng(seed)
    q, k, v = ((1.5 * rng.standard_normal((1, n, 1, head_dim))).astype(np.float32).astype(BF16)
               for n in (64, 192, 192))
    res = flash.forward(q, k, v, kblock_m=64, kblock_n=64, schedule=schedule, trace=[(0, 0, 0)])
    return dict(q=q, k=k, v=v, events=res.trace.for_cta((0, 0, 0)), head_dim=head_dim)


runs = {"plain (head dim 64)": traced(64, "plain"),
        "IntraWGOverlap (head dim 64)": traced(64, "intra_wg_overlap"),
        "RescaleOBeforeGemm (head dim 192)": traced(192, "intra_wg_overlap")}
for name, r in runs.items():
    print(f"{name}:\n  " + ", ".join(f"{e.step}({'' if e.n_block is None else e.n_block})"
                                     for e in r["events"]))

# %% [markdown]
# ## The call order of the four Softmax methods
#
# A sequence picture: one column per actor (the tensor cores' two GEMMs, the mask, the four
# `Softmax` methods, the epilogue), time running down, one mark per trace event labelled with
# its K/V block. Blocks are visited from the last to the first.

# %%
LANES = ["qk_gemm", "mask", "max_get_scale", "online_softmax", "rescale_o", "pv_gemm",
         "finalize", "epilogue"]
SOFTMAX = {"max_get_scale", "online_softmax", "rescale_o", "finalize"}

fig, axes = plt.subplots(1, 3, figsize=(16, 6.5), sharey=True)
for ax, (name, r) in zip(axes, runs.items(), strict=True):
    ev = r["events"]
    for i, e in enumerate(ev):
        x = LANES.index(e.step)
        color = "C1" if e.step in SOFTMAX else "C0"
        ax.plot(x, i, "o", color=color, ms=9)
        ax.text(x + 0.18, i, "" if e.n_block is None else f"n={e.n_block}", va="center", fontsize=8)
        if i:
            ax.annotate("", xy=(x, i), xytext=(LANES.index(ev[i - 1].step), i - 1),
                        arrowprops=dict(arrowstyle="->", color="0.6", lw=0.8))
    ax.set_xticks(range(len(LANES)), LANES, rotation=45, ha="right", fontsize=8)
    ax.set_title(name, fontsize=10)
    ax.grid(axis="x", color="0.9")
axes[0].invert_yaxis()
axes[0].set_ylabel("trace event (program order)")
axes[0].plot([], [], "o", color="C1", label="Softmax method")
axes[0].plot([], [], "o", color="C0", label="GEMM, mask, epilogue")
axes[0].legend(fontsize=8, loc="lower left")
fig.tight_layout()


# %%
def order(events):
    """(step, n_block) -> position of its first event in the trace (with RescaleOBeforeGemm
    the rescale after the loop is a second ``rescale_o`` labelled with the last block)."""
    pos = {}
    for i, e in enumerate(events):
        pos.setdefault((e.step, e.n_block), i)
    return pos


for name, r in runs.items():
    ev = r["events"]
    pos = order(ev)
    blocks = [n for n in dict.fromkeys(e.n_block for e in ev) if n is not None]
    assert blocks == [2, 1, 0]                                   # last block first
    for n in blocks:                                             # the per-block order
        assert pos[("qk_gemm", n)] < pos[("mask", n)] < pos[("max_get_scale", n)] \
            < pos[("online_softmax", n)]
    steps = [e.step for e in ev]
    assert steps.count("max_get_scale") == steps.count("online_softmax") == 3
    assert steps.count("finalize") == 1 and steps[-1] == "epilogue"
    assert pos[("finalize", None)] > max(i for i, s in enumerate(steps) if s == "pv_gemm")
    for n in blocks:                                             # where each PV GEMM sits
        if name.startswith("plain"):
            assert pos[("online_softmax", n)] < pos[("rescale_o", n)] < pos[("pv_gemm", n)]
        elif n < 2:  # the PV GEMM of block n + 1 follows block n's softmax
            assert pos[("online_softmax", n)] < pos[("pv_gemm", n + 1)]
            rescale_first = pos[("rescale_o", n)] < pos[("pv_gemm", n + 1)]
            assert rescale_first == name.startswith("RescaleOBeforeGemm")
    print(f"{name}: rescale_o {steps.count('rescale_o')} times, pv_gemm {steps.count('pv_gemm')} "
          "times; the order asserted")

# %% [markdown]
# ## Why the PV GEMM of block n + 1 may run during block n's softmax
#
# The overlapped PV GEMM reads only P of block `n + 1` (finished one step earlier), V of block
# `n + 1` and O as it was: nothing block `n`'s softmax produces. The cell recomputes every
# overlapped `pv_gemm` event from exactly those inputs, taken from the trace, with
# `mma.gemm`, and gets its bits.

# %%
for name, r in runs.items():
    if name.startswith("plain"):
        continue
    ev, d = r["events"], r["head_dim"]
    lay_s, lay_o = hw.accumulator_layout("m64n64k16"), hw.accumulator_layout(f"m64n{d}k16")
    checked = 0
    for i, e in enumerate(ev):
        if e.step != "pv_gemm" or e.n_block == 0:
            continue
        n = e.n_block
        p = lay_s.to_matrix(next(x for x in ev if x.step == "online_softmax"
                                 and x.n_block == n).data["acc_s"][0])
        prev_o = next((x for x in reversed(ev[:i]) if "acc_o" in x.data), None)
        o_in = np.zeros((64, d), np.float32) if prev_o is None else lay_o.to_matrix(prev_o.data["acc_o"][0])
        vn = r["v"][0, n * 64:(n + 1) * 64, 0]
        o = mma.gemm(nm.convert(p, "bf16"), vn.copy(), o_in,
                     instruction=f"wgmma.m64n{d}k16.f32.bf16.bf16")
        assert np.array_equal(bits(o), bits(lay_o.to_matrix(e.data["acc_o"][0])))
        between = [x.step for x in ev[order(ev)[("qk_gemm", n - 1)] + 1:i]
                   if x.step != "rescale_o"]  # RescaleOBeforeGemm's runs before PV's issue
        print(f"{name}: pv_gemm(n={n}) = P({n}) V({n}) + O, bit for bit; it overlaps {between}")
        checked += 1
    assert checked == 2  # the PV GEMMs of blocks 2 and 1 (block 0's runs after the loop)

# %% [markdown]
# ## The schedule as a timeline
#
# Two lanes per schedule: the tensor cores (asynchronous `wgmma`) and the warpgroup's own
# instructions (mask and Softmax). Each trace event takes one slot in program order. A PV
# GEMM that the trace records after a softmax step was issued earlier, right after the
# `QK^T` of that step (FA3's `fwd_step`), so its bar starts there and ends where the trace
# records it (the `warpgroup_wait<0>`): the overlap is the part of the bar beside the
# softmax lane. The last PV GEMM is issued after the loop.

# %%
fig, axes = plt.subplots(3, 1, figsize=(14, 6.5), sharex=True)
for ax, (name, r) in zip(axes, runs.items(), strict=True):
    ev = r["events"]
    last_qk = None
    for i, e in enumerate(ev):
        label = e.step.replace("_", "\n", 1) + ("" if e.n_block is None else f"\n({e.n_block})")
        if e.step == "qk_gemm":
            last_qk = i
        if e.step in ("qk_gemm", "pv_gemm"):
            start = i
            if e.step == "pv_gemm" and last_qk is not None and e.n_block != ev[last_qk].n_block:
                start = last_qk + 1                      # issued after QK^T, waited for here
            ax.broken_barh([(start, i + 1 - start)], (1.1, 0.8),
                           facecolors="C0" if e.step == "qk_gemm" else "C2", edgecolor="k")
            ax.text((start + i + 1) / 2, 1.5, label, ha="center", va="center", fontsize=7)
        else:
            ax.broken_barh([(i, 1)], (0.1, 0.8), facecolors="C1" if e.step in SOFTMAX else "0.8",
                           edgecolor="k")
            ax.text(i + 0.5, 0.5, label, ha="center", va="center", fontsize=6.5)
    ax.set_yticks([0.5, 1.5], ["warpgroup\n(mask, Softmax)", "tensor cores\n(wgmma)"], fontsize=8)
    ax.set_ylim(0, 2)
    ax.set_title(name, fontsize=10, loc="left")
axes[-1].set_xlabel("slot (trace event, program order)")
fig.tight_layout()

# %%
print(NB.finish())
