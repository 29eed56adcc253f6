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
# # 7. Emulator against the device: recorded H200 traces, and finding a first divergence
#
# The emulator claims to be the H200's forward **bit for bit**, not just close to it. The
# CUDA twin `kernels/fa3_forward.cu`, built with `-DFA_TRACE=1`, stores every thread's state
# after each step of the mainloop (docs/forward.md, "One block `n`": `qk_gemm`, `mask`,
# `max_get_scale`, `online_softmax`, `rescale_o`, `pv_gemm`, then `finalize` and the
# epilogue) for a few chosen CTAs; `simulator.device.forward_trace.decode` turns such a dump
# into a `simulator.trace.Trace` with exactly the emulator's events (docs/kernel.md, "Step
# traces"). `compare.first_divergence(emulator, device)` walks two traces in execution order and names the
# first step, CTA, warpgroup, thread and register where they part.
#
# This notebook
#
# 1. loads the traces recorded on an H200 (and their provenance), replays the emulator on the
#    same inputs and CTAs, and checks that every event and register agrees, and O and the LSE
#    too;
# 2. puts one CTA's steps side by side, device against emulator, for one quad;
# 3. changes **one** emulator setting at a time (the correctly rounded MUFU of
#    `mufu="ideal"`, the FFMA of the exponent split into FMUL + FADD, the other schedule) and
#    lets `first_divergence` find where the H200 and the altered emulator part, and why there;
# 4. runs the kernel live when a GPU is present (CI has none: the recordings stand in).

# %%
# %matplotlib inline
import matplotlib.pyplot as plt
import numpy as np

from simulator import compare, flash, hw, notebook
from simulator import numerics as nm
from simulator.compare import bits, ulp_distance
from simulator.numerics import mufu

NB = notebook.setup()  # the clock, bf16, static mode under CI (no widgets), ipywidgets
BF16 = NB.bf16


# %%
import contextlib
from pathlib import Path

from simulator.device import forward as dev
from simulator.device import forward_trace as ft
from simulator.device import gpu_available, runtime
from simulator.flash import softmax as emu_softmax
from simulator.replay import forward_goldens as fg
from simulator.replay import forward_traces as traces

DATA = Path(ft.__file__).resolve().parents[1] / "data" / "device"
meta, recorded = traces.load_traces(DATA / traces.TRACES_FILE)
prov = meta["provenance"]
print(f"recorded on an {prov['gpu']} (compute capability {prov['compute_capability']}, "
      f"{prov['multiprocessors']} SMs), driver {prov['driver']}, CUDA runtime "
      f"{prov['cuda_runtime']}, NVRTC {prov['nvrtc']}, CuPy {prov['cupy']}, {prov['date_utc']}")
print(f"kernel {prov['kernel']}, sha256 {prov['kernel_sha256']}")
print(f"NVRTC options: {' '.join(prov['nvrtc_options'])}")
# the recording belongs to the kernel source of this checkout, and was clean when recorded
assert prov["kernel_sha256"] == runtime.source_sha256(dev.KERNEL)
assert prov["gpu"].startswith("NVIDIA H") and meta["failures"] == 0
assert [rec["index"] for rec, _ in recorded] == list(range(len(traces.CONFIGS)))

print(f"\n{'configuration':33s} {'dtype':5s} {'schedule':16s} {'mask':6s} {'d':>3s} "
      f"{'M x N':>8s}  traced CTAs (b, h, m_block)      dump [T, slots, words]")
for rec, raw in recorded:
    extra = (f" softcap {rec['softcap']:g}" if rec["softcap"] else "") + (
        " descales" if rec["descales"] else "")
    print(f"{rec['name']:33s} {rec['dtype']:5s} {rec['schedule']:16s} {rec['mask']:6s} "
          f"{rec['head_dim']:3d} {rec['kblock_m']:>3d} x {rec['kblock_n']:<3d}  "
          f"{str([tuple(c) for c in rec['trace']]):32s} {list(raw.shape)}{extra}")

# %% [markdown]
# ## Replaying the emulator on the recorded CTAs
#
# The inputs are not stored: `traces.make_inputs(config)` regenerates them from the recorded seed
# (`simulator.flash.inputs.attention_inputs`, a frozen PCG64 recipe). For each configuration
# we decode the dump, run `flash.forward` with the same arguments and `trace=` the same CTAs,
# and require `first_divergence(...).found is False`: same events in the same order, same
# shapes, same bits in every register of every thread.
#
# The dumps hold registers, so O and the LSE of a traced CTA are read from its `epilogue`
# (`acc_o`, rounded to the output format as the epilogue's store does) and `finalize` (`lse`)
# events and diffed against the emulator's output tensors with `compare.diff`. (When the
# traces were recorded, the GPU also checked the whole O / LSE tensors of the trace build
# against the normal build and the emulator: the `emulator_same_output` and
# `trace_build_same_output` flags.) Batch 1 of `e4m3_none_overlap_descales` has no keys: its
# traced CTA records nothing on either side.

# %%
def cta_out_lse(trace, lcfg, cta):
    """Rows, O (output format) and LSE of one traced CTA, from its epilogue and finalize."""
    last = {e.step: e for e in trace.for_cta(cta) if e.n_block is None}
    lay_o = hw.accumulator_layout(f"m64n{lcfg.head_dim}k16")
    O = lay_o.to_matrix(last["epilogue"].data["acc_o"]).reshape(-1, lcfg.head_dim)
    L = hw.rowcol_view(lay_o).row_values(last["finalize"].data["lse"]).reshape(-1)
    rows = cta[2] * lcfg.kblock_m + np.arange(lcfg.kblock_m)
    keep = rows < lcfg.seqlen_q
    return rows[keep], nm.convert(O[keep], nm.format_of(lcfg.out_dtype).name), L[keep]


runs = {}
print(f"{'configuration':33s} events  registers compared  first_divergence   O of the traced "
      f"CTAs     LSE")
for rec, raw in recorded:
    inputs = traces.make_inputs(rec)
    lcfg = traces.launch_config(rec, inputs)          # the validated configuration of the launch
    ctas = ft.trace_ctas([tuple(c) for c in rec["trace"]])
    device = ft.decode(raw, lcfg, ctas)
    emu = flash.forward(inputs["q"], inputs["k"], inputs["v"], **traces.call_kwargs(rec, inputs))
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

# %% [markdown]
# The traces are the strongest check but cover a few CTAs. The recorded **goldens**
# (`forward_goldens.npz`, same kernel source) hold the device's whole O and LSE tensors for 24
# larger configurations; one of them, diffed against a fresh emulator run:

# %%
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

# %% [markdown]
# ## One CTA side by side, one quad
#
# `bf16_causal_plain` traces CTA `(0, 1, 1)`: query rows 64..127 under a causal mask, so it
# visits K/V block 1 (the diagonal, partly masked) and then block 0. Quad 0 (threads 0..3 of
# warp 0) owns rows 64 and 72 of the sequence (accumulator rows `g = 0` and `g + 8`). Below,
# every event that carries row state, device value on the left and emulator on the right;
# `=` means the float32 bits agree (asserted). The facts of docs/forward.md steps 4 and 5
# show in both columns: `row_max` is the same in the four lanes (quad-allreduced), `scores_scale` is 1 in
# the first block, and `row_sum` stays a per-lane partial sum until `finalize` reduces it.
# Row 64 sees a single key in block 1 (key 64, a column of lane 0), so lanes 1-3 hold a
# partial sum of 0 there; in block 0 its max grows from -4.4 to 62.6 and `scores_scale` is
# 2.3e-4. At `max_get_scale` `row_sum` still holds block 1's sum, **not yet rescaled**:
# `max_get_scale` only computes `scores_scale`. The rescale is fused into the first add of
# `online_softmax` (`row_sum = ffma(scores_scale, row_sum, p[0]) + p[1] + ...`, one FFMA in
# the SASS, docs/forward.md step 5), and the cell after the table checks it on the device's
# bits.

# %%
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
for i, (de, ee) in enumerate(zip(dev_events, emu_events, strict=True)):
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

# %%
# row_sum at max_get_scale is the previous block's sum, unscaled; online_softmax's row_sum is
# ffma(scores_scale, previous sum, p[0]) + p[1] + ... on the device's own registers
steps = [e for e in dev_events if e.step in ("max_get_scale", "online_softmax")]
fused = 0
for e0, e1, e2 in zip(steps, steps[1:], steps[2:], strict=False):
    if (e0.step, e1.step, e2.step) != ("online_softmax", "max_get_scale", "online_softmax"):
        continue
    assert np.array_equal(bits(e1.data["row_sum"]), bits(e0.data["row_sum"]))  # not rescaled
    p_rc = lay_s.to_matrix(e2.data["acc_s"][0])[view.row[:, :, None], view.col[:, None, :]]
    total = nm.ffma(e1.data["scores_scale"][0], e1.data["row_sum"][0], p_rc[..., 0], ftz=True)
    for j in range(1, p_rc.shape[-1]):  # the thread's columns, in order
        total = nm.fadd(total, p_rc[..., j], ftz=True)
    assert np.array_equal(bits(total), bits(e2.data["row_sum"][0]))
    fused += 1
assert fused >= 1
print(f"{fused} later block(s): row_sum unscaled at max_get_scale; online_softmax's row_sum = "
      "ffma(scores_scale, row_sum, p[0]) + p[1] + ... in the device's bits")

# %% [markdown]
# And the fragments: `P` (`acc_s` after the first `online_softmax`, before the conversion to
# bf16) and the final `O` (`acc_o` in the epilogue) of warpgroup 0 as matrices, device,
# emulator, and their difference, which is zero everywhere.

# %%
p_i = next(i for i, e in enumerate(dev_events) if e.step == "online_softmax")
o_i = next(i for i, e in enumerate(dev_events) if e.step == "epilogue")
fig, axes = plt.subplots(2, 3, figsize=(13, 5.5))
for ax_row, (i, name, lay) in zip(axes, ((p_i, "acc_s", lay_s), (o_i, "acc_o", lay_o)), strict=True):
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


# %% [markdown]
# ## Changing one setting: where does the emulator part from the H200?
#
# Agreement is only convincing if a wrong model would **not** agree. We change one thing at a
# time and ask `first_divergence(altered_emulator, device)` for the first event, warpgroup,
# thread (warp, lane, quad) and register that differ (`a` is the altered emulator, `b` the
# H200, in hex and decimal). In `bf16_causal_plain` the events are, in order: `qk_gemm(1)`
# (0), `mask(1)` (1), `max_get_scale(1)` (2), `online_softmax(1)` (3), `rescale_o(1)` (4),
# `pv_gemm(1)` (5), then block 0, `finalize` and `epilogue`.
#
# ### (a) `mufu="ideal"`: correctly rounded MUFU instead of the H200's approximations
#
# `ex2`, `rcp`, `lg2` and `tanh` become correctly rounded (notebook 4 measures the
# difference: -2..+1 ulp for `ex2`).

# %%
def replay(name, **change):
    """The emulator on a recorded configuration, with some arguments changed."""
    r = runs[name]
    inp = r["inputs"]
    kw = {**traces.call_kwargs(r["rec"], inp), **change}
    return flash.forward(inp["q"], inp["k"], inp["v"], **kw)


def profile(a, b):
    """Per event of two traces of the same structure: how many values differ."""
    return [sum(int(np.count_nonzero(bits(x.data[k]) != bits(y.data[k]))) for k in x.data)
            for x, y in zip(a, b, strict=True)]


device0 = run["device"]
ideal = replay("bf16_causal_plain", mufu="ideal")
div_a = compare.first_divergence(ideal.trace, device0, labels=("emulator, mufu='ideal'", "H200"))
print(div_a)
assert div_a.found and not div_a.note
assert (div_a.event_index, div_a.step, div_a.array, div_a.n_block) == (3, "online_softmax", "acc_s", 1)
assert [e.step for e in dev_events[:3]] == ["qk_gemm", "mask", "max_get_scale"]
prof = profile(ideal.trace, device0)
print("\nvalues that differ, per event:", ", ".join(
    e.step + ("" if e.n_block is None else f"({e.n_block})") + f" {c}"
    for e, c in zip(dev_events, prof, strict=True)))
assert prof[:3] == [0, 0, 0] and prof[3] > 0
assert prof[4:6] == [0, 0]        # rescale_o(1) multiplies O = 0; P V sees P rounded to bf16

# %% [markdown]
# **Why event 3 and not earlier.** Events 0-2 contain no MUFU instruction: `Q K^T` runs on the
# tensor cores, the mask is a select, and `max_get_scale` of the **first** block is a row max,
# two shuffles and `scores_scale = 1` (step 4: `Is_first` skips the `exp2f`). The first
# `MUFU.EX2` of the CTA is in `online_softmax` of the first block (`scale_apply_exp2`,
# step 5), so that is where P first differs, in roughly a third of its elements (by one
# float32 ulp), and `row_sum` with it. The next two events still agree: `rescale_o(1)`
# multiplies an O that is still zero, and `pv_gemm(1)` multiplies P **rounded to bf16**, where
# these one-ulp float32 differences vanish. From block 0 on, `scores_scale` (an `ex2`), `O`,
# `finalize` (`rcp`, `lg2`) and the epilogue all differ.
#
# With a softcap the first MUFU instruction comes earlier, `tanh.approx.f32` (MUFU.TANH) right
# after `qk_gemm`:

# %%
div_cap = compare.first_divergence(replay("f16_local_plain_softcap", mufu="ideal").trace,
                                   runs["f16_local_plain_softcap"]["device"],
                                   labels=("emulator, mufu='ideal'", "H200"))
print(div_cap)
assert (div_cap.event_index, div_cap.step, div_cap.array) == (1, "softcap", "acc_s")


# %% [markdown]
# ### (b) The exp2 argument without the FFMA: FMUL + FADD
#
# `exp2f(x * scale - max_scaled)` compiles to **one** FFMA (one rounding) and MUFU.EX2
# (docs/forward.md, "How FA3 compiles the softmax"). Suppose the emulator computed the
# argument as FMUL then FADD (two roundings). We patch the `ffma` that
# `simulator.flash.softmax` uses, only for the score tensor of `scale_apply_exp2` (5-d:
# `[CTAs, warpgroups, 128, 2, N/4]`; the row-state FFMAs keep theirs), inside a context
# manager that puts the original back on exit, as tests/test_device_trace.py does with
# `monkeypatch`.

# %%
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
div_b = compare.first_divergence(split.trace, device0, labels=("emulator, FMUL + FADD", "H200"))
print(div_b)
assert (div_b.event_index, div_b.step, div_b.array, div_b.n_block) == (3, "online_softmax", "acc_s", 1)
# undone for real: the unpatched emulator agrees with the H200 again
assert not compare.first_divergence(replay("bf16_causal_plain").trace, device0).found

# %% [markdown]
# **Why there.** Events 0-2 never evaluate `s * scale - max_scaled` (the only FFMA that
# changed), so they cannot differ. In `online_softmax` the argument is `s * scale` minus a
# number of the same size, the row max times the scale: the subtraction cancels the leading
# bits and exposes the rounding error of the separate FMUL, which FFMA never makes. Rebuilding
# the reported element from the H200's own `mask` and `max_get_scale` registers shows the
# mechanism: the fused argument through `mufu.ex2` reproduces the H200's P everywhere, the
# split argument is off by ulps, and wherever that changes `ex2`'s result P differs (MUFU.EX2
# reads its input in fixed point, notebook 4, so not every changed argument changes P).

# %%
wg, t, (reg,) = div_b.warpgroup, div_b.thread, div_b.position
S = lay_s.to_matrix(dev_events[1].data["acc_s"][wg])               # H200 scores after the mask
row_max = view.row_values(dev_events[2].data["row_max"][wg])       # H200 row max
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

# %% [markdown]
# ### (c) The other schedule
#
# `schedule="intra_wg_overlap"` (FA3's default) delays each block's `P V` until after the next
# block's softmax. The arithmetic of the first block is the same, so events 0-3 agree in every
# bit; then the H200 (plain) records `rescale_o(1)` while the overlapped emulator records the
# next `qk_gemm(0)`: a **structural** divergence, reported as a note.

# %%
div_c = compare.first_divergence(replay("bf16_causal_plain", schedule="intra_wg_overlap").trace,
                                 device0, labels=("emulator, intra_wg_overlap", "H200 (plain)"))
print(div_c)
assert div_c.found and div_c.note and div_c.event_index == 4

# %% [markdown]
# ### The same three changes on every recorded configuration
#
# The rule behind the three answers: the first divergence is the first event that executes the
# changed operation. `ideal` parts at the first MUFU instruction (`softcap` when there is one,
# else the first `online_softmax`); the unfused argument at the first `online_softmax`; the
# other schedule right after the first block's `online_softmax` events (of all traced CTAs of
# the group: the emulator interleaves them step by step, as in `bf16_causal_overlap_2ctas`).

# %%
OTHER = {"plain": "intra_wg_overlap", "intra_wg_overlap": "plain"}
print(f"{'configuration':33s} {'ideal MUFU':22s} {'FMUL + FADD':22s} other schedule")
for name, r in runs.items():
    events = r["device"].events
    first = {}
    for i, e in enumerate(events):
        first.setdefault(e.step, i)
    n_ctas = len(r["device"].ctas())
    after_first_softmax = [i for i, e in enumerate(events) if e.step == "online_softmax"][n_ctas - 1] + 1
    d_ideal = compare.first_divergence(replay(name, mufu="ideal").trace, r["device"])
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

# %% [markdown]
# ## A live run
#
# With a CUDA GPU and CuPy (`pip install -e '.[gpu]'`), the kernel runs here on a fresh case
# that was never recorded, with a trace of two CTAs, and is compared event by event and in O
# and LSE with the emulator. Without one (CI), the recorded H200 traces above are the
# evidence, and the cell says so.

# %%
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


# %% [markdown]
# ## Stepping through the trace
#
# With `ipywidgets` installed (and not under CI), a slider walks the events of
# `bf16_causal_plain`: left the H200's values (fragments as a matrix, row state per row),
# right where the emulator's bits differ, which is nowhere. Without it, a few steps are drawn
# statically.

# %%
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
            axes[0].plot(view.row_values(de.data[k][0]), ".", ms=3, color=f"C{j}", label=k)
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

# the static grid is always drawn (and saved with the notebook); the slider comes on top of it
picks = [1, 2, p_i, o_i]
fig, axes = plt.subplots(len(picks), 2, figsize=(11, 2.6 * len(picks)))
assert sum(draw_step(i, ax_row) for i, ax_row in zip(picks, axes, strict=True)) == 0
fig.tight_layout()
plt.show()
if NB.widgets is not None:
    NB.widgets.interact(lambda i: (draw_step(i), plt.show()),
                        i=NB.widgets.IntSlider(min=0, max=len(dev_events) - 1, value=0))

# %%
print(NB.finish())
