"""What the MUFU device sweep records, in a form CI replays without a GPU.

Shared by :mod:`simulator.measure.mufu_calibrate` (on the GPU) and ``tests/test_mufu*.py``.
Recorded device truth in ``simulator/data/device/`` (separate from the calibration tables in
``simulator/data/mufu/``):

* ``mufu_report.json``: provenance and the exhaustive sweep's mismatch counts per form.
* ``mufu_digests.npz``: per form, BLAKE2b-128 of the device's result bits for each chunk of
  2^20 consecutive input bit patterns (4096 chunks cover all 2^32 inputs).
* ``mufu_samples.npz``: per form, the device's results on :func:`sample_inputs` (2^19 uniform
  bit patterns + 2^19 values uniform over the range softmax uses), stored as int8 residuals (ulp)
  against the correctly rounded result plus raw exceptions, with a digest of the raw bits.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from ..numerics.mufu import FORMS as MUFU_FORMS
from ..numerics.mufu_codec import decode_table, encode_table
from .common import digest as _digest

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "device"
REPORT = DATA_DIR / "mufu_report.json"
DIGESTS = DATA_DIR / "mufu_digests.npz"
SAMPLES = DATA_DIR / "mufu_samples.npz"
KERNEL = "probes/mufu.cu"
CHUNK = 1 << 20
N_CHUNKS = (1 << 32) // CHUNK
SAMPLES_PER_FORM = 1 << 20

#: form -> (kernel name prefix in kernels/probes/mufu.cu, what it is, softmax range)
FORMS = {
    "ex2_ftz": ("ex2_ftz", "ex2.approx.ftz.f32", (-30.0, 8.0)),
    "ex2": ("ex2", "ex2.approx.f32", (-30.0, 8.0)),
    "rcp_ftz": ("rcp_ftz", "rcp.approx.ftz.f32", (1.0, 1e6)),
    "rcp": ("rcp", "rcp.approx.f32", (1.0, 1e6)),
    "lg2_ftz": ("lg2_ftz", "lg2.approx.ftz.f32", (1.0, 1e6)),
    "lg2": ("lg2", "lg2.approx.f32", (1.0, 1e6)),
    "tanh": ("tanh_", "tanh.approx.f32", (-10.0, 10.0)),
    "expf_fast": ("expf_fast", "__expf(x), --use_fast_math", (-21.0, 6.0)),
    "logf_fast": ("logf_fast", "__logf(x), --use_fast_math", (1.0, 1e6)),
    "exp2f_fast": ("exp2f_fast", "exp2f(x), --use_fast_math", (-30.0, 8.0)),
    "recip_fast": ("recip_fast", "1.f/x, --use_fast_math", (1.0, 1e6)),
}

#: forms whose SASS is the same single MUFU instruction as another form: the sweep checks them
#: against that form's device results on the GPU (all 2^32 inputs) instead of on the host
SAME_AS = {"exp2f_fast": "ex2_ftz", "recip_fast": "rcp_ftz"}


def reference_bits(form: str, x_bits: np.ndarray) -> np.ndarray:
    """Residual reference for ``form`` (uint32): the same form with ``model="ideal"`` (correctly
    rounded MUFU results inside the same float32 instruction sequence)."""
    return MUFU_FORMS[form](x_bits.view(np.float32), "ideal").view(np.uint32)


def digest(bits: np.ndarray) -> bytes:
    """BLAKE2b-128 of a uint32 array's little-endian bytes (the project's one digest recipe,
    :func:`simulator.replay.common.digest`)."""
    return _digest(np.asarray(bits, dtype=np.uint32))


def _splitmix64(n: int, seed: int) -> np.ndarray:
    z = np.arange(n, dtype=np.uint64) + np.uint64(seed)
    z *= np.uint64(0x9E3779B97F4A7C15)
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z


def sample_inputs(form: str, n: int = SAMPLES_PER_FORM) -> np.ndarray:
    """Deterministic sample inputs (uint32 bit patterns) of ``form``: the first half uniform over
    all bit patterns, the second half uniform over the form's softmax range. Pure integer and
    IEEE float64 arithmetic, so every platform and NumPy version makes the same inputs."""
    seed = int.from_bytes(hashlib.blake2b(form.encode(), digest_size=8).digest(), "little")
    h = _splitmix64(n, seed)
    half = n // 2
    bits = (h[:half] >> np.uint64(32)).astype(np.uint32)
    lo, hi = FORMS[form][2]
    u = (h[half:] >> np.uint64(11)).astype(np.float64) * 2.0**-53
    vals = (lo + (hi - lo) * u).astype(np.float32).view(np.uint32)
    return np.concatenate([bits, vals])


def encode_samples(form: str, x_bits: np.ndarray, device_bits: np.ndarray) -> dict:
    enc = encode_table(device_bits, reference_bits(form, x_bits))
    enc = {f"{form}__{k}": v for k, v in enc.items()}
    enc[f"{form}__digest"] = np.frombuffer(digest(device_bits), dtype=np.uint8)
    return enc


def decode_samples(form: str, samples) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, device result bits) of ``form`` from ``mufu_samples.npz``; checks the digest.

    Raises:
        ValueError: the reconstructed device bits do not match the recorded digest (the
            correctly rounded reference came out differently on this platform).
    """
    x = sample_inputs(form)
    dev = decode_table(samples[f"{form}__res"], samples[f"{form}__exc_idx"],
                       samples[f"{form}__exc_bits"], reference_bits(form, x))
    if digest(dev) != samples[f"{form}__digest"].tobytes():
        raise ValueError(f"{SAMPLES}: {form}: reconstructed device bits fail their digest")
    return x, dev


def chunk_inputs(chunk: int) -> np.ndarray:
    """Bit patterns of digest chunk ``chunk`` (2^20 consecutive patterns)."""
    return np.arange(chunk * CHUNK, (chunk + 1) * CHUNK, dtype=np.uint64).astype(np.uint32)


def edge_chunks(form: str) -> list[int]:
    """Digest chunks holding each form's edges (zero, subnormals, flush and overflow limits,
    1.0, the softmax range, infinity and NaN, both signs), for CI to check."""
    vals = [0.0, 2.0**-149, 2.0**-126, 2.0**-8, 0.5, 1.0, 2.0, 8.0, 126.0, 126.5, 128.0,
            2.0**126, 2.0**127, np.inf]
    chunks = {int(np.float32(s * v).view(np.uint32)) // CHUNK for v in vals for s in (1.0, -1.0)}
    chunks |= {0x7FC00000 // CHUNK, 0xFFFFFFFF // CHUNK}
    return sorted(chunks)


def check_all(quick: bool = False) -> list[dict]:
    """Rows for ``python -m simulator verify``: every form's recorded samples and a set of
    exhaustive-digest chunks (its edges; a subset when ``quick``), against the emulator."""
    from ..io import read_npz
    from ..numerics import mufu
    from .common import row  # noqa: PLC0415

    regen = "python -m simulator calibrate"
    samples, digests = read_npz(SAMPLES, regen), read_npz(DIGESTS, regen)
    rows = []
    for form in FORMS:
        x, dev = decode_samples(form, samples)
        if quick:
            x, dev = x[: 1 << 16], dev[: 1 << 16]
        emu = mufu.FORMS[form](x.view(np.float32)).view(np.uint32)
        rows.append(row(f"{form} recorded samples", x.size, np.count_nonzero(emu != dev)))
        if form in SAME_AS:
            continue
        chunks = edge_chunks(form)[: 2 if quick else None]
        bad = [c for c in chunks
               if digest(mufu.FORMS[form](chunk_inputs(c).view(np.float32)).view(np.uint32))
               != digests[form][c].tobytes()]
        rows.append(row(f"{form} over {len(chunks)} chunks x 2^20 (digests)", len(chunks) * CHUNK,
                        len(bad) * CHUNK,
                        f"chunks with differing digest: {[hex(c) for c in bad]}" if bad else ""))
    return rows
