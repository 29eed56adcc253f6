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
# # 6. Edge cases: -inf rows and Check_inf, sum = 0 or NaN, huge logits, softcap
#
# docs/forward.md, "Guards: rows with no key, sums of zero", explains the guards in FA3's
# `hopper/softmax.h`: `Check_inf` replaces a `-inf` row max by 0 before it meets another
# `-inf` (steps 4 and 5), `finalize` turns a sum of 0 or NaN into `inv_sum = 0` and
# `LSE = -inf`. Each guard is shown below with and without
# it, first on `flash.Softmax` directly, then through the whole emulated forward. Then two
# cases that need no guard: huge logits, and softcapping.

# %%
# %matplotlib inline
import matplotlib.pyplot as plt
import numpy as np

from simulator import compare, flash, hw, notebook
from simulator import numerics as nm
from simulator.compare import bits, ulp_distance
from simulator.numerics import mufu

NB = notebook.setup()  # the clock, bf16, static mode under CI
BF16 = NB.bf16


# %% [markdown]
# ## A fully masked row: Check_inf
#
# Row 0 (quad 0, `mi = 0`) of a score tile is `-inf` everywhere. Without `Check_inf`,
# `max_scaled = -inf * scale_log2 = -inf`, and the FFMA computes `-inf * scale - (-inf)` =
# `-inf + inf` = NaN: the whole row of `P` is NaN (`0x7fffffff`). With it, `max_scaled = 0`
# and `P = ex2(-inf) = +0`.

# %%
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

# %% [markdown]
# The NaN guard in `finalize` rescues the LSE, but not `O`: without `Check_inf` the NaN row
# of `P` has already gone through `O += P V`, and `NaN * inv_sum = NaN * 0` is still NaN.
# `Check_inf` is what keeps a masked row's output at 0.
#
# The same guard matters in `max_get_scale` of a later block (docs/forward.md, step 4): if a row has been
# masked in every block so far, `prev = cur = -inf`, and `prev - cur` is NaN unless `cur` is
# replaced by 0.

# %%
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

# %% [markdown]
# ## Through the forward: rows that see no key
#
# Causal attention with `seqlen_q = 96 > seqlen_k = 32` (bottom-right aligned, docs/forward.md):
# query row `i` may see key `j <= i - 64`, so rows 0..63 see nothing. With `kblock_m = 128`
# one CTA holds all 96 rows and visits the single K block, in which rows 0..63 are entirely
# `-inf` (the `Check_inf` path). A second batch has `seqlens_k = 0`: its CTA visits no block
# at all and writes `O = 0`, `LSE = -inf` directly. Both must give `O` = +0.0 exactly.

# %%
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

# %% [markdown]
# ## sum = NaN
#
# A NaN in one query row makes that row's scores NaN. `fmax` lets a number win over NaN
# (docs/numerics.md), but here every score of the row is NaN, so the max, `P` and the sum
# are NaN. `finalize` sets `inv_sum = 0` and `LSE = -inf`, yet `O` is NaN: as above, the
# NaN reached `O` through `P V` before the guard. (`flash.reference`, exact math, returns
# NaN for both `O` and the LSE of such a row; the emulator follows the kernel.)

# %%
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

# %% [markdown]
# ## Huge logits
#
# With `q` and `k` scaled by 40 the scores reach tens of thousands; `exp` of them overflows
# float32 at 88.7. The online softmax never exponentiates a score, only `score - max`
# (docs/forward.md, "Background"), so the kernel is as accurate as with small logits, relative
# to the LSE's size.
#
# One subtlety of the FFMA form (docs/forward.md, step 5): at the row's max element the exponent argument is
# `ffma(m, scale, -fmul(m, scale))`, the *rounding error* of `m * scale`, not 0. For large `m`
# that is up to half an ulp of `m * scale` (`2^-10` near 2^13), so `P` at the max is
# `2^error`, not exactly 1. It is a factor common to the whole row (every element is computed
# against the same `max_scaled`), so it cancels in `O = P V / sum`.

# %%
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

# %% [markdown]
# ## Softcap
#
# `softcap * tanh(s / softcap)` bounds every score to `(-softcap, softcap)`. FA3 folds the
# constants (docs/forward.md): `s' = tanh(s * (softmax_scale / softcap))` on MUFU.TANH, and the
# softmax then uses `scale_log2 = softcap * log2(e)`. So the traced scores after the softcap
# step lie in [-1, 1], and the huge logits above become harmless even before the max is
# subtracted.

# %%
cap = 30.0
rc = flash.forward(qh, kh, vh, kblock_m=64, kblock_n=128, softcap=cap, trace=[(0, 0, 0)])
rc_ideal = flash.forward(qh, kh, vh, kblock_m=64, kblock_n=128, softcap=cap, mufu="ideal")
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
t_id = mufu.tanh(nm.fmul(s_raw, softcap_val, ftz=True), model="ideal")
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

# %%
print(NB.finish())
