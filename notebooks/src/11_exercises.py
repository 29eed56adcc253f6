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
# # 11. Exercises: write a step of FA3's forward, checked against the H200
#
# A ladder of nineteen puzzles in the style of GPU-Puzzles; this notebook works through the
# expert rungs. Each asks for one step of the FlashAttention-3
# forward as a small NumPy function in the emulator's lockstep model: a thread axis of 128
# (a warpgroup), float32 instructions from `simulator.numerics` (`fadd fsub fmul ffma fmax`,
# each with `ftz=`; `ex2 lg2 rcp` for MUFU), shuffles from `simulator.hw`. The checker
# `simulator.exercises.check(N, fn)` runs your function in place of the emulator's step on
# recorded H200 cases, feeding it the device's own state just before the step, and compares
# the bits it returns with the device's. It prints PASS, or where your bits first part from
# the H200's: which recorded case, which step and K/V block, which warpgroup / warp / lane /
# quad, which tile row and column, and both values in hex and decimal.
#
# | rung | step | checked on |
# | --- | --- | --- |
# | 7 `reduce_max` | a quad's row max, `shfl_xor` | 7 step traces (`max_get_scale`), the reduction probe |
# | 12 `online_rescale` | `scores_scale`, P, `row_sum`, O | later K/V blocks of 5 bf16 / f16 traces |
# | 14 `fp8_exp2` | FP8's `Max_offset = 8` | every block of the 2 e4m3 traces |
# | 15 `finalize` | the quad sum, `1 / sum`, the LSE (with FP8's sum correction) | the 7 traces |
# | 18 `combine` | the split-KV combine | 29 calls of the real FA3 library (2-100 splits) |
#
# The stubs, with their inputs, outputs, shapes and hints, are `simulator/exercises/puzzles.py`
# (shown below); the reference solutions are kept apart in `simulator/exercises/solutions.py`,
# and this notebook imports them only in its last section. From a shell:
# `python -m simulator.exercises check N my_file.py` (N: the rung's number or name).

# %%
import inspect

import numpy as np

from simulator import exercises, notebook
from simulator.exercises import puzzles
from simulator.hw import shfl_xor
from simulator.numerics import fadd, ffma, fmax, fmul, fsub
from simulator.numerics.mufu import LN2_F32, LOG2E_F32, ex2, lg2, rcp

NB = notebook.setup()  # the clock, bf16, static mode under CI
NEG_INF = np.float32(-np.inf)


def try_check(number, fn):
    """Run the checker; a stub still raising NotImplementedError says so instead of failing."""
    try:
        result = exercises.check(number, fn)
    except NotImplementedError as exc:
        print(f"not written yet: {exc}")
        return None
    print(result)
    return result


for p in exercises.PUZZLES.values():
    print(f"{p.number}. {p.name} (~{p.lines} lines)")


# %% [markdown]
# ## The ladder
#
# `python -m simulator.exercises list` prints the whole ladder: nineteen rungs from one FFMA
# (rung 1) through conversions, MUFU.EX2, the quad shuffles, each softmax step, one wgmma
# and one CTA's whole mainloop to the split-KV combine and one key block of the backward's dS.
# The first rungs' stubs are in
# `simulator/exercises/stubs.py` and say what to compute, not how; `exercises.hints(N, K)` (or
# `check N FILE --hint K`) reveals the first K hints. The sections below are the expert rungs.
# A failed rung draws where its bits part from the device's: here FMUL then FADD in place of
# the FFMA of rung 1, and a quad sum with its butterfly offsets swapped (rung 8).

# %%
import matplotlib.pyplot as plt

from simulator.exercises.picture import draw

print(exercises.hints("fma", 1)[0])
unfused = exercises.check("fma", lambda a, b, c: fadd(fmul(a, b, ftz=True), c, ftz=True))
print(unfused)
assert not unfused.passed and unfused.where["position"] == (57,)


def swapped_quad_sum(s):
    for offset in (1, 2):
        s = fadd(s, shfl_xor(s, offset, axis=-2), ftz=True)
    return s


swapped = exercises.check("quad_sum", swapped_quad_sum)
picture = draw(swapped)
assert picture.first == (0, 0, 0) and len(picture.marked) == 76
plt.show()

# %% [markdown]
# ## Rung 7 (reduce_max): the quad max with shuffles
#
# softmax.h's `reduce_max`: each thread folds its own columns of a row in order
# (`thread_reduce_`), then the four threads of the quad that owns the row exchange values in a
# butterfly (`quad_allreduce_`: `__shfl_xor_sync` with lane mask 2, then 1, `max.ftz` each
# time). Inputs and output:

# %%
print(inspect.getdoc(puzzles.reduce_max))

# %% [markdown]
# Your attempt: edit the body below (it starts as the stub) and run the cell.

# %%
def my_reduce_max(scores, row_max):
    raise NotImplementedError(puzzles.NOT_WRITTEN.format(n=1, name="reduce_max", func="reduce_max"))


try_check("reduce_max", my_reduce_max)

# %% [markdown]
# A deliberately wrong attempt: one butterfly round (lane mask 1) only. Each thread then holds
# the max of two of the quad's four threads: the checker finds it at the first `max_get_scale`
# of the first trace, and names the thread, the row and both values.

# %%
def one_round(scores, row_max):
    m = scores[..., 0] if row_max is None else fmax(row_max, scores[..., 0], ftz=True)
    for ni in range(1, scores.shape[-1]):
        m = fmax(m, scores[..., ni], ftz=True)
    return fmax(m, shfl_xor(m, 1, axis=-2), ftz=True)


wrong = try_check("reduce_max", one_round)
assert not wrong.passed and wrong.where["step"] == "max_get_scale" and wrong.where["array"] == "row_max"

# %% [markdown]
# Forgetting `ftz` is subtler: no score in the traces is subnormal, so they all pass; the
# reduction probe's fragments hold subnormals, which `max.ftz` reads as zero. Two rounds in
# the other order (1 then 2), on the other hand, give the H200's bits everywhere: each `max` is
# exact, so the order cannot matter. It does for a sum (rung 8, quad_sum).

# %%
def no_ftz(scores, row_max):
    m = scores[..., 0] if row_max is None else fmax(row_max, scores[..., 0], ftz=False)
    for ni in range(1, scores.shape[-1]):
        m = fmax(m, scores[..., ni], ftz=False)
    for lane_mask in (2, 1):
        m = fmax(m, shfl_xor(m, lane_mask, axis=-2), ftz=False)
    return m


wrong = try_check("reduce_max", no_ftz)
assert not wrong.passed and wrong.where["case"].startswith("reduction probe")

# %% [markdown]
# ## Rung 12 (online_rescale): the online rescale
#
# When a later K/V block raises a row's max, the old sum and the old O were computed against a
# smaller max and must shrink by `2^((old - new) * scale_log2)`. FA3 folds the softmax scale
# into the exponent (one FFMA per element before MUFU.EX2), and the compiler fuses the
# `row_sum *= scores_scale` of softmax.h with the first add of the next sum (docs/forward.md,
# steps 4-6; notebooks 4 and 7).

# %%
print(inspect.getdoc(puzzles.online_rescale))

# %%
def my_online_rescale(scores, row_max_prev, row_max, row_sum_prev, acc_o, scale_log2):
    raise NotImplementedError(puzzles.NOT_WRITTEN.format(n=2, name="online_rescale",
                                                         func="online_rescale"))


try_check("online_rescale", my_online_rescale)

# %% [markdown]
# A deliberately wrong attempt: the exponent's argument as FMUL then FADD (two roundings)
# instead of the FFMA. The checker finds it in P (`acc_s` of `online_softmax`), one ulp off.

# %%
def unfused(scores, row_max_prev, row_max, row_sum_prev, acc_o, scale_log2):
    cur = np.where(row_max == NEG_INF, np.float32(0), row_max)
    scale = ex2(fmul(fsub(row_max_prev, cur), scale_log2))
    max_scaled = np.where(row_max == NEG_INF, np.float32(0), fmul(row_max, scale_log2))
    p = ex2(fadd(fmul(scores, scale_log2), -max_scaled[..., None]))      # FMUL + FADD
    row_sum = ffma(scale, row_sum_prev, p[..., 0])
    for ni in range(1, p.shape[-1]):
        row_sum = fadd(row_sum, p[..., ni])
    return scale, p, row_sum, fmul(acc_o, scale[..., None])


wrong = try_check("online_rescale", unfused)
assert not wrong.passed and (wrong.where["step"], wrong.where["array"]) == ("online_softmax", "acc_s")

# %% [markdown]
# Where in the tile: the same attempt on the event the checker names (the first trace's second
# K/V block), drawn from the recording. Each cell is one element of P, coloured by its distance
# in ulp from the H200's; the count is the one the checker reported. The FMUL rounds
# `s * scale_log2` (printed: its largest magnitude) to 24 bits before the subtraction, which
# the FFMA never does, and 2^x magnifies a change in the last bit of a large argument: at
# `|x|` between 8 and 16 one ulp of `x` is 2^-20, which moves P by `ln 2 * 2^-20` relative,
# 6 to 11 ulp of P, and more where MUFU.EX2's fixed-point reading of its input (notebook 4)
# crosses a step.

# %%
import matplotlib.pyplot as plt

from simulator.compare import ulp_distance
from simulator.exercises import recorded
from simulator.hw import accumulator_layout

case = recorded.trace_cases()[0]
ev = case.device.events
assert [e.step for e in ev[2:4] + ev[7:10]] == ["max_get_scale", "online_softmax", "mask",
                                                 "max_get_scale", "online_softmax"]
cta = ev[9].cta
_, p_mine, _, _ = unfused(recorded.rowcol(ev[7].data["acc_s"]), ev[2].data["row_max"],
                          ev[8].data["row_max"], ev[3].data["row_sum"],
                          np.zeros((1, 128, 2, 16), np.float32), case.scale_log2[cta])
layout = accumulator_layout("m64n64k16")
mine = layout.to_matrix(recorded.fragment(p_mine))[0]
h200 = layout.to_matrix(ev[9].data["acc_s"])[0]
ulps = ulp_distance(mine, h200)
worst = int(np.abs(ulps).max())
product = np.abs(fmul(recorded.rowcol(ev[7].data["acc_s"]), case.scale_log2[cta]))
print(f"largest |s * scale_log2| of the block: {product[np.isfinite(product)].max():.3g}")
print(f"{np.count_nonzero(ulps)} of {ulps.size} elements of P differ, by {ulps.min()} to "
      f"{ulps.max()} ulp; where they differ, the H200's P is {h200[ulps != 0].min():.3g} to "
      f"{h200[ulps != 0].max():.3g}")
assert np.count_nonzero(ulps) == wrong.where["differing"] and worst > 1

fig, ax = plt.subplots(figsize=(6.5, 5))
im = ax.imshow(ulps, cmap="coolwarm", vmin=-worst, vmax=worst, interpolation="nearest")
fig.colorbar(im, ax=ax, label="FMUL + FADD minus H200 (ulp)")
ax.set_xlabel(f"key column of K/V block {ev[9].n_block}")
ax.set_ylabel("query row of the tile")
ax.set_title(f"P of CTA {cta}, '{case.name}': FMUL + FADD against the H200's FFMA")
fig.tight_layout()

# %% [markdown]
# ## Rung 14 (fp8_exp2): FP8's Max_offset
#
# With e4m3 inputs, P is converted to e4m3 (3 mantissa bits, nothing below `2^-9`) before the
# PV GEMM. FA3 shifts the exponent by `Max_offset = 8` inside the FFMA that subtracts the max,
# so P's largest element is 256 instead of 1 (notebook 5).

# %%
print(inspect.getdoc(puzzles.fp8_exp2))

# %%
def my_fp8_exp2(scores, row_max, scale_log2):
    raise NotImplementedError(puzzles.NOT_WRITTEN.format(n=3, name="fp8_exp2", func="fp8_exp2"))


try_check("fp8_exp2", my_fp8_exp2)

# %% [markdown]
# A deliberately wrong attempt: `Max_offset = 0`, the bf16 kernel's P. Every P is 256 times
# the H200's: the same mantissa, the exponent 8 lower.

# %%
def offset_zero(scores, row_max, scale_log2):
    max_scaled = np.where(row_max == NEG_INF, np.float32(0), fmul(row_max, scale_log2))
    return ex2(ffma(scores, scale_log2, -max_scaled[..., None]))


wrong = try_check("fp8_exp2", offset_zero)
assert not wrong.passed and wrong.where["step"] == "online_softmax"
got, want = (int(wrong.where[k][2:10], 16) for k in ("a", "b"))
assert want - got == 8 << 23            # the same sign and mantissa, the exponent 8 higher

# %% [markdown]
# ## Rung 18 (combine): the split-KV combine
#
# With `num_splits > 1`, every split runs the forward over its own range of K/V blocks and
# stores its O (divided by its own row sum) and its LSE; FA3's combine kernel then merges the
# splits of each row, weighting each by `exp(LSE_s - LSE)` (docs/combine.md; notebook 8). The
# checker hands you `allreduce(x, op)`, the kernel's reduction over a row's splits (each
# thread folds its splits in order, then a butterfly over the row's 16 or 32 threads): the
# tree sets the bits, and the exercise is the arithmetic around it.

# %%
print(inspect.getdoc(puzzles.combine))

# %%
def my_combine(lse, o, allreduce):
    raise NotImplementedError(puzzles.NOT_WRITTEN.format(n=4, name="combine", func="combine"))


try_check("combine", my_combine)

# %% [markdown]
# A deliberately wrong attempt: `LSE = log(sum_s exp(LSE_s))` and weights `exp(LSE_s) / sum`
# without subtracting the row's max. In real numbers the max cancels; in float32 the roundings
# differ (the checker finds an LSE one ulp off in the first recorded call), and from an LSE of
# about 88.7 on, `exp` overflows float32: that row's LSE becomes inf and its O zero.

# %%
def without_max(lse, o, allreduce):
    e = ex2(fmul(lse, LOG2E_F32))                                         # no "- max"
    total = allreduce(e, "sum")
    lse_out = fmul(lg2(total), LN2_F32)
    nonzero = (total != 0) & ~np.isnan(total)
    w = fmul(e, np.where(nonzero, rcp(np.where(nonzero, total, np.float32(1))), np.float32(0)))
    out = np.zeros(o.shape[1:], np.float32)
    for s in range(len(o)):
        take = w[s] > 0
        out[take] = ffma(w[s][take, None], o[s][take], out[take])
    return out, lse_out


wrong = try_check("combine", without_max)
assert not wrong.passed and wrong.failing == wrong.cases == 29

big = np.array([[100.0], [99.0]], np.float32)            # two splits of one row, LSE 100 and 99
out, lse = without_max(big, np.ones((2, 1, 4), np.float32), exercises.split_allreduce(2, 64))
print(f"LSE of splits 100 and 99 without the max: {lse[0]}, O {out[0]}")
assert lse[0] == np.inf and not out.any()

# %% [markdown]
# ## Rung 15 (finalize): finalize
#
# After the last block, each thread's partial `row_sum` is summed over the quad (the same
# butterfly as rung 7, with `add.ftz`), inverted for O, and turned into the natural-log LSE
# that the backward reads; in an FP8 kernel the sum is first multiplied by `2^-8` to undo
# rung 14's offset (docs/forward.md "finalize").

# %%
print(inspect.getdoc(puzzles.finalize))

# %%
def my_finalize(row_max, row_sum, scale_log2, max_offset, final_scale):
    raise NotImplementedError(puzzles.NOT_WRITTEN.format(n=5, name="finalize", func="finalize"))


try_check("finalize", my_finalize)

# %% [markdown]
# A deliberately wrong attempt: the butterfly in the other order (lane mask 1, then 2). For
# the max of rung 7 that gave the same bits; for a float32 sum,
# `(p0 + p1) + (p2 + p3)` is not `(p0 + p2) + (p1 + p3)`.

# %%
def reversed_butterfly(row_max, row_sum, scale_log2, max_offset, final_scale):
    total = row_sum
    for lane_mask in (1, 2):                                               # FA3: 2, then 1
        total = fadd(total, shfl_xor(total, lane_mask, axis=-2))
    empty = (total == 0) | np.isnan(total)
    inv = np.where(empty, np.float32(0), rcp(np.where(empty, np.float32(1), total)))
    scaled = fmul(total, np.float32(2.0 ** -max_offset)) if max_offset else total
    empty = (scaled == 0) | np.isnan(scaled)
    lse = ffma(row_max, fmul(scale_log2, LN2_F32),
               fmul(lg2(np.where(empty, np.float32(1), scaled)), LN2_F32))
    return total, fmul(inv, final_scale), np.where(empty, NEG_INF, lse).astype(np.float32)


wrong = try_check("finalize", reversed_butterfly)
assert not wrong.passed and (wrong.where["step"], wrong.where["array"]) == ("finalize", "row_sum")

# %% [markdown]
# ## The reference solutions
#
# Kept in `simulator/exercises/solutions.py`, apart from the exercises. Each passes on every
# recorded case, bit for bit.

# %%
from simulator.exercises import solutions

for p in exercises.PUZZLES.values():
    result = exercises.check(p.number, getattr(solutions, p.name))
    print(result)
    assert result.passed and result.compared > 0

# %%
print(NB.finish())
