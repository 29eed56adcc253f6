"""What FlashAttention-3's host code launches for a forward call on sm_90 (its dispatch).

FA3 (``hopper/flash_api.cpp``, ``mha_fwd``) rounds the head dim up to a compiled kernel head dim
(``round_up_headdim``: 64, 96, 128, 192, 256; the extra columns of Q, K and V are zero, as the
bulk tensor copy fills them), treats ``causal`` with ``seqlen_q == 1`` as non-causal, and takes
the tile from ``tile_size_fwd_sm90`` (``hopper/tile_size.h``): kBlockM, kBlockN, MmaPV_is_RS and
IntraWGOverlap per element size, kernel head dim, causal, local and softcap. The mainloop
(``hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp``) adds ``RescaleOBeforeGemm = kHeadDim > 128 and
not FP8 and IntraWGOverlap``. :func:`fa3_dispatch` returns the same choices with the reason for
each, so that a user (or ``python -m simulator run``) can see what runs and why.

MmaPV_is_RS (P from registers or through shared memory) moves data only: it is reported, not
emulated.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: kernel head dims FA3 compiles (hopper/flash_api.cpp, round_up_headdim)
KERNEL_HEAD_DIMS = (64, 96, 128, 192, 256)
MAX_HEAD_DIM = 256
#: head_dim must be a multiple of this (hopper/flash_api.cpp, mha_fwd: "head_size should be a
#: multiple of 8 / 16")
ALIGNMENT = {"bf16": 8, "f16": 8, "e4m3": 16}


@dataclass(frozen=True)
class Dispatch:
    """FA3's launch choices for one call (see :func:`fa3_dispatch`).

    Attributes:
        head_dim: the input's head dim; kernel_head_dim: the compiled one it runs as.
        causal: the causal flag after FA3's seqlen_q == 1 rule.
        kblock_m, kblock_n: tile rows and keys per K/V block.
        mma_pv_is_rs: P from registers (True) or shared memory; no effect on the arithmetic.
        intra_wg_overlap: the overlapped mainloop (schedule "intra_wg_overlap") or not ("plain").
        rescale_o_before_gemm: O rescaled before the P V product of each step.
        reasons: one line per choice, naming the FA3 rule.
        head_dim_v, kernel_head_dim_v: V's head dim and the compiled kHeadDimV (the same as
            the Q/K ones unless V's head dim differs).
    """

    head_dim: int
    kernel_head_dim: int
    causal: bool
    kblock_m: int
    kblock_n: int
    mma_pv_is_rs: bool
    intra_wg_overlap: bool
    rescale_o_before_gemm: bool
    reasons: tuple[str, ...]
    head_dim_v: int = 0
    kernel_head_dim_v: int = 0

    @property
    def schedule(self) -> str:
        return "intra_wg_overlap" if self.intra_wg_overlap else "plain"

    def describe(self) -> str:
        """One line: ``kBlockM x kBlockN 128 x 176, kernel head dim 128, IntraWGOverlap, ...``."""
        flags = [f"kBlockM x kBlockN {self.kblock_m} x {self.kblock_n}",
                 f"kernel head dim {self.kernel_head_dim}"
                 + (f" (input {self.head_dim}, zero-padded)"
                    if self.head_dim != self.kernel_head_dim else "")
                 + (f", V head dim {self.kernel_head_dim_v}"
                    + (f" (input {self.head_dim_v})" if self.head_dim_v != self.kernel_head_dim_v else "")
                    if self.kernel_head_dim_v not in (0, self.kernel_head_dim) else ""),
                 "IntraWGOverlap" if self.intra_wg_overlap else "no IntraWGOverlap",
                 "RescaleOBeforeGemm" if self.rescale_o_before_gemm else "rescale after the PV GEMM",
                 "P from registers" if self.mma_pv_is_rs else "P through shared memory"]
        return ", ".join(flags)


def kernel_head_dim(head_dim: int) -> int:
    """The compiled head dim FA3 runs ``head_dim`` as (``round_up_headdim``, hopper/flash_api.cpp)."""
    for d in KERNEL_HEAD_DIMS:
        if head_dim <= d:
            return d
    raise ValueError(f"head_dim: FlashAttention forward only supports head dimension at most "
                     f"{MAX_HEAD_DIM}, got {head_dim}")


round_up_headdim = kernel_head_dim


def check_head_dim(head_dim: int, fmt: str) -> None:
    """FA3's head-dim checks (``mha_fwd``), with its conditions in the message.

    Raises:
        ValueError: not a positive multiple of 8 (16 for e4m3), or over 256.
    """
    align = ALIGNMENT[fmt]
    if head_dim < 1 or head_dim % align:
        raise ValueError(f"head_dim: FA3 needs head_size to be a multiple of {align} for {fmt} "
                         f"(\"head_size should be a multiple of {align}\"), got {head_dim}")
    if head_dim > MAX_HEAD_DIM:
        raise ValueError(f"head_dim: FlashAttention forward only supports head dimension at most "
                         f"{MAX_HEAD_DIM}, got {head_dim}")


def round_up_headdimv(head_dim_v: int) -> int:
    """``round_up_headdimv`` (hopper/flash_api.cpp)."""
    for d in (64, 96, 128, 192, 256):
        if head_dim_v <= d:
            return d
    return 512


def check_head_dim_v(head_dim: int, head_dim_v: int, fmt: str) -> None:
    """FA3's checks of a V head dim different from Q/K's (``mha_fwd``), with its conditions.

    Raises:
        ValueError: ``head_dim_v`` not a positive multiple of 8 (16 for e4m3); a pair outside
            FA3's ``(128, 192] x (96, 128]`` or ``<= 64 x <= 512``; over 256 in e4m3; or e4m3
            with Q/K head dim <= 64 and V's over 64, which the build compiles no kernel for
            (``run_mha_fwd_constexpr`` falls back to the 64 / 64 kernel, narrower than V).
    """
    align = ALIGNMENT[fmt]
    if isinstance(head_dim_v, bool) or not isinstance(head_dim_v, (int, np.integer)) or \
            head_dim_v < 1 or head_dim_v % align:
        raise ValueError(f"head_dim_v: FA3 needs head_size_v to be a multiple of {align} for {fmt} "
                         f"(\"head_size_v should be a multiple of {align}\"), got {head_dim_v!r}")
    if head_dim_v == head_dim:
        return
    if not ((128 < head_dim <= 192 and 96 < head_dim_v <= 128) or
            (head_dim <= 64 and head_dim_v <= 512)):
        raise ValueError(f"head_dim_v: FA3 supports a V head dim different from Q/K's only for "
                         f"Q/K head dim in (128, 192] with V in (96, 128], or Q/K <= 64 with "
                         f"V <= 512, got head_dim {head_dim}, head_dim_v {head_dim_v}")
    if head_dim_v > 256 and fmt not in ("bf16", "f16"):
        raise ValueError(f"head_dim_v: FA3 requires fp16 or bf16 for a V head dim over 256 "
                         f"(\"HeaddimV > 256 requires fp16 and bf16 data type\"), got {fmt}")
    if fmt == "e4m3" and head_dim <= 64 and head_dim_v > 64:
        raise ValueError(f"head_dim_v: FA3 compiles no e4m3 kernel for Q/K head dim <= 64 with "
                         f"V head dim {head_dim_v} (run_mha_fwd_constexpr, hopper/flash_api.cpp, "
                         "falls back to the 64 / 64 kernel, narrower than V)")


def kernel_head_dims(fmt: str, head_dim: int, head_dim_v: int) -> tuple[int, int]:
    """The compiled (kHeadDim, kHeadDimV) FA3 runs a call as (``run_mha_fwd_constexpr``,
    hopper/flash_api.cpp): ``round_up_headdim`` for both, except on sm_90 Q/K head dim <= 64
    with V over 256 (64, 512) or over 64 (64, 256; not e4m3), and Q/K head dim in
    (128, 192] with V <= 128 (192, 128). Call :func:`check_head_dim_v` first."""
    kd = kernel_head_dim(head_dim)
    if kd == 64 and fmt != "e4m3" and head_dim_v > 64:
        return kd, 512 if head_dim_v > 256 else 256
    if kd == 192 and head_dim_v <= 128:
        return kd, 128
    return kd, kd


def tile_size_fwd_sm90(headdim: int, headdim_v: int, is_causal: bool, is_local: bool,
                       element_size: int = 2, v_colmajor: bool = False,
                       paged_kv_non_tma: bool = False, softcap: bool = False) -> tuple[int, int, bool, bool]:
    """``tile_size_fwd_sm90`` of hopper/tile_size.h, every argument: (kBlockM, kBlockN,
    MmaPV_is_RS, IntraWGOverlap) for the rounded head dims ``headdim`` / ``headdim_v``
    (host code, constexpr: no SASS; the wheel's kernel names show the tiles it compiled)."""
    if element_size == 2:
        if headdim <= 64:
            if headdim_v == 512:
                return 64, 64, False, False
            if headdim_v == 256:
                return 128, 96, True, False
            n128 = is_causal or is_local or paged_kv_non_tma
            return 192, 128 if n128 else 192, n128, True
        if headdim <= 96:
            return 192, 128 if (is_local or paged_kv_non_tma) else 144, False, True
        if headdim <= 128:
            n128 = is_causal or is_local or paged_kv_non_tma
            return 128, 128 if n128 else 176, True, True
        if headdim <= 192:
            n = 96 if (paged_kv_non_tma or is_local) else (128 if headdim_v <= 128 else 112)
            return 128, n, True, True
        return 128, 64 if is_local else 80, True, True
    if headdim <= 64:
        return 192, 160, True, True
    if headdim <= 96:
        return 192, 128, True, True
    if headdim <= 128:
        n = 160 if paged_kv_non_tma else (192 if (v_colmajor or (softcap and is_local)) else 224)
        return 128, n, True, True
    if headdim <= 192:
        return 128, 128 if ((paged_kv_non_tma or softcap) and is_local) else 160, True, True
    return 128, 64 if is_local else 128, True, not paged_kv_non_tma


def fa3_dispatch(fmt: str, head_dim: int, seqlen_q: int, *, causal: bool, local: bool = False,
                 softcap: float = 0.0, head_dim_v: int | None = None) -> Dispatch:
    """FA3's choices for a call (``mha_fwd`` then ``tile_size_fwd_sm90``), with reasons.

    Args:
        fmt: "bf16", "f16" or "e4m3"; head_dim: the input's; seqlen_q: query rows.
        causal: the caller's flag; local: a finite window (after FA3 drops windows that cover
            the whole sequence); softcap: > 0 when on; head_dim_v: V's head dim (default
            head_dim).
    Returns:
        :class:`Dispatch`.
    Raises:
        ValueError: a head dim FA3 refuses (see :func:`check_head_dim`, :func:`check_head_dim_v`).
    """
    check_head_dim(head_dim, fmt)
    dv = head_dim if head_dim_v is None else head_dim_v
    check_head_dim_v(head_dim, dv, fmt)
    kd, kdv = kernel_head_dims(fmt, head_dim, dv)
    reasons = [f"kernel head dim {kd}: round_up_headdim({head_dim}) (hopper/flash_api.cpp)"]
    if dv != head_dim:
        reasons.append(f"kernel V head dim {kdv} for head_dim_v {dv}: run_mha_fwd_constexpr "
                       "(hopper/flash_api.cpp)")
    eff_causal = bool(causal)
    if causal and seqlen_q == 1 and not local:
        eff_causal = False
        reasons.append("causal ignored: seqlen_q == 1 makes it the same as non-causal "
                       "(hopper/flash_api.cpp, mha_fwd)")
    m, n, rs, overlap = tile_size_fwd_sm90(kd, kdv, eff_causal, local, 1 if fmt == "e4m3" else 2,
                                           softcap=softcap > 0)
    hdims = f"hdim {kd}" if kdv == kd else f"hdim {kd}, hdimv {kdv}"
    reasons.append(f"kBlockM {m}, kBlockN {n}, MmaPV_is_RS {rs}, IntraWGOverlap {overlap}: "
                   f"tile_size_fwd_sm90({hdims}, {'fp8' if fmt == 'e4m3' else '16-bit'}, "
                   f"causal {eff_causal}, local {local}, softcap {softcap > 0}) (hopper/tile_size.h)")
    rescale = kd > 128 and fmt != "e4m3" and overlap
    reasons.append(f"RescaleOBeforeGemm {rescale}: kHeadDim > 128 and not FP8 and IntraWGOverlap "
                   "(hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp)")
    return Dispatch(head_dim, kd, eff_causal, m, n, rs, overlap, rescale, tuple(reasons), dv, kdv)


def should_pack_gqa(varlen_q: bool, seqlen_q: int, qhead_per_khead: int, kblock_m: int) -> bool:
    """``should_pack_gqa`` of hopper/heuristics.h: always for varlen queries, else when packing
    the query heads of a kv head fills tiles better: ``sq / round_up(sq, M) < 0.9 *
    sq g / round_up(sq g, M)`` (float32 quotients, compared in float64 as ``0.9`` is a double)."""
    if varlen_q:
        return True

    def round_up(a: int, b: int) -> int:
        return (a + b - 1) // b * b

    nopack = np.float32(seqlen_q) / np.float32(round_up(seqlen_q, kblock_m))
    packed = seqlen_q * qhead_per_khead
    pack = np.float32(packed) / np.float32(round_up(packed, kblock_m))
    return bool(float(nopack) < 0.9 * float(pack))
