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
# # 3. One K/V block, step by step, then the whole loop
#
# The SM90 mainloop (`mma` in FA3's `hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp`) runs the online
# softmax of `hopper/softmax.h` in four phases per K/V block, which docs/forward.md, "One block
# `n`", gives operation by operation: `max_get_scale` (step 4), `online_softmax` (step 5, with
# `scale_apply_exp2`), `rescale_o` (step 7) and, after the loop, `finalize` with the LSE
# ("finalize(final_scale) and epilogue"). Here the emulated kernel records a trace of one
# CTA; we replay the same steps by hand with the public API (`mma.gemm`, `flash.Softmax`,
# `flash.rescale_o`, `nm.convert`) and check that every traced register agrees bit for bit.
# Then we follow one quad through a block.

# %%
# %matplotlib inline
import matplotlib.pyplot as plt
import numpy as np

from simulator import flash, hw, mma, notebook
from simulator import numerics as nm
from simulator.compare import bits

NB = notebook.setup()  # the clock, bf16, static mode under CI (no widgets), ipywidgets
BF16 = NB.bf16


# %%
rng = np.random.default_rng(3)
D, SK, BN = 64, 256, 64
q = (1.5 * rng.standard_normal((1, 64, 1, D))).astype(np.float32).astype(BF16)
k = (1.5 * rng.standard_normal((1, SK, 1, D))).astype(np.float32).astype(BF16)
v = rng.standard_normal((1, SK, 1, D)).astype(np.float32).astype(BF16)
res = flash.forward(q, k, v, kblock_m=64, kblock_n=BN, schedule="plain", trace=[(0, 0, 0)])
events = res.trace.for_cta((0, 0, 0))
for e in events[:6]:
    print(e)
print("...", len(events), "events; K/V blocks visited in the order",
      list(dict.fromkeys(e.n_block for e in events if e.n_block is not None)))

# %% [markdown]
# ## Replaying the trace with the public API
#
# Blocks are visited from the last to the first (FA3's order). For each block: `S = Q K^T` on
# tensor cores (the first k-step adds to `-0.0`, docs/forward.md step 1), the scores as the
# row/column view, `max_get_scale`, `online_softmax`, then (schedule `"plain"`) `rescale_o`
# and `O += P V` with `P` rounded to bf16. Finally `finalize` and one last `rescale_o`.

# %%
Qm = q[0, :, 0]
acc_s_layout = hw.accumulator_layout(f"m64n{BN}k16")
acc_o_layout = hw.accumulator_layout(f"m64n{D}k16")
view = hw.rowcol_view(acc_s_layout)
consts = flash.host_constants(D, None, 0.0)
scale_log2 = consts["scale_log2"]
soft = flash.Softmax((), 2, scale_log2)       # one warpgroup, kNRows = 2
O = np.zeros((64, D), np.float32)
replay = []                                   # (step, n_block, name, array) in trace order


for step, n in enumerate(range(SK // BN - 1, -1, -1)):
    Kn, Vn = k[0, n * BN:(n + 1) * BN, 0], v[0, n * BN:(n + 1) * BN, 0]
    S = mma.gemm(Qm, Kn.T.copy(), np.full((64, BN), -0.0, np.float32),
                 instruction=f"wgmma.m64n{BN}k16.f32.bf16.bf16")
    replay.append(("qk_gemm", n, "acc_s", acc_s_layout.from_matrix(S)))
    scores = hw.Fragment.from_matrix(S, acc_s_layout).rowcol()            # [128, 2, BN/4]
    sc = soft.max_get_scale(scores, is_first=step == 0, check_inf=True)
    replay += [("max_get_scale", n, "row_max", soft.row_max), ("max_get_scale", n, "row_sum",
               soft.row_sum), ("max_get_scale", n, "scores_scale", sc)]
    p = soft.online_softmax(scores, is_first=step == 0, check_inf=True)
    P = hw.Fragment(view.unapply(p), acc_s_layout).to_matrix()
    replay += [("online_softmax", n, "acc_s", acc_s_layout.from_matrix(P)),
               ("online_softmax", n, "row_sum", soft.row_sum)]
    O = flash.rescale_o(O, view.row_values(sc))
    replay.append(("rescale_o", n, "acc_o", acc_o_layout.from_matrix(O)))
    O = mma.gemm(nm.convert(P, "bf16"), Vn.copy(), O, instruction=f"wgmma.m64n{D}k16.f32.bf16.bf16")
    replay.append(("pv_gemm", n, "acc_o", acc_o_layout.from_matrix(O)))
final_scale = soft.finalize()
replay += [("finalize", None, "lse", soft.lse), ("finalize", None, "row_sum", soft.row_sum),
           ("finalize", None, "scores_scale", final_scale)]
O = flash.rescale_o(O, view.row_values(final_scale))
replay.append(("epilogue", None, "acc_o", acc_o_layout.from_matrix(O)))

by_key = {(e.step, e.n_block): e for e in events}
for step_name, n, name, arr in replay:
    traced = by_key[(step_name, n)].data[name][0]          # warpgroup 0
    assert np.array_equal(bits(traced), bits(arr)), (step_name, n, name)
assert np.array_equal(bits(nm.convert(O, "bf16")), bits(res.out[0, :, 0]))
assert np.array_equal(bits(view.row_values(soft.lse)), bits(res.lse[0, 0]))
print(f"{len(replay)} traced arrays replayed: all agree bit for bit, and so do out and LSE")


# %% [markdown]
# ## One quad through one block
#
# Quad 0 of warp 0 (threads 0..3) owns rows 0 (`mi = 0`) and 8 (`mi = 1`). The table shows its
# state after each step of the **second** block visited (`n = 2`), where the running max can
# grow and `scores_scale < 1` appears. What to look for:
#
# * after `max_get_scale`, `row_max` is the same in all four lanes (it was quad-allreduced);
# * after `online_softmax`, `row_sum` differs between the lanes: it is each thread's partial
#   sum, rescaled by `scores_scale`; the quad reduction waits for `finalize` (docs/forward.md
#   step 5: `online_softmax` calls `reduce_sum` with `warp_reduce=false`);
# * after `finalize`, `row_sum` is again the same in all four lanes.

# %%
def quad_state(event, quad=0):
    lines = [f"{event.step:15s} n_block={event.n_block}"]
    for name in ("row_max", "row_sum", "scores_scale", "lse"):
        if name in event.data:
            a = event.data[name][0, 4 * quad:4 * quad + 4]                 # [4 lanes, 2 rows]
            for mrow in range(2):
                vals = "  ".join(f"{x:12.6g}" for x in a[:, mrow])
                lines.append(f"   {name:12s} row {view.row[4 * quad, mrow]:2d}: {vals}")
    if "acc_s" in event.data:
        rcv = view.apply(event.data["acc_s"][0])[4 * quad:4 * quad + 4, 0, :4]
        lines.append("   acc_s row 0, first 4 columns of each lane: "
                     + " | ".join(" ".join(f"{x:.3g}" for x in lane) for lane in rcv))
    return "\n".join(lines)

second = [e for e in events if e.n_block == 2 or e.step == "finalize"]
for e in second:
    if e.step in ("max_get_scale", "online_softmax", "finalize", "qk_gemm"):
        print(quad_state(e))


# %%
def quad_uniform(x):                       # [128, 2] -> are the 4 lanes of every quad equal?
    b = bits(x).reshape(32, 4, 2)
    return np.all(b == b[:, :1])

seen_max = np.full(64, -np.inf, np.float32)
for step, n in enumerate(range(SK // BN - 1, -1, -1)):
    mgs, osm = by_key[("max_get_scale", n)].data, by_key[("online_softmax", n)].data
    S = hw.Fragment(by_key[("qk_gemm", n)].data["acc_s"][0], acc_s_layout).to_matrix()
    seen_max = np.maximum(seen_max, S.max(axis=1))
    assert quad_uniform(mgs["row_max"][0])
    assert np.array_equal(bits(view.row_values(mgs["row_max"][0])), bits(seen_max))
    sc = mgs["scores_scale"][0]
    if step == 0:
        assert np.all(bits(sc) == bits(np.float32(1.0)))
    else:
        prev = by_key[("max_get_scale", n + 1)].data["row_max"][0]
        same = prev == mgs["row_max"][0]
        assert np.all(sc[same] == 1.0) and np.all(sc[~same] < 1.0)
        print(f"block {n}: the max grew in {np.count_nonzero(~same) // 4} of 64 rows")
    assert not quad_uniform(osm["row_sum"][0])          # partial sums until finalize
fin = by_key[("finalize", None)].data
assert quad_uniform(fin["row_sum"][0]) and quad_uniform(fin["lse"][0])

# %% [markdown]
# ## The whole loop: running max, running sum, and the LSE
#
# Left: the running max of rows 0..7 after each block (it only grows). Middle: the quad total
# of the running sum, i.e. `sum exp2((s - m_current) * scale_log2)` so far; it jumps down when
# the max grows (the old sum is rescaled) and up as each block adds its terms. Right: the LSE
# of all 64 rows, emulator against the float64 reference (`LSE = m / sqrt(d) + ln l`:
# docs/forward.md, "Background: one pass over K and V").

# %%
order = list(range(SK // BN - 1, -1, -1))
maxes = np.array([view.row_values(by_key[("max_get_scale", n)].data["row_max"][0]) for n in order])
sums = np.array([view.row_values(hw.quad_allreduce(by_key[("online_softmax", n)].data["row_sum"][0]))
                 for n in order])
ref_out, ref_lse = flash.reference(q, k, v)
lse_err = np.abs(res.lse[0, 0] - ref_lse[0, 0])
print(f"max |LSE - LSE_ref| = {lse_err.max():.2e}; max |O - O_ref| = "
      f"{np.abs(res.out.astype(np.float64) - ref_out).max():.2e}")
assert lse_err.max() < 1e-5
assert np.abs(res.out.astype(np.float64) - ref_out).max() < 2.0**-8 * np.abs(v.astype(float)).max()

fig, axes = plt.subplots(1, 3, figsize=(14, 3.5))
for r in range(8):
    axes[0].plot(range(len(order)), maxes[:, r], "o-", ms=3)
    axes[1].plot(range(len(order)), sums[:, r], "o-", ms=3)
for ax, title in zip(axes[:2], ("row_max (rows 0-7)", "quad total of row_sum (rows 0-7)"), strict=True):
    ax.set_xticks(range(len(order)), [f"n={n}" for n in order])
    ax.set_title(title)
axes[2].plot(ref_lse[0, 0], res.lse[0, 0], ".")
axes[2].set_xlabel("float64 reference LSE")
axes[2].set_ylabel("emulated LSE")
axes[2].set_title(f"LSE, max error {lse_err.max():.1e}")
fig.tight_layout()


# %% [markdown]
# ## Stepping through the trace of a real input
#
# Heat maps of random scores are noise, so the pictures use a structured input: sentence 0 of
# the embedded all-MiniLM-L6-v2 input (`simulator/data/inputs/minilm.npz`, layer 2, head 5,
# 147 tokens), **causal**, with 64 x 64 tiles. Its CTA `m_block = 1` (rows 64..127) visits
# K/V block 1, the diagonal, where the mask sets the keys after each row to -inf (grey
# below), then block 0, where the running max can grow and `scores_scale < 1` rescales O.
# MiniLM's head dim is 32; FA3 has no kernel for it and runs the head-dim-64 kernel with Q, K
# and V zero-padded to 64 columns (`flash.make_config(...).kernel_head_dim`), so the O panels
# (`pv_gemm`, `epilogue`) show 64 columns of which 32..63 are exact zeros: the padding, never
# stored to the output. The score panels are unaffected (zero columns add exact zeros to S).
# With `ipywidgets` installed the slider walks every event; without (CI, a static render) the
# same drawing function shows six of them.

# %%
from simulator.run.workload import EMBEDDED  # noqa: E402

with np.load(EMBEDDED) as z:
    layer = list(z["layers"]).index(int(z["default_layer"]))
    L0 = int(z["seqlens"][0])
    mq, mk, mv = (np.ascontiguousarray(z[f"{x}_bf16"][layer, :1, :L0, 5:6]).view(BF16)
                  for x in "qkv")
CTA = (0, 0, 1)
mini = flash.forward(mq, mk, mv, causal=True, kblock_m=64, kblock_n=64, schedule="plain",
                     trace=[CTA])
mini_events = mini.trace.for_cta(CTA)
print(f"MiniLM sentence 0, head 5: {L0} tokens; CTA {CTA} visits blocks",
      list(dict.fromkeys(e.n_block for e in mini_events if e.n_block is not None)))
ev = {(e.step, e.n_block): e for e in mini_events}
raw = hw.Fragment(ev[("qk_gemm", 1)].data["acc_s"][0], acc_s_layout).to_matrix()
masked = hw.Fragment(ev[("mask", 1)].data["acc_s"][0], acc_s_layout).to_matrix()
rows_g, keys_g = 64 + np.arange(64)[:, None], 64 + np.arange(64)[None, :]
assert np.all(np.isneginf(masked[keys_g > rows_g]))             # the causal mask acts here
assert np.array_equal(bits(masked[keys_g <= rows_g]), bits(raw[keys_g <= rows_g]))
print(f"mask: {np.count_nonzero(keys_g > rows_g)} of {masked.size} scores of block 1 set to -inf")
kernel_d = flash.make_config(mq, mk, mv).kernel_head_dim
last_o = hw.Fragment([e for e in mini_events if "acc_o" in e.data][-1].data["acc_o"][0],
                     acc_o_layout).to_matrix()
assert kernel_d == 64 and mq.shape[-1] == 32 and np.all(last_o[:, 32:] == 0)  # the padding


# %%
def draw_event(i, ax=None, events=mini_events):
    e = events[i]
    ax = ax or plt.subplots(figsize=(6, 3.2))[1]
    if "acc_s" in e.data or "acc_o" in e.data:
        name = "acc_s" if "acc_s" in e.data else "acc_o"
        lay = acc_s_layout if name == "acc_s" else acc_o_layout
        mat = np.ma.masked_invalid(hw.Fragment(e.data[name][0], lay).to_matrix())
        cmap = plt.get_cmap("viridis").with_extremes(bad="0.8")    # -inf (masked) in grey
        im = ax.imshow(mat, aspect="auto", cmap=cmap, interpolation="nearest")
        plt.colorbar(im, ax=ax)
        ax.set_ylabel("row")
        pad = "" if name == "acc_s" or mat.shape[1] == mq.shape[-1] else \
            f" ({mq.shape[-1]}..{mat.shape[1] - 1}: padding, zeros)"
        ax.set_xlabel("key in block" if name == "acc_s" else "column of O" + pad)
    else:                                      # row state: row_max left, the rest right
        handles = ax.plot(view.row_values(e.data["row_max"][0]), "k.", label="row_max (left)")
        ax.set_ylabel("row_max")
        ax2 = ax.twinx()
        for j, name in enumerate(x for x in ("row_sum", "scores_scale", "lse") if x in e.data):
            vals = e.data[name][0]
            if name == "row_sum" and e.step != "finalize":
                vals = hw.quad_allreduce(vals)     # show the quad total of the partial sums
            handles += ax2.plot(view.row_values(vals), "x+1"[j], color=f"C{j}",
                                label=f"{name} (right)")
        ax.set_xlabel("row")
        ax.legend(handles=handles, fontsize=7, loc="upper right")
    ax.set_title(f"event {i}: {e.step}, n_block={e.n_block}", fontsize=9)
    return ax

# the static grid is always drawn (and saved with the notebook); the slider comes on top of it
wanted = [("qk_gemm", 1), ("mask", 1), ("online_softmax", 1), ("max_get_scale", 0),
          ("pv_gemm", 0), ("epilogue", None)]
index = {(e.step, e.n_block): i for i, e in enumerate(mini_events)}
fig, axes = plt.subplots(2, 3, figsize=(15, 6))
for key, ax in zip(wanted, axes.ravel(), strict=True):
    draw_event(index[key], ax)
fig.tight_layout()
plt.show()
if NB.widgets is not None:
    NB.widgets.interact(lambda i: (draw_event(i), plt.show()),
                        i=NB.widgets.IntSlider(min=0, max=len(mini_events) - 1, value=0))

# %%
print(NB.finish())
