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
# # 5. FP8: Max_offset = 8, the E4M3 range, saturation, the sum correction, underflow
#
# With FP8 inputs, `P` is converted to E4M3 before the `P V` GEMM (docs/forward.md, "FP8:
# Max_offset"; `Softmax<kNRows, Max_offset>` in `hopper/softmax.h`). A
# probability in `[0, 1]` would use only part of E4M3's range, so FA3 computes
# `P' = 2^((s - m) * scale + 8) = 256 P` (`Max_offset = 8`, folded into `max_scaled` with an
# FFMA, docs/forward.md step 5) and undoes the factor in `finalize`: the LSE's sum is
# multiplied by `2^-8` (docs/forward.md, "finalize"), and `O` is divided by the sum of `P'`, in which the 256
# cancels.

# %%
# %matplotlib inline
import matplotlib.pyplot as plt
import ml_dtypes
import numpy as np

from simulator import flash, notebook
from simulator import numerics as nm
from simulator.compare import bits
from simulator.numerics import mufu

NB = notebook.setup()  # the clock, bf16, static mode under CI
E4M3 = ml_dtypes.float8_e4m3fn


# %% [markdown]
# ## E4M3 in numbers
#
# `cvt.rn.satfinite.e4m3x2.f32` (docs/numerics.md): 4 exponent bits (bias 7), 3 mantissa bits,
# no infinities, largest finite value 448 (`0x7e`), NaN `0x7f`; subnormals down to
# `2^-9` (`0x01`). `.satfinite` clamps numbers and infinities to +-448.

# %%
def e4m3_bits(values):
    return bits(nm.convert(np.asarray(values, dtype=np.float32), "e4m3"))

facts = {1.0: 0x38, 256.0: 0x78, 448.0: 0x7E, 2.0**-6: 0x08, 2.0**-9: 0x01,
         2.0**-10: 0x00,                       # the tie between 0 and 2^-9 rounds to even: 0
         2.0**-10 * 1.0001: 0x01, 464.0: 0x7E, 1e6: 0x7E, np.inf: 0x7E, np.nan: 0x7F}
got = e4m3_bits(list(facts))
for (x, want), b in zip(facts.items(), got, strict=True):
    print(f"{x!s:>22} -> 0x{int(b):02x}")
    assert b == want, x

codes = np.arange(0x7F, dtype=np.uint8).view(E4M3)          # 0x00 .. 0x7e, all finite >= 0
values = nm.to_float32(codes)
n_unit, n_256 = int(np.count_nonzero(values <= 1)), int(np.count_nonzero(values <= 256))
print(f"non-negative finite codes: {values.size}; of them <= 1: {n_unit}; <= 256: {n_256}")
assert (n_unit, n_256) == (57, 121)

# %% [markdown]
# ## The kernel's P' on real data
#
# An E4M3 forward with a trace. The histogram shows the values of `P'` (the `online_softmax`
# output, float32, before the conversion) on a log2 scale, and the same values divided by 256
# (what would be converted without the offset), against E4M3's zones: the offset moves the
# whole distribution 8 binades up, out of the flush-to-zero and subnormal zones, and still
# below 448.

# %%
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

# %% [markdown]
# ### How much of the range, and what underflows
#
# The same probabilities, converted with and without the offset (`P = P' * 2^-8`, exact in
# float32): how many E4M3 codes are used, how many elements flush to 0 (E4M3 cannot hold
# anything below `2^-10`, the midpoint to `2^-9`), and how much probability mass those
# zeros carry. Without the offset every `P < 2^-10` vanishes; with it only `P < 2^-18`.

# %%
P_plain = nm.fmul(P, np.float32(2.0**-8))
c_off, c_plain = nm.convert(P, "e4m3"), nm.convert(P_plain, "e4m3")
stats = {}
for name, p, c in (("Max_offset = 8", P, c_off), ("no offset", P_plain, c_plain)):
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

# %% [markdown]
# ### Saturation
#
# With `Max_offset = 8`, `P'` tops out at 256 and never reaches 448: nothing saturates. Had
# the offset been 9, the row max would give `P' = 512`, which `.satfinite` clamps to 448: the
# largest probability of every row would be 12.5% too small.

# %%
assert not np.any(bits(c_off) == 0x7E)
print(f"512 -> 0x{int(e4m3_bits(512.0)):02x} = {float(nm.to_float32(nm.convert(np.float32(512), 'e4m3'))):g}")
assert e4m3_bits(512.0) == 0x7E

# %% [markdown]
# ## The sum correction in finalize
#
# `finalize` reduces `row_sum` (a sum of `P'`, so about 256 times too large) over the quad,
# takes `1 / sum` for `O` (where the 256 cancels), then multiplies the sum by `2^-8` before
# `LSE = row_max * (scale_log2 * ln 2) + ln(sum)` (docs/forward.md, "finalize"). Below the
# traced LSE is recomputed from the traced row state with the public numerics API, bit for
# bit, and compared with the LSE one would get without the correction: off by `8 ln 2`.
# Against float64 the FP8 LSE is less accurate than the bf16 one (notebook 3): the E4M3
# `wgmma` keeps only about 14 significant bits of `S` (docs/mma.md), and that error enters
# the LSE directly.

# %%
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

# %%
print(NB.finish())
