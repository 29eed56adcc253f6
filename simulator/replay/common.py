"""What every replay and every recorder shares: where the recordings live, the digest of a
block of device bits, and the result row that ``python -m simulator verify`` prints.

A digest is compared with the digest of the emulator's bits for the same inputs, so CI checks
millions of device results exactly from a few hundred kilobytes of recordings.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..io import DEVICE_DATA_DIR

#: ``simulator/data/device``: the committed recordings and their ``MANIFEST.json``
DATA_DIR = DEVICE_DATA_DIR


def digest(bits: np.ndarray) -> bytes:
    """BLAKE2b-128 of an unsigned-integer array's little-endian bytes."""
    return hashlib.blake2b(np.ascontiguousarray(bits).astype(bits.dtype.newbyteorder("<")).tobytes(),
                           digest_size=16).digest()


def row(name: str, cases: int, mismatches: int, detail: str = "") -> dict:
    """One result row of ``verify``: check name, cases compared, mismatching cases, detail."""
    return {"check": name, "cases": int(cases), "mismatches": int(mismatches), "detail": detail}
