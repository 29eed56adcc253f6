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
# # 4. exp2 through FFMA and MUFU.EX2: the hardware's error, and what it does to P, O, LSE
#
# FlashAttention-3 computes `exp(x - m)` as `exp2f(x * scale_log2 - max_scaled)`
# (`scale_apply_exp2` in `hopper/softmax.h`; docs/forward.md, step 5, and "How FA3 compiles
# the softmax"), which compiles to one **FFMA** (multiply-add, one rounding) and one
# **MUFU.EX2** (the special function unit's approximate `2^x`). docs/mufu.md describes the
# model measured on the H200 over all 2^32 inputs; `model="ideal"` is the correctly rounded
# `2^x` with the same special cases. Here we measure the error in ulp, look at its structure,
# and follow it into `P`, `O` and the LSE.

# %%
# %matplotlib inline
import matplotlib.pyplot as plt
import numpy as np

from simulator import compare, flash, notebook
from simulator import numerics as nm
from simulator.compare import bits, ulp_distance
from simulator.numerics import mufu

NB = notebook.setup()  # the clock, bf16, static mode under CI
BF16 = NB.bf16


# %% [markdown]
# ## MUFU.EX2 against the correctly rounded 2^x
#
# A dense sweep over the softmax range [-30, 8] plus random float32 in the same range.
# docs/mufu.md states the error is -2..+1 ulp, and -1..+1 for `x >= 0`.

# %%
rng = np.random.default_rng(4)
x = np.concatenate([np.linspace(-30, 8, 1 << 19, dtype=np.float32),
                    rng.uniform(-30, 8, 1 << 19).astype(np.float32)])
hwv, ideal = mufu.ex2(x, model="h200"), mufu.ex2(x, model="ideal")
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

# %% [markdown]
# ### A structural fact: the unit reads |x| as fixed point with 23 fractional bits
#
# docs/mufu.md: the result depends only on the sign and `trunc(|x| * 2^23)`. For `|x|` in
# `[1/4, 1/2)` a float32 has 25 fractional bits, so the two lowest mantissa bits are ignored:
# clearing them never changes the result (an exact check on the bit patterns).

# %%
xs = rng.uniform(0.25, 0.5, 1 << 16).astype(np.float32) * rng.choice([-1, 1], 1 << 16).astype(np.float32)
cleared = (bits(xs) & np.uint32(0xFFFFFFFC)).view(np.float32)
assert np.array_equal(bits(mufu.ex2(xs)), bits(mufu.ex2(cleared)))
ideal_xs, ideal_cleared = mufu.ex2(xs, model="ideal"), mufu.ex2(cleared, model="ideal")
changed_ideal = np.count_nonzero(bits(ideal_xs) != bits(ideal_cleared))
print(f"the correctly rounded 2^x does see those bits: {changed_ideal} of {xs.size} results change")

# %% [markdown]
# ## FFMA: one rounding for `x * scale_log2 - max_scaled`
#
# Writing the argument as `x * scale - max_scaled` lets the compiler emit one FFMA
# (docs/forward.md, "How FA3 compiles the softmax"). Against `FMUL` then `FADD` (two
# roundings), the FFMA result is always within half an ulp of the exact value (computed in
# float64, where the product of two float32 is exact).
# The two-instruction form is much worse *in ulps of the argument* near the row max: there
# the argument is small, but `FMUL` has already rounded `x * scale` at the precision of a
# number near `max * scale`, and the subtraction cancels the leading bits and keeps that error
# (catastrophic cancellation). Those are the elements with `P` near 1, the ones that matter
# most.

# %%
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

# %% [markdown]
# ### What the argument's rounding costs in P
#
# An absolute error `e` in the argument is a relative error `e ln 2` in `2^arg`. Near the row
# max the argument is small and precise, but for a strongly negative argument (a small
# probability) its ulp is `2^-19` at `|arg| ~ 16`: the argument's rounding then dominates the
# MUFU's own 2 ulp. Both are measured below against `exp((s - m) / sqrt(d))` in float64.

# %%
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

# %% [markdown]
# ## Into P, O and the LSE: the same forward with the H200's MUFU and `mufu="ideal"`
#
# Both runs use identical GEMMs and float32 arithmetic; only the MUFU models differ (`ex2`,
# and `rcp`, `lg2` in `finalize`). `compare.diff` gives the bit differences in ulp.
#
# * `P` (the `online_softmax` output) differs exactly by the ex2 error: the argument is the
#   same FFMA in both runs, so at most 2 ulp.
# * `O` is rounded to bf16 (8 significant bits): a 1-2 ulp float32 perturbation almost
#   never crosses a bf16 rounding boundary.
# * The LSE is float32; it moves by at most a few ulp.

# %%
q = (1.5 * rng.standard_normal((1, 128, 2, D))).astype(np.float32).astype(BF16)
k = (1.5 * rng.standard_normal((1, 512, 2, D))).astype(np.float32).astype(BF16)
v = rng.standard_normal((1, 512, 2, D)).astype(np.float32).astype(BF16)
ctas = [(0, h, 0) for h in range(2)]
run = {name: flash.forward(q, k, v, kblock_m=128, kblock_n=128, mufu=m, trace=ctas)
       for name, m in (("h200", None), ("ideal", "ideal"))}

def p_of(tr):
    return np.concatenate([e.data["acc_s"].ravel() for e in tr if e.step == "online_softmax"])

d_p = compare.diff(p_of(run["h200"].trace), p_of(run["ideal"].trace))
d_o = compare.diff(run["h200"].out, run["ideal"].out)
d_l = compare.diff(run["h200"].lse, run["ideal"].lse)
for name, d in (("P (float32)", d_p), ("O (bf16)", d_o), ("LSE (float32)", d_l)):
    print(f"--- {name}\n{d}\n")
assert d_p.max_ulp <= 2 and d_p.nan_mismatch == 0
assert d_o.max_ulp <= 1
assert d_l.max_ulp <= 4
print(compare.first_divergence(run["h200"].trace, run["ideal"].trace,
                               labels=("emulator (sm90 MUFU)", "emulator (ideal)")))

# %%
ref_out, ref_lse = flash.reference(q, k, v)
for a, r in run.items():
    print(f"{a:6s}: max |O - O_ref| {np.abs(r.out.astype(np.float64) - ref_out).max():.3e}, "
          f"max |LSE - LSE_ref| {np.abs(r.lse - ref_lse).max():.3e}")
err_hw = np.abs(run["h200"].lse - ref_lse)
err_id = np.abs(run["ideal"].lse - ref_lse)
assert err_hw.max() < 1e-5 and err_id.max() < 1e-5

fig, axes = plt.subplots(1, 2, figsize=(12, 3.4))
pd = ulp_distance(p_of(run["h200"].trace), p_of(run["ideal"].trace))
vals, counts = np.unique(pd, return_counts=True)
axes[0].bar(vals, counts)
axes[0].set_yscale("log")
axes[0].set_title("P: sm90 - ideal, ulp (all traced elements)")
ld = ulp_distance(run["h200"].lse, run["ideal"].lse).ravel()
vals, counts = np.unique(ld, return_counts=True)
axes[1].bar(vals, counts)
axes[1].set_title("LSE: sm90 - ideal, ulp")
fig.tight_layout()

# %% [markdown]
# ## How much of the output's error is MUFU.EX2's? The error budget
#
# `simulator.budget` (docs/budget.md) answers it for the same inputs (with FA3's tiles): the
# forward runs with
# each hardware approximation alone (every other step exact, in float64) and with each one
# made exact. MUFU.EX2 alone moves O by about 1e-8 of a row's largest value; rounding P to
# bf16 before the PV product and rounding O to bf16 make nearly all of the error.

# %%
from simulator import budget  # noqa: E402

b = budget.budget(q, k, v)
print(b)
assert b.part("ex2").alone_mean < 1e-3 * b.part("p_rounding").alone_mean
assert b.exact_max < 1e-12                        # every approximation exact: float64
budget.plot_budget(b)
plt.show()

# %%
print(NB.finish())
