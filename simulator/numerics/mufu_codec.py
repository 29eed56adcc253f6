"""The residual encoding of the MUFU tables and their BLAKE2b-128 checksums.

:mod:`.mufu_data` stores each table as int8 residuals (device - correctly rounded, in ulps)
plus raw exceptions (:func:`encode_table`, :func:`decode_table`) and verifies every decoded or
cached table against the checksums recorded at calibration (:func:`checksum` over all tables,
:func:`table_checksum` per table).
"""

from __future__ import annotations

import hashlib

import numpy as np

#: the decoded tables of one architecture, in checksum order
TABLES = ("ex2_pos", "ex2_neg", "rcp", "lg2_e0", "lg2_em1", "tanh")


def encode_table(device_bits: np.ndarray, ref_bits: np.ndarray) -> dict[str, np.ndarray]:
    """Residual encoding: int8 ``res`` (device - reference, in ulps) plus raw exceptions."""
    res = device_bits.astype(np.int64) - ref_bits.astype(np.int64)
    exc = (res < -127) | (res > 127)
    exc_idx = np.flatnonzero(exc).astype(np.uint32)
    small = np.where(exc, 0, res).astype(np.int8)
    return {"res": small, "exc_idx": exc_idx, "exc_bits": device_bits[exc_idx].astype(np.uint32)}


def decode_table(res: np.ndarray, exc_idx: np.ndarray, exc_bits: np.ndarray,
                 ref_bits: np.ndarray) -> np.ndarray:
    """Inverse of :func:`encode_table`."""
    out = (ref_bits.astype(np.int64) + res).astype(np.uint32)
    out[exc_idx] = exc_bits
    return out


def checksum(tables: dict[str, np.ndarray]) -> str:
    """BLAKE2b-128 (hex) over the reconstructed tables and tanh parameters, in a fixed order."""
    h = hashlib.blake2b(digest_size=16)
    for key in (*TABLES, "tanh_kind", "tanh_shift"):
        a = np.ascontiguousarray(tables[key])
        h.update(key.encode())
        h.update(a.astype(a.dtype.newbyteorder("<")).tobytes())
    return h.hexdigest()


def table_checksum(name: str, table: np.ndarray, tanh_kind=None, tanh_shift=None) -> str:
    """BLAKE2b-128 (hex) of one decoded table (``tanh``: together with its two parameters).

    Recorded per table in ``<arch>.json`` (``table_blake2b``) so that one table can be decoded,
    cached and verified without the others."""
    h = table_hasher(name)
    h.update(little_endian(table))
    return finish_hash(h, name, tanh_kind, tanh_shift)


def table_checksums(tables: dict[str, np.ndarray]) -> dict[str, str]:
    """:func:`table_checksum` of every table of ``tables`` (the dict :func:`.mufu_data.load` returns)."""
    return {n: table_checksum(n, tables[n], tables["tanh_kind"], tables["tanh_shift"])
            for n in TABLES}


def little_endian(a: np.ndarray) -> np.ndarray:
    """``a`` contiguous and little-endian (the byte order the checksums are taken in)."""
    a = np.ascontiguousarray(a)
    return a.astype(a.dtype.newbyteorder("<"), copy=False)


def table_hasher(name: str):
    """A BLAKE2b-128 hash of table ``name``, started with its name (feed it the table's
    :func:`little_endian` bytes, then :func:`finish_hash`)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(name.encode())
    return h


def finish_hash(h, name: str, tanh_kind, tanh_shift) -> str:
    """The hex digest of :func:`table_hasher`'s ``h``, tanh's two parameters added."""
    if name == "tanh":
        for key, a in (("tanh_kind", tanh_kind), ("tanh_shift", tanh_shift)):
            h.update(key.encode())
            h.update(little_endian(np.asarray(a, dtype=np.uint8)))
    return h.hexdigest()
