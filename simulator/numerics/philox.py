"""Philox4x32 with seven rounds, the counter-based random number generator FlashAttention-2's
dropout draws from, keyed as its kernels key it; and the dropout keep mask it yields.

Philox4x32 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): a
128-bit counter ``(c0, c1, c2, c3)`` and a 64-bit key ``(k0, k1)``; one round is

    hi0:lo0 = 0xD2511F53 * c0,  hi1:lo1 = 0xCD9E8D57 * c2   (32 x 32 -> 64-bit products)
    (c0, c1, c2, c3) <- (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)

and the key is bumped by ``(0x9E3779B9, 0xBB67AE85)`` between rounds. FlashAttention-2 runs
seven rounds, not the usual ten (six in its loop, then the output round; its constants keep the
``kPhilox10`` names): Dao-AILab ``csrc/flash_attn/src/philox.cuh`` (PyTorch's copy in
``aten/src/ATen/native/transformers/cuda/flash_attn/``). The key is the 64-bit seed (low word
``k0``), the counter's low 64 bits the *offset*, its high 64 bits the *subsequence*.

FlashAttention-2's keying (``dropout.h``, ``flash_fwd_kernel.h``): one Philox call per lane per
16 x 32 block of the attention matrix, offset ``philox_offset + (batch * heads + head) * 32 +
lane``, subsequence ``row_block | col_block << 32`` with ``row_block = row // 16`` and
``col_block = col // 32``; its 16 output bytes (little-endian words x, y, z, w) are the lane's
16 scores of that block, in the order :func:`block_positions` gives; a score is kept when its
byte is ``<= floor(p_keep * 255)`` (``set.le.u32.f16x2`` on bytes widened to 16 bits: an
unsigned compare). Because the keying names positions, not threads, the forward and the backward
(any tile shape) draw the same mask.

Vectorised over any shape of counters: NumPy uint64 holds each 32 x 32-bit product exactly.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ROUNDS", "block_positions", "dropout_keep", "keep_threshold", "philox4x32"]

#: six rounds in the loop, then the output round (philox.cuh)
ROUNDS = 7
_MUL_A, _MUL_B = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_BUMP_A, _BUMP_B = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
_LO = np.uint64(0xFFFFFFFF)
_SHIFT = np.uint64(32)


def _mulhilo(a: np.uint64, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``mul.wide.u32``: the high and low 32 bits of the 64-bit product."""
    p = a * b  # both < 2^32: exact in uint64
    return p >> _SHIFT, p & _LO


def philox4x32(seed, offset, subsequence, rounds: int = ROUNDS) -> np.ndarray:
    """Philox4x32 (:data:`ROUNDS` rounds) of FlashAttention-2's ``philox(seed, subsequence,
    offset)``.

    Args:
        seed: the 64-bit key (an int or uint64 array), low word first in the key.
        offset, subsequence: 64-bit counter halves (ints or uint64 arrays, broadcast together):
            the counter is ``(offset lo, offset hi, subsequence lo, subsequence hi)``.
        rounds: FlashAttention-2's seven by default (ten gives Random123's Philox4x32-10).
    Returns:
        uint32 array ``[..., 4]``: the output words x, y, z, w.
    Source: csrc/flash_attn/src/philox.cuh (the round; the key bumped after each of the six
    loop rounds; the output round).
    """
    seed, offset, sub = (np.asarray(x, dtype=np.uint64) for x in (seed, offset, subsequence))
    seed, offset, sub = np.broadcast_arrays(seed, offset, sub)
    c0, c1 = offset & _LO, offset >> _SHIFT
    c2, c3 = sub & _LO, sub >> _SHIFT
    k0, k1 = seed & _LO, seed >> _SHIFT
    for r in range(rounds):
        hi0, lo0 = _mulhilo(_MUL_A, c0)
        hi1, lo1 = _mulhilo(_MUL_B, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        if r < rounds - 1:
            k0, k1 = (k0 + _BUMP_A) & _LO, (k1 + _BUMP_B) & _LO
    return np.stack([c0, c1, c2, c3], axis=-1).astype(np.uint32)


def keep_threshold(p_dropout: float) -> int:
    """``p_dropout_in_uint8_t``: ``uint8(floor(p_keep * 255.0))`` with ``p_keep = 1.f -
    p_dropout`` in float32, the product in double (flash_api.cpp, ``set_params_fprop``)."""
    p_keep = np.float32(1.0) - np.float32(p_dropout)
    return int(np.floor(float(p_keep) * 255.0)) & 0xFF


def block_positions() -> tuple[np.ndarray, np.ndarray]:
    """Where each of a lane's 16 Philox bytes lands in its 16 x 32 block: ``(row, col)``, each
    int ``[32 lanes, 16 bytes]``.

    Byte ``e = 8 j + 4 t + v`` belongs to the m16n8 accumulator tile ``2 j + t`` of the block's
    four, value ``v`` of the lane's four there (rows ``lane // 4`` and ``lane // 4 + 8``, columns
    ``2 (lane % 4)`` and ``+ 1``): the ``((4, 2), MMA_M, MMA_N / 2)`` view of
    ``convert_layout_acc_dropout`` (utils.h) walked as ``apply_dropout`` walks it.
    """
    lane = np.arange(32)[:, None]
    e = np.arange(16)[None, :]
    j, t, v = e // 8, (e // 4) % 2, e % 4
    row = lane // 4 + 8 * (v // 2)
    col = 8 * (2 * j + t) + 2 * (lane % 4) + v % 2
    return np.broadcast_to(row, (32, 16)).copy(), np.broadcast_to(col, (32, 16)).copy()


def dropout_keep(seed: int, offset: int, batch: int, heads: int, seqlen_q: int, seqlen_k: int,
                 p_dropout: float) -> np.ndarray:
    """FlashAttention-2's dropout keep mask for a whole call.

    Args:
        seed, offset: the Philox state the op returns (``philox_seed``, ``philox_offset``;
            PyTorch's ``rng_state`` tensor holds the two as int64).
        batch, heads: the grid's batch and query-head counts (``params.b``, ``params.h``).
        seqlen_q, seqlen_k: the positions to cover (the kernel draws for every 16 x 32 block
            that holds one).
        p_dropout: the probability of dropping.
    Returns:
        bool array ``[batch, heads, seqlen_q, seqlen_k]``: True where the score is kept.
    Source: csrc/flash_attn/src/dropout.h (``Dropout``, ``apply_dropout``), flash_api.cpp.
    """
    threshold = keep_threshold(p_dropout)
    rb, cb = -(-seqlen_q // 16), -(-seqlen_k // 32)
    row, col = block_positions()
    bh = np.arange(batch * heads, dtype=np.uint64)
    lanes = np.arange(32, dtype=np.uint64)
    offs = np.uint64(offset) + bh[:, None] * np.uint64(32) + lanes[None, :]  # [bh, 32]
    sub = (np.arange(rb, dtype=np.uint64)[:, None]
           | (np.arange(cb, dtype=np.uint64)[None, :] << _SHIFT))  # [rb, cb]
    words = philox4x32(np.uint64(seed), offs[:, None, None, :], sub[None, :, :, None])
    rnd = words.view(np.uint8).reshape(batch * heads, rb, cb, 32, 16)  # little-endian bytes
    keep = np.empty((batch * heads, rb * 16, cb * 32), bool)
    rows = np.arange(rb)[:, None, None, None] * 16 + row[None, None]
    cols = np.arange(cb)[None, :, None, None] * 32 + col[None, None]
    keep[:, rows, cols] = rnd <= threshold
    return keep[:, :seqlen_q, :seqlen_k].reshape(batch, heads, seqlen_q, seqlen_k)
