"""Tensor-core instruction families of sm_90 and the fused dot-add parameters each one uses.

The parameters were fitted to, and then validated against, H200 outputs recorded by
``python -m simulator.device.mma_probe`` (``simulator/data/device/mma_report.json``):

* f16 / bf16 inputs, f32 accumulate (mma.sync m16n8k16 and wgmma m64nNk16 alike): one fused
  step over K = 16 plus C; terms aligned to E = max(ea + eb, ec) (exponents of the operands,
  a subnormal counting as the format's emin), truncated to 25 bits below 2^E, summed exactly,
  the sum truncated (RZ) to float32; a sum of 2^128 or more gives +-inf.
* e4m3 / e5m2 inputs through wgmma m64nNk32: the same with 13 bits below 2^E and the result
  truncated to 14 significant bits: C itself loses all but 14 bits at every instruction.
* e4m3 / e5m2 through mma.sync m16n8k32 (not used by FlashAttention-3's sm_90 kernels):
  the products are summed first and C is added after with round-to-nearest; how the product
  sum is formed when its terms span many binades is not resolved (see docs/mma.md): the
  model below is exact on narrow-range data and off by an ulp or two on wide-range data.
"""

from __future__ import annotations

from .fused import FusedDotAdd

EMIN = {"bf16": -126, "f16": -14, "e4m3": -6, "e5m2": -14}

_HALF = dict(frac_bits=25, out_bits=24, out_round="rz", product_exponent="sum")
_FP8_WGMMA = dict(frac_bits=13, out_bits=14, out_round="rz", product_exponent="sum")
_FP8_MMA_SYNC = dict(frac_bits=25, out_bits=24, out_round="rz", product_exponent="sum",
                     c_in_sum=False, c_round="rn")

PARAMS: dict[tuple[str, str], FusedDotAdd] = {
    (kind, fmt): FusedDotAdd(emin=EMIN[fmt], **cfg)
    for kind in ("mma_sync", "wgmma")
    for fmt, cfg in (("bf16", _HALF), ("f16", _HALF),
                     ("e4m3", _FP8_WGMMA if kind == "wgmma" else _FP8_MMA_SYNC),
                     ("e5m2", _FP8_WGMMA if kind == "wgmma" else _FP8_MMA_SYNC))
}

#: families whose model reproduced every recorded device output
EXACT = {key for key in PARAMS if key not in {("mma_sync", "e4m3"), ("mma_sync", "e5m2")}}


def params_for(kind: str, fmt: str) -> FusedDotAdd:
    """Fused dot-add parameters of an instruction family.

    Raises:
        ValueError: unknown family, listing the known ones.
    """
    try:
        return PARAMS[(kind, fmt)]
    except KeyError:
        raise ValueError(f"no tensor-core model for {kind} with {fmt} inputs; known: "
                         f"{sorted(PARAMS)}") from None
