"""Tensor-core instruction families and the fused dot-add parameters each one uses, per
parameter set (:data:`PARAMETER_SETS`, named by the GPU records' ``tensor_cores``).

The ``"hopper"`` set (wgmma and mma.sync of Hopper's tensor cores) was fitted to, and then
validated against, H200 outputs recorded by
``python -m simulator measure mma_probe`` (``simulator/data/device/mma_report.json``):

* f16 / bf16 inputs, f32 accumulate (mma.sync m16n8k16 and wgmma m64nNk16 alike): one fused
  step over K = 16 plus C; terms aligned to E = max(ea + eb, ec) (exponents of the operands,
  a subnormal counting as the format's emin), truncated to 25 bits below 2^E, summed exactly,
  the sum truncated (RZ) to float32; a sum of 2^128 or more gives +-inf.
* e4m3 / e5m2 inputs through wgmma m64nNk32: the same with 13 bits below 2^E and the result
  truncated to 14 significant bits: C itself loses all but 14 bits at every instruction.
* e4m3 / e5m2 through mma.sync m16n8k32 (not used by FlashAttention-3's sm_90 kernels): two
  chained f16-style steps of 16 products each, split by byte position in the 4-byte operand
  registers (k % 4 in {0, 1}, then k % 4 in {2, 3}), each the f16 fused dot-add (25 bits, RZ;
  exponents floored at f16's emin, -14), the first from a +0 accumulator; C is added last by a
  separate round-to-nearest float32 add (docs/mma.md, "FP8 through mma.sync").
"""

from __future__ import annotations

from ..gpus import DEFAULT_GPU, get_gpu
from .spec import FusedDotAdd

EMIN = {"bf16": -126, "f16": -14, "e4m3": -6, "e5m2": -14}

_HALF = dict(frac_bits=25, out_bits=24, out_round="rz")
_FP8_WGMMA = dict(frac_bits=13, out_bits=14, out_round="rz")
# K positions of the two steps: bytes 0-1 then bytes 2-3 of every 4-byte fp8x4 register
FP8_MMA_SYNC_STEPS = (tuple(k for k in range(32) if k % 4 < 2), tuple(k for k in range(32) if k % 4 >= 2))
_FP8_MMA_SYNC = dict(frac_bits=25, out_bits=24, out_round="rz",
                     c_in_sum=False, c_round="rn", k_steps=FP8_MMA_SYNC_STEPS)
# the FP8 mma.sync steps behave as f16 ones: operand exponents floored at f16's emin
_EMIN_MMA_SYNC_FP8 = -14

# significant bits of the operand values (hidden bit included): the fast path's clean test
OPERAND_BITS = {"bf16": 8, "f16": 11, "e4m3": 4, "e5m2": 3}

PARAMS: dict[tuple[str, str], FusedDotAdd] = {
    (kind, fmt): FusedDotAdd(emin=_EMIN_MMA_SYNC_FP8 if cfg is _FP8_MMA_SYNC else EMIN[fmt],
                             operand_bits=OPERAND_BITS[fmt], **cfg)
    for kind in ("mma_sync", "wgmma")
    for fmt, cfg in (("bf16", _HALF), ("f16", _HALF),
                     ("e4m3", _FP8_WGMMA if kind == "wgmma" else _FP8_MMA_SYNC),
                     ("e5m2", _FP8_WGMMA if kind == "wgmma" else _FP8_MMA_SYNC))
}

#: families whose model reproduced every recorded device output
EXACT = set(PARAMS)

#: parameter set name (a GPU record's ``tensor_cores``) -> (kind, format) -> parameters. Only
#: Hopper's is measured: an Ampere part accumulates with other widths and k splits, and gets no
#: parameters until they are fitted on one.
PARAMETER_SETS: dict[str, dict[tuple[str, str], FusedDotAdd]] = {"hopper": PARAMS}


def params_for(kind: str, fmt: str, gpu=DEFAULT_GPU) -> FusedDotAdd:
    """Fused dot-add parameters of an instruction family on ``gpu``.

    Args:
        kind: ``"wgmma"`` or ``"mma_sync"``; fmt: the operand format.
        gpu: a key of :data:`simulator.gpus.GPUS` or a record: its ``tensor_cores`` set.
    Raises:
        ValueError: an unknown GPU, a GPU whose tensor cores have no measured parameters, or
            a family the set does not hold, listing the known ones.
    """
    record = get_gpu(gpu)
    params = PARAMETER_SETS.get(record.tensor_cores)
    if params is None:
        raise ValueError(f"gpu: {record.key!r} has no measured tensor-core parameters "
                         f"({record.tensor_cores!r}); known sets: {sorted(PARAMETER_SETS)}")
    try:
        return params[(kind, fmt)]
    except KeyError:
        raise ValueError(f"no tensor-core model for {kind} with {fmt} inputs on {record.key}; "
                         f"known: {sorted(params)}") from None
