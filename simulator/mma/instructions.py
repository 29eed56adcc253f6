"""Tensor-core instruction table: parameters of the fused dot-add per instruction family."""

from __future__ import annotations

from .fused import FusedDotAdd

# Placeholder until fitted to the H200 probes (see simulator/device/mma_probe.py).
_PARAMS = {
    ("mma_sync", "bf16"): FusedDotAdd(), ("mma_sync", "f16"): FusedDotAdd(),
    ("mma_sync", "e4m3"): FusedDotAdd(frac_bits=13, out_bits=13),
    ("mma_sync", "e5m2"): FusedDotAdd(frac_bits=13, out_bits=13),
    ("wgmma", "bf16"): FusedDotAdd(), ("wgmma", "f16"): FusedDotAdd(),
    ("wgmma", "e4m3"): FusedDotAdd(frac_bits=13, out_bits=13),
    ("wgmma", "e5m2"): FusedDotAdd(frac_bits=13, out_bits=13),
}


def params_for(kind: str, fmt: str) -> FusedDotAdd:
    return _PARAMS[(kind, fmt)]
