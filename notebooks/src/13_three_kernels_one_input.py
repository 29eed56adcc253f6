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
# # 13. One input, four kernels: FA3, flash-attn 2.x, PyTorch's SDPA and FA4, where their bits part
#
# "Should flash equal SDPA?" (Dao-AILab/flash-attention #1831, #1359) and "my batch changes my
# output" (#1897, #1647) are questions about which kernel ran and how it was built. This
# notebook sends one recorded input through the three kernels a Hopper user runs:
#
# * **FA3** (`hopper/`, `simulator.fa3`): wgmma, its own tiles and schedule;
# * **flash-attn 2.x** (`csrc/flash_attn/src/`, `simulator.fa2`): mma.sync, built with
#   `--use_fast_math`, checked bit for bit against PyPI flash-attn-jax 0.6.2 on an H100;
# * **PyTorch's SDPA flash backend** (`simulator.sdpa`): the same FA2 kernels, built by PyTorch
#   with `UNFUSE_FMA` and without fast math, checked against torch 2.11 on an H100.
#
# It shows that the two FA2 builds differ by exactly their compiler flags (switching the three
# rules of [docs/fa2.md](../docs/fa2.md) turns one into the other, bit for bit), that FA3
# differs by its whole kernel, and that FA2's split-KV count (from the batch and the SM count)
# changes a row's bits when only the batch changes.

# %%
# %matplotlib inline
import dataclasses
import math

import matplotlib.pyplot as plt
import numpy as np

from simulator import fa2, fa3, notebook, sdpa
from simulator.flash.forward_fa2 import forward_fa2
from simulator.flash.mainloop_fwd_fa2 import FLASH_ATTN, PYTORCH
from simulator.gpus import mufu_model_name
from simulator.replay import fa2_jax

NB = notebook.setup()
report, sample = fa2_jax.load()
prov = report["provenance"]
print(f"recorded on {prov['gpu']} ({prov['sm_count']} SMs), driver {prov['driver_version']}, "
      f"{prov['build']}")

# %% [markdown]
# ## 1. The input, and the real flash-attn 2.x's bits
#
# Recorded forward call 16 of `simulator/data/device/fa2_jax/`: one head, 65 query rows, 129
# keys, head dim 96, bf16. On 132 SMs FA2's host splits its keys (`num_splits_heuristic`: 2
# CTAs, far under 0.8 x 264), so the split-KV kernel and the combine run.

# %%
rec = next(r for r in report["forward"] if r["index"] == 16)
case = rec["case"]
(q, k, v), dt = fa2_jax._inputs(case)
launch = fa2.plan_forward(1, q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3],
                          causal=case["causal"], gpu="h100")
print(case)
print("FA2 launch:", launch)
device_out, device_lse = sample["c16_out"], sample["c16_lse"]
out_fa2, lse_fa2, _ = fa2.flash_attn_func(q, k, v, softmax_scale=case["scale"],
                                          return_attn_probs=True, gpu="h100")
assert launch.num_splits > 1
assert np.array_equal(out_fa2.view(np.uint16), device_out)
assert np.array_equal(lse_fa2.view(np.uint32), device_lse.view(np.uint32))
print(f"simulator.fa2 = flash-attn-jax on the H100: all {out_fa2.size} O values and "
      f"{lse_fa2.size} LSE values, bit for bit")

# %% [markdown]
# ## 2. The same input through PyTorch's build and through FA3

# %%
t = lambda x: np.ascontiguousarray(np.swapaxes(x, 1, 2))  # noqa: E731  SDPA's layout
out_sdpa, lse_sdpa = sdpa.flash_attention_forward(t(q), t(k), t(v), 0.0, False, case["scale"],
                                                  gpu="h100")
out_sdpa = t(out_sdpa)
out_fa3, lse_fa3 = fa3.flash_attn_func(q, k, v, softmax_scale=case["scale"],
                                       return_attn_probs=True, gpu="h100")


def differ(a, b):
    bits = {2: np.uint16, 4: np.uint32}[a.dtype.itemsize]
    return int((np.ascontiguousarray(a).view(bits) != np.ascontiguousarray(b).view(bits)).sum())


rows = [("flash-attn 2.x vs PyTorch SDPA", out_fa2, lse_fa2, out_sdpa, lse_sdpa),
        ("flash-attn 2.x vs FA3", out_fa2, lse_fa2, out_fa3, lse_fa3),
        ("PyTorch SDPA vs FA3", out_sdpa, lse_sdpa, out_fa3, lse_fa3)]
for name, o1, l1, o2, l2 in rows:
    print(f"{name:32s} O: {differ(o1, o2):5d} of {o1.size} differ   LSE: "
          f"{differ(l1, l2):3d} of {l1.size} differ")
assert all(differ(o1, o2) + differ(l1, l2) > 0 for _, o1, l1, o2, l2 in rows)

# %% [markdown]
# ## 3. The two FA2 builds differ by their flags, and by nothing else
#
# The same kernels compiled two ways (`simulator/flash/mainloop_fwd_fa2.py`):
#
# | rule | flash-attn (`FLASH_ATTN`) | PyTorch (`PYTORCH`) |
# | --- | --- | --- |
# | exp2 argument | one FFMA.FTZ | FMUL.RN then FSUB (`UNFUSE_FMA`) |
# | `1.f / sum` | `rcp.approx.ftz` | IEEE division |
# | the combine's `expf` / `logf` | `__expf` / `__logf`, `logf + max` as one FFMA | libdevice's |
# | subnormals | flushed | kept |
#
# Switching them one at a time walks flash-attn's bits to PyTorch's; with all of them switched
# the two are the same function.

# %%


def fa2_with(build):
    """The FA2 forward of this input under ``build`` (the split kernel, then the combine)."""
    from simulator.fa2.combine import combine_partials

    res = forward_fa2(q, k, v, softmax_scale=1 / math.sqrt(q.shape[-1]), causal=False,
                      num_splits=launch.num_splits, build=build, gpu="h100")
    return combine_partials(res.out, res.lse, launch.kernel_head_dim, "bf16",
                            mufu_model_name("h100"), fast_math=build.fast_math)


steps = [("flash-attn's build", FLASH_ATTN),
         ("+ FMUL then FSUB (UNFUSE_FMA)", dataclasses.replace(FLASH_ATTN, unfuse_fma=True)),
         ("+ IEEE 1/sum", dataclasses.replace(FLASH_ATTN, unfuse_fma=True, rcp_approx=False)),
         ("+ libdevice expf / logf in the combine",
          dataclasses.replace(FLASH_ATTN, unfuse_fma=True, rcp_approx=False, fast_math=False)),
         ("+ subnormals kept (= PyTorch's build)", PYTORCH)]
left = []
for name, build in steps:
    o, lse = fa2_with(build)
    left.append((name, differ(o, out_sdpa), differ(lse, lse_sdpa)))
    print(f"{name:42s} O differs from SDPA in {left[-1][1]:5d}, LSE in {left[-1][2]:3d}")
assert left[0][1:] == (differ(out_fa2, out_sdpa), differ(lse_fa2, lse_sdpa)) != (0, 0)
assert left[-1][1:] == (0, 0)  # the same bits as PyTorch's SDPA

fig, ax = plt.subplots(figsize=(7, 2.6))
names = [n for n, *_ in left][::-1]
y = np.arange(len(names))
ax.barh(y - 0.2, [x for _, x, _ in left][::-1], height=0.4, label="O values")
ax.barh(y + 0.2, [x for _, _, x in left][::-1], height=0.4, label="LSE values")
ax.set_yticks(y, names)
ax.legend()
ax.set_xlabel("values differing from PyTorch SDPA's bits")
ax.set_title("flash-attn 2.x walked to PyTorch's build, one flag at a time")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 4. "My batch changes my output": the split count
#
# FA2's host picks the split-KV count from the CTAs of the launch (batch x heads x m_blocks)
# against twice the SM count: at 0.8 x 2 x SMs CTAs or more it does not split. A decode step
# of this input (its first query row over the 129 keys) is run alone, and as batch entry 0 of
# batches of 100 and 200 (the other entries random), on the H100 (132 SMs) and the H100 PCIe
# (114 SMs).

# %%
rng = np.random.default_rng(0)
q1 = q[:, :1]
seen = []
for batch in (1, 100, 200):
    rest = [rng.standard_normal((batch - 1,) + x.shape[1:]).astype(dt) for x in (q1, k, v)]
    qb, kb, vb = (np.concatenate([x, r]) for x, r in zip((q1, k, v), rest, strict=True))
    for gpu in ("h100", "h100-pcie"):
        splits = fa2.plan_forward(batch, 1, 129, 1, 1, 96, causal=False, gpu=gpu).num_splits
        row = fa2.flash_attn_func(qb, kb, vb, gpu=gpu)[:1]
        seen.append((batch, gpu, splits, row))
alone = {gpu: r for b, gpu, _, r in seen if b == 1}
print("batch  GPU        splits  row 0's O values differing from the batch-1 call")
for batch, gpu, splits, row in seen:
    n = differ(row, alone[gpu])
    print(f"{batch:5d}  {gpu:10s} {splits:6d}  {n} of {row.size}")
    split_alone = next(s for b, g, s, _ in seen if b == 1 and g == gpu)
    if splits == split_alone:
        assert n == 0  # same launch shape per row: same bits
assert any(differ(row, alone[gpu]) > 0 for b, gpu, s, row in seen if b > 1)

# %% [markdown]
# The same row, the same keys: its bits depend on the split count, and the split count on
# the batch beside it and on the GPU's SM count. A row is reproducible only under the same
# launch. `scripts/fa2_split_counts.py` prints the counts for decode and prefill shapes;
# `python -m simulator run --kernel fa2` (or `sdpa`) runs the main job through these kernels
# and says how far their bits are from FA3's.
#
# ## 5. A fourth kernel: FlashAttention-4 on Hopper
#
# FA4's sm90 kernels (`flash_attn.cute`, `simulator.fa4`) are a port of FA3's mainloops that
# CuTe DSL compiles: the algorithm is FA3's, not its bits ([docs/fa4.md](../docs/fa4.md): its
# own tiles, no `.ftz`, the quad sum at offsets 1 then 2, another LSE form). First the
# emulator against flash-attn-4 recorded on the H100, on its recorded call 12 (head dim 96,
# bf16: FA4's 192 x 144 tile); then this notebook's input through FA4 beside the other three.

# %%
from simulator import fa4  # noqa: E402
from simulator.replay import fa4 as fa4_replay  # noqa: E402
from simulator.replay import fa4_cases  # noqa: E402

fa4_report, fa4_sample, _ = fa4_replay.load()
case4 = fa4_cases.forward_cases()[12]
out4, lse4 = fa4_replay.run_case(case4, "h100")
assert np.array_equal(out4, fa4_sample["c12_out"])
assert np.array_equal(lse4.view(np.uint32), fa4_sample["c12_lse"].view(np.uint32))
print(f"simulator.fa4 = flash-attn-4 {fa4_report['provenance']['versions']['flash-attn-4']} on "
      f"the {fa4_report['provenance']['gpu']}: all {out4.size} O values and {lse4.size} LSE "
      "values of call 12, bit for bit")

out_fa4, lse_fa4 = fa4.flash_attn_func(q, k, v, softmax_scale=case["scale"], return_lse=True,
                                       gpu="h100")
rows4 = [("FA4 vs FA3", out_fa4, lse_fa4, out_fa3, lse_fa3),
         ("FA4 vs flash-attn 2.x", out_fa4, lse_fa4, out_fa2, lse_fa2),
         ("FA4 vs PyTorch SDPA", out_fa4, lse_fa4, out_sdpa, lse_sdpa)]
for name, o1, l1, o2, l2 in rows4:
    print(f"{name:32s} O: {differ(o1, o2):5d} of {o1.size} differ   LSE: "
          f"{differ(l1, l2):3d} of {l1.size} differ")
assert differ(out_fa4, out_fa3) + differ(lse_fa4, lse_fa3) > 0

# %% [markdown]
# Four kernels, four sets of bits on one input, each the bits its real build gives: which
# kernel ran (and how it was compiled) is part of the answer to "what does my GPU compute".
# `python -m simulator run --kernel fa4` runs the main job through FA4 and says how far its
# bits are from FA3's.

# %%
print(NB.finish())
