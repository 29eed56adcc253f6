"""Bit-exact MUFU (special function unit) approximations of sm_90, and their CUDA-level forms.

PTX instructions (PTX ISA, "Floating Point Instructions": ex2, rcp, lg2, tanh)::

    ex2(x, model, ftz)    ex2.approx{.ftz}.f32    2**x
    rcp(x, model, ftz)    rcp.approx{.ftz}.f32    1/x
    lg2(x, model, ftz)    lg2.approx{.ftz}.f32    log2(x)  (base 2, not ln)
    tanh(x, model)        tanh.approx.f32         (PTX has no .ftz form)

CUDA-level forms under ``--use_fast_math`` (the instruction sequences nvcc/NVRTC 13.0 emit for
sm_90a; SASS in docs/mufu.md)::

    exp2f_fast(x)   exp2f(x)   MUFU.EX2
    expf_fast(x)    __expf(x)  FMUL.FTZ x, 0x3fb8aa3b (log2 e); MUFU.EX2
    logf_fast(x)    __logf(x)  MUFU.LG2; FMUL.FTZ by 0x3f317218 (ln 2)
    recip_fast(x)   1.f / x    MUFU.RCP

``model=`` names the MUFU model: a GPU of :mod:`simulator.gpus` (``"h200"``, the default,
``"h100"``, ...) emulates that chip bit for bit from the calibrated tables its record names,
measured by ``python -m simulator calibrate`` (``simulator/data/mufu/``; exhaustive device
evidence in ``simulator/data/device/mufu_report.json``); ``model="ideal"`` gives correctly
rounded results (:mod:`.mufu_ideal`) with the same special values and ``.ftz`` handling, to show
what the approximation costs.

Models (structure measured on the H200; see docs/mufu.md):

* The MUFU unit itself always flushes: a subnormal input reads as zero of the same sign and a
  subnormal result is written as zero. The non-``.ftz`` PTX forms are instruction sequences
  around it that ptxas emits for sm_90, emulated with the bit-exact :mod:`.float32` ops:
  ``ex2``: for ``x < -126``, ``r = MUFU.EX2(x * 0.5); r * r``;
  ``rcp``: ``s * MUFU.RCP(x * s)`` with ``s = 2^24`` for ``|x| < 2^-126``, ``0.25`` for
  ``|x| > 2^126``, else 1; ``lg2``: for ``|x| < 2^-126``, ``MUFU.LG2(x * 2^24) + (-24)``.
* MUFU.EX2: ``|x|`` is truncated to fixed point with 23 fractional bits, ``|x| = i + k 2^-23``;
  the result is ``2^i * ex2_pos[k]`` for x >= 0 and ``2^-i * ex2_neg[k]`` for x < 0.
* MUFU.RCP: ``rcp(+-m 2^e) = +-2^-e * rcp[mantissa bits]``.
* MUFU.LG2: for ``x = m 2^e``, exponents 0 and -1 read the tables ``lg2_e0``, ``lg2_em1``;
  every other exponent gives ``RZ(e + L)``, where L is the unit's internal log2(m), of which the
  two tables determine everything that matters: ``floor(L * 2^23)`` and whether L has bits below
  2^-23 (a sticky bit). RZ = rounding toward zero to float32.
* MUFU.TANH: odd; ``tanh(x) = x`` for ``|x| < 2^-8`` (subnormals included), ``+-1`` for
  ``|x| >= 8``; in between a table over ``|x|`` with the low 2..6 mantissa bits ignored (the
  count depends on the binade and is part of the calibrated data).

Every function takes a float32 array (or numpy.float32 scalar) of any shape and returns a new
float32 array of the same shape; NaN results are the canonical 0x7fffffff. Each is a thin
wrapper around :func:`model` (``model(name).ex2(x, ftz)``...): the name is resolved once per
process, and its tables are loaded by the first function that needs them.
"""

from __future__ import annotations

import functools
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import gpus
from . import mufu_data
from .bits import CANONICAL_NAN_BITS, SIGN_MASK, from_bits, require_bool, require_float32
from .float32 import fadd, fmul
from .mufu_ideal import ideal_ex2, ideal_lg2, ideal_rcp, ideal_tanh

IDEAL = gpus.IDEAL
LOG2E_F32 = np.uint32(0x3FB8AA3B).view(np.float32)  # 1.44269502f, the FMUL constant of __expf
LN2_F32 = np.uint32(0x3F317218).view(np.float32)  # 0.693147182f, the FMUL constant of __logf
_MANT = np.uint32(0x7FFFFF)
_INF = np.uint32(0x7F800000)
_NEG_INF = np.uint32(0xFF800000)
_ONE = np.uint32(0x3F800000)
_EX2_CHUNK = 1 << 15  # elements per pass of MUFU.EX2's emulation

MufuDataError = mufu_data.MufuDataError


def model_names() -> list[str]:
    """The names ``model=`` accepts: ``'ideal'`` plus every GPU of :mod:`simulator.gpus`."""
    return [IDEAL, *gpus.gpu_keys()]


def _table_set(name) -> str:
    """The calibrated table set of MUFU model ``name`` (a GPU key or record), or ``"ideal"``."""
    if isinstance(name, str) and name == IDEAL:
        return IDEAL
    if not isinstance(name, (str, gpus.GPU)):
        raise ValueError(f"model: expected a string, one of {model_names()}, got {name!r}")
    try:
        record = gpus.get_gpu(name, "model")
    except ValueError:
        raise ValueError(f"model: unknown MUFU model {name!r}: expected {IDEAL!r} or a GPU of "
                         f"simulator.gpus, one of {gpus.gpu_keys()}") from None
    tables = record.mufu_tables
    # a record's table set with missing files passes: loading it raises MufuDataError saying which
    if tables not in mufu_data.available_archs() and tables not in mufu_data.expected_archs():
        raise ValueError(f"model: the MUFU tables {tables!r} of GPU {record.key!r} are not in "
                         f"{mufu_data.search_dirs()}; calibrate them with {mufu_data.REGENERATE}")
    return tables


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint32)


def _nan_fix(x: np.ndarray, out_bits: np.ndarray) -> np.ndarray:
    np.putmask(out_bits, np.isnan(x), CANONICAL_NAN_BITS)
    return out_bits


_MODEL_LOCK = threading.Lock()  # one MufuModel per table set, also for threads that ask together
_LOAD_LOCK = threading.Lock()
# the MUFU.EX2 tables the models have loaded, by id (weakly: a cleared model's table goes)
_MODEL_EX2_TABLES: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def is_model_ex2_table(table) -> bool:
    """Whether ``table`` is the MUFU.EX2 table a :class:`MufuModel` of this process loaded
    (:meth:`MufuModel.ex2_table`): verified against its recorded checksums and read-only for
    good, so that a compiled twin may derive a form of it once and keep it."""
    return _MODEL_EX2_TABLES.get(id(table)) is table


def _prep(x, name="x"):
    x = require_float32(name, x)
    return x, np.ascontiguousarray(x.reshape(-1))


class MufuModel:
    """The MUFU forms of one calibrated table set, or the correctly rounded ones, resolved once
    (see :func:`model`).

    ``tables == "ideal"``: the correctly rounded functions of :mod:`.mufu_ideal`. A calibrated
    table set: the device tables, each loaded (decoded, or read from the cache and verified)
    the first time a function that needs it runs, so a forward that only runs ex2, rcp and lg2
    never loads the tanh table. GPUs whose records name one table set share one model. Methods
    take what the module functions take (float32 array of any shape, or numpy.float32) and
    return a new float32 array of that shape.
    """

    def __init__(self, tables: str):
        self.tables = tables
        self.ideal = tables == IDEAL

    def __repr__(self) -> str:
        return f"MufuModel({self.tables!r})"

    # ---- tables, loaded on first use -------------------------------------------------------
    @functools.cached_property
    def _ex2c(self) -> np.ndarray:
        with _LOAD_LOCK:  # threads that miss together load the 64 MB table once
            table = self.__dict__.get("_ex2c")
            if table is None:
                table = mufu_data.ex2_table(self.tables)
                _MODEL_EX2_TABLES[id(table)] = table
            return table

    @functools.cached_property
    def _ex2_no_flush(self) -> np.float32:
        # for x >= this bound every result is >= 2^-126: floor(x) >= -N and the smallest entry
        # plus (-N << 23) stays a normal bit pattern, so the flush test can be skipped
        n = (int(self._ex2c.min()) - 0x00800000) >> 23
        return np.float32(-n)

    @functools.cached_property
    def _rcp_table(self) -> np.ndarray:
        return mufu_data.tables(self.tables, ("rcp",))["rcp"]

    @functools.cached_property
    def _lg2_tables(self) -> tuple[np.ndarray, np.ndarray]:
        t = mufu_data.tables(self.tables, ("lg2_e0", "lg2_em1"))
        return t["lg2_e0"], t["lg2_em1"]

    @functools.cached_property
    def _tanh_tables(self) -> dict:
        t = mufu_data.tables(self.tables, ("tanh",))
        kind = t["tanh_kind"].astype(np.uint8)
        shift = t["tanh_shift"].astype(np.uint32)
        sizes = np.where(kind == mufu_data.TANH_TABLE, 1 << (23 - shift.astype(np.int64)), 0)
        offset = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.uint32)
        return {"tanh": t["tanh"], "kind": kind, "shift": shift, "offset": offset}

    def ex2_table(self) -> np.ndarray | None:
        """MUFU.EX2's verified table in the emulation's layout (int32, 2^24 entries,
        read-only; :func:`simulator.numerics.mufu_data.ex2_table`), loaded on first use, for
        compiled twins of :meth:`ex2` (``simulator.engine``); None for ``"ideal"``.

        Raises:
            MufuDataError: as :func:`ex2`.
        """
        return None if self.ideal else self._ex2c

    _TABLES_OF = {"ex2": ("_ex2c", "_ex2_no_flush"), "rcp": ("_rcp_table",),
                  "lg2": ("_lg2_tables",), "tanh": ("_tanh_tables",)}

    def resolve(self, functions=("ex2", "rcp", "lg2", "tanh")) -> MufuModel:
        """Load the tables of ``functions`` now (all by default: before forking worker
        processes, say; the forward uses ``("ex2", "rcp", "lg2")``); returns ``self``.

        Raises:
            ValueError: a name is not one of ex2, rcp, lg2, tanh.
            MufuDataError: as :func:`ex2`.
        """
        names = (functions,) if isinstance(functions, str) else tuple(functions)
        unknown = [f for f in names if f not in self._TABLES_OF]
        if unknown:
            raise ValueError(f"functions: expected names from {sorted(self._TABLES_OF)}, "
                             f"got {unknown}")
        names = tuple(dict.fromkeys(names))  # a name given twice: one loader (they would race)
        if not self.ideal:
            stop = threading.Event()

            def load(f: str) -> None:
                token = mufu_data.DECODE_STOP.set(stop)
                try:
                    for attr in self._TABLES_OF[f]:
                        getattr(self, attr)
                finally:
                    mufu_data.DECODE_STOP.reset(token)

            # one thread per function: one table's hashing and cache write (which release the
            # GIL) overlap another's decoding; a cold resolve of ex2, rcp and lg2 measured
            # 0.9-1.2 s this way against 1.1-2.0 s one function after the other (2 cores)
            with ThreadPoolExecutor(max(1, len(names))) as pool:
                futures = [pool.submit(load, f) for f in names]
                try:
                    for fut in futures:
                        fut.result()  # re-raises a loader's exception (the first in name order)
                except BaseException:
                    # a loader's error, or Ctrl-C here: the other loaders' decodes stop after
                    # their chunks in progress instead of running on (the pool waits for them)
                    stop.set()
                    raise
        return self

    # ---- MUFU cores (always .ftz), on 1-D contiguous float32 -------------------------------
    def _ex2_core(self, x: np.ndarray) -> np.ndarray:
        # Sign-magnitude truncation to 23 fractional bits, then a two's complement split of the
        # signed fixed-point value f = trunc(x * 2^23): hi = f & ~(2^23 - 1) is
        # (floor(f/2^23)) << 23, which added to a float32 bit pattern scales it by
        # 2^floor(f/2^23); the table holds, at [lo | sign << 23], the device result for the
        # matching fraction with the floor/trunc difference folded in (mufu_data.ex2_table).
        n = x.size
        if n == 0:
            return np.empty(0, dtype=np.uint32)
        table = self._ex2c
        lo, hi_x = x.min(), x.max()  # NaN in x makes both NaN
        in_range = bool(lo >= np.float32(-130.0)) and bool(hi_x <= np.float32(128.0))
        g = x
        if not in_range:  # NaN -> 128 (fixed at the end), +-inf and |x| huge clamped
            g = np.fmin(x, np.float32(128.0))
            np.fmax(g, np.float32(-130.0), out=g)
        out = np.empty(n, dtype=np.int32)
        step = min(n, _EX2_CHUNK)  # the temporaries of a chunk stay in the core's cache
        f = np.empty(step, dtype=np.int32)
        hi = np.empty(step, dtype=np.int32)
        idx = np.empty(step, dtype=np.intp)
        for s in range(0, n, step):
            e = min(s + step, n)
            fc, hc, ic, r = f[:e - s], hi[:e - s], idx[:e - s], out[s:e]
            np.multiply(g[s:e], np.float32(2.0**23), out=fc, casting="unsafe")  # trunc to int
            np.bitwise_and(fc, np.int32(~0x7FFFFF), out=hc)
            fc ^= hc  # the fraction bits
            np.right_shift(hc, 8, out=ic)
            ic &= 0x800000  # sign of the fixed-point value
            ic |= fc
            table.take(ic, out=r)  # idx < 2^24 by construction
            r += hc  # exponent field += floor(f / 2^23); x = 128 gives exactly +inf
        r = out
        if not (in_range and lo >= self._ex2_no_flush):
            low = r < np.int32(0x00800000)  # below 2^-126 (or wrapped below zero): flushed
            if low.any():
                r[low] = 0
        r = r.view(np.uint32)
        if not in_range:
            nan = np.isnan(x)
            if nan.any():
                r[nan] = CANONICAL_NAN_BITS
        return r

    def _rcp_core(self, x: np.ndarray) -> np.ndarray:
        u = _bits(x)
        e = (u >> np.uint32(23)) & np.uint32(0xFF)
        r = self._rcp_table.take(u & _MANT).view(np.int32)
        r = r + ((np.int32(127) - e.view(np.int32)) << np.int32(23))
        r = r.view(np.uint32)
        np.putmask(r, r.view(np.int32) < 0x00800000, np.uint32(0))  # subnormal result: flushed
        np.putmask(r, e == 0, _INF)  # +-0 and subnormal inputs (read as zero)
        np.putmask(r, e == 0xFF, np.uint32(0))  # +-inf -> +-0 (NaN fixed below)
        r |= u & SIGN_MASK
        return _nan_fix(x, r)

    def _lg2_core(self, x: np.ndarray) -> np.ndarray:
        e0_table, em1_table = self._lg2_tables
        u = _bits(x)
        e = ((u >> np.uint32(23)) & np.uint32(0xFF)).view(np.int32) - np.int32(127)
        j = u & _MANT
        # L rounded to odd at 2^-24 (exact in float64): floor(A 2^23) 2^-23 plus a sticky
        # 2^-24 when A has bits below 2^-23 or C != A (A = lg2_e0[j], C = 1 + lg2_em1[j])
        a = e0_table.take(j).view(np.float32).astype(np.float64)
        c = em1_table.take(j).view(np.float32).astype(np.float64)
        c += 1.0  # exact
        a23 = a * 2.0**23
        floor23 = np.floor(a23)
        sticky = (a23 != floor23) | (c != a)
        v = (floor23 * 2.0 + sticky) * 2.0**-24
        v += e
        b = v.view(np.uint64)
        b &= np.uint64(0xFFFF_FFFF_E000_0000)  # RZ to 24 significant bits (|v| >= 1 here)
        r = v.astype(np.float32).view(np.uint32)
        e0 = e == 0
        if e0.any():
            r[e0] = e0_table[j[e0]]
        em1 = e == -1
        if em1.any():
            r[em1] = em1_table[j[em1]]
        np.putmask(r, e == -127, _NEG_INF)  # +-0 and subnormals (read as zero)
        np.putmask(r, e == 128, _INF)  # +inf (NaN and -inf fixed below)
        np.putmask(r, (u > SIGN_MASK) & (e != -127), CANONICAL_NAN_BITS)  # x < 0
        return _nan_fix(x, r)

    def _tanh_core(self, x: np.ndarray) -> np.ndarray:
        m = self._tanh_tables
        u = _bits(x)
        a = u & ~SIGN_MASK
        e = a >> np.uint32(23)
        kind = m["kind"].take(e)
        r = a.copy()  # identity binades
        t = kind == mufu_data.TANH_TABLE
        if t.any():
            et, at = e[t], a[t]
            idx = m["offset"].take(et) + ((at & _MANT) >> m["shift"].take(et))
            r[t] = m["tanh"].take(idx)
        np.putmask(r, kind == mufu_data.TANH_ONE, _ONE)
        np.putmask(r, a == _INF, _ONE)
        r |= u & SIGN_MASK
        return _nan_fix(x, r)

    # ---- PTX instructions --------------------------------------------------------------------
    def ex2(self, x, ftz: bool = True) -> np.ndarray:
        """``ex2.approx{.ftz}.f32`` of this model; arguments, result and errors as :func:`ex2`."""
        x, flat = _prep(x)
        ftz = require_bool("ftz", ftz)
        if self.ideal:
            return ideal_ex2(x, ftz=ftz)
        r = self._ex2_core(flat)
        if not ftz:
            low = flat < np.float32(-126.0)
            if low.any():
                h = from_bits(self._ex2_core(fmul(flat[low], np.float32(0.5))))
                r[low] = fmul(h, h).view(np.uint32)
        return r.view(np.float32).reshape(x.shape)

    def rcp(self, x, ftz: bool = True) -> np.ndarray:
        """``rcp.approx{.ftz}.f32`` of this model; arguments, result and errors as :func:`rcp`."""
        x, flat = _prep(x)
        ftz = require_bool("ftz", ftz)
        if self.ideal:
            return ideal_rcp(x, ftz=ftz)
        r = self._rcp_core(flat)
        if not ftz:
            a = np.abs(flat)
            small = a < np.float32(2.0**-126)
            large = a > np.float32(2.0**126)
            sel = small | large
            if sel.any():
                s = np.where(small[sel], np.float32(2.0**24), np.float32(0.25))
                core = from_bits(self._rcp_core(fmul(flat[sel], s)))
                r[sel] = fmul(s, core).view(np.uint32)
        return r.view(np.float32).reshape(x.shape)

    def lg2(self, x, ftz: bool = True) -> np.ndarray:
        """``lg2.approx{.ftz}.f32`` of this model; arguments, result and errors as :func:`lg2`."""
        x, flat = _prep(x)
        ftz = require_bool("ftz", ftz)
        if self.ideal:
            return ideal_lg2(x, ftz=ftz)
        r = self._lg2_core(flat)
        if not ftz:
            sel = np.abs(flat) < np.float32(2.0**-126)
            if sel.any():
                core = from_bits(self._lg2_core(fmul(flat[sel], np.float32(2.0**24))))
                r[sel] = fadd(core, np.float32(-24.0)).view(np.uint32)
        return r.view(np.float32).reshape(x.shape)

    def tanh(self, x) -> np.ndarray:
        """``tanh.approx.f32`` of this model; arguments, result and errors as :func:`tanh`."""
        x, flat = _prep(x)
        if self.ideal:
            return ideal_tanh(x, ftz=False)
        return self._tanh_core(flat).view(np.float32).reshape(x.shape)


def model(name=gpus.DEFAULT_GPU) -> MufuModel:
    """The :class:`MufuModel` of ``name``, one per process and table set: the name is checked
    here, once, and its tables are loaded by the first function that needs them.

    Args:
        name: a GPU of :mod:`simulator.gpus` (key or record: the calibrated tables it names;
            default the H200's) or ``"ideal"`` (correctly rounded).
    Raises:
        ValueError: ``name`` is not a string or GPU record, or names no GPU (the message lists
            the known ones), or the GPU's tables are not installed.
    """
    tables = _table_set(name)  # before the cache, which needs a hashable key
    with _MODEL_LOCK:
        return _resolved_model(tables)


@functools.lru_cache(maxsize=8)
def _resolved_model(tables: str) -> MufuModel:
    return MufuModel(tables)


_model = model  # the module functions' parameter is named model too


def clear_models() -> None:
    """Forget the models resolved so far (after the data folders or the cache changed)."""
    _resolved_model.cache_clear()


def ex2(x, model: str = gpus.DEFAULT_GPU, ftz: bool = True) -> np.ndarray:
    """``ex2.approx{.ftz}.f32``: 2**x as the sm_90 MUFU.EX2 computes it.

    Args:
        x: float32 array (any shape) or numpy.float32.
        model: the MUFU model: a GPU of :mod:`simulator.gpus` (its calibrated tables; default
            the H200) or ``"ideal"`` (correctly rounded); see :func:`model_names`.
        ftz: True for ``.ftz`` (MUFU.EX2 alone). False adds the sm_90 subnormal fix-up
            (``x < -126``: ``r = MUFU.EX2(x/2)``, result ``r*r`` rounded to nearest, so results
            down to 2^-149 survive).
    Returns:
        float32 array of ``x``'s shape. Error vs correctly rounded: -2..+1 ulp (H200).
    Raises:
        TypeError: ``x`` is not float32 (or is an ndarray subclass), or ``ftz`` is not a bool.
        ValueError: unknown ``model``.
        MufuDataError: the calibrated tables are missing or fail their checksum.
    Source: PTX ISA "ex2"; device evidence simulator/data/device/mufu_report.json.
    """
    x = require_float32("x", x)
    ftz = require_bool("ftz", ftz)
    return _model(model).ex2(x, ftz)


def rcp(x, model: str = gpus.DEFAULT_GPU, ftz: bool = True) -> np.ndarray:
    """``rcp.approx{.ftz}.f32``: 1/x as the sm_90 MUFU.RCP computes it.

    Args:
        x: float32 array (any shape) or numpy.float32.
        model: a GPU key (its calibrated tables) or ``"ideal"``, as for :func:`ex2`.
        ftz: True for ``.ftz`` (MUFU.RCP alone; subnormal x gives +-inf, |x| > 2^126 gives
            +-0 or a flushed result). False: ``s * MUFU.RCP(x * s)`` with the scale ``s`` of the
            sm_90 sequence (2^24 for subnormal x, 0.25 for |x| > 2^126), both FMULs rounded.
    Returns:
        float32 array of ``x``'s shape. Error vs correctly rounded: -1..+1 ulp (H200).
    Raises:
        TypeError, ValueError, MufuDataError: as :func:`ex2`.
    Source: PTX ISA "rcp"; simulator/data/device/mufu_report.json.
    """
    x = require_float32("x", x)
    ftz = require_bool("ftz", ftz)
    return _model(model).rcp(x, ftz)


def lg2(x, model: str = gpus.DEFAULT_GPU, ftz: bool = True) -> np.ndarray:
    """``lg2.approx{.ftz}.f32``: log2(x) (base 2; multiply by ln 2 for ln) as MUFU.LG2 computes it.

    Args:
        x: float32 array (any shape) or numpy.float32.
        model: a GPU key (its calibrated tables) or ``"ideal"``, as for :func:`ex2`.
        ftz: True for ``.ftz`` (MUFU.LG2 alone: subnormal x gives -inf). False: for
            ``|x| < 2^-126``, ``MUFU.LG2(x * 2^24) + (-24)`` (FADD rounded to nearest).
    Returns:
        float32 array of ``x``'s shape; +-0 -> -inf, x < 0 -> NaN, +inf -> +inf. The sm_90 result
        is an absolute-error approximation (about 2^-22 near x = 1), so its relative error
        is large where log2(x) is near 0.
    Raises:
        TypeError, ValueError, MufuDataError: as :func:`ex2`.
    Source: PTX ISA "lg2"; simulator/data/device/mufu_report.json.
    """
    x = require_float32("x", x)
    ftz = require_bool("ftz", ftz)
    return _model(model).lg2(x, ftz)


def tanh(x, model: str = gpus.DEFAULT_GPU) -> np.ndarray:
    """``tanh.approx.f32``: tanh(x) as the sm_90 MUFU.TANH computes it (no .ftz form exists).

    Args:
        x: float32 array (any shape) or numpy.float32.
        model: a GPU key (its calibrated tables) or ``"ideal"``, as for :func:`ex2`.
    Returns:
        float32 array of ``x``'s shape. sm_90: x itself for |x| < 2^-8 (subnormals kept), +-1 for
        |x| >= 8, error up to about +-134 ulp in between (H200).
    Raises:
        TypeError, ValueError, MufuDataError: as :func:`ex2`.
    Source: PTX ISA "tanh"; simulator/data/device/mufu_report.json.
    """
    x = require_float32("x", x)
    return _model(model).tanh(x)


# ---- CUDA-level forms under --use_fast_math ---------------------------------------------------
def exp2f_fast(x, model: str = gpus.DEFAULT_GPU) -> np.ndarray:
    """``exp2f(x)`` under ``--use_fast_math``: MUFU.EX2 alone, i.e. ``ex2(x, ftz=True)``."""
    return ex2(x, model=model, ftz=True)


def expf_fast(x, model: str = gpus.DEFAULT_GPU) -> np.ndarray:
    """``__expf(x)`` (and ``expf`` under ``--use_fast_math``): ``FMUL.FTZ t, x, 0x3fb8aa3b``
    then MUFU.EX2. Natural exponent; float32 in, float32 out, shape kept."""
    x = require_float32("x", x)
    return ex2(fmul(x, LOG2E_F32, ftz=True), model=model, ftz=True)


def logf_fast(x, model: str = gpus.DEFAULT_GPU) -> np.ndarray:
    """``__logf(x)`` (and ``logf`` under ``--use_fast_math``): MUFU.LG2 then
    ``FMUL.FTZ`` by 0x3f317218. Natural log; float32 in, float32 out, shape kept."""
    x = require_float32("x", x)
    return fmul(lg2(x, model=model, ftz=True), LN2_F32, ftz=True)


def recip_fast(x, model: str = gpus.DEFAULT_GPU) -> np.ndarray:
    """``1.f / x`` under ``--use_fast_math``: MUFU.RCP alone, i.e. ``rcp(x, ftz=True)``."""
    return rcp(x, model=model, ftz=True)


#: PTX/CUDA form name -> emulator function taking (x, model); the names of kernels/probes/mufu.cu
FORMS = {
    "ex2": lambda x, model=gpus.DEFAULT_GPU: ex2(x, model, ftz=False),
    "ex2_ftz": lambda x, model=gpus.DEFAULT_GPU: ex2(x, model, ftz=True),
    "rcp": lambda x, model=gpus.DEFAULT_GPU: rcp(x, model, ftz=False),
    "rcp_ftz": lambda x, model=gpus.DEFAULT_GPU: rcp(x, model, ftz=True),
    "lg2": lambda x, model=gpus.DEFAULT_GPU: lg2(x, model, ftz=False),
    "lg2_ftz": lambda x, model=gpus.DEFAULT_GPU: lg2(x, model, ftz=True),
    "tanh": tanh,
    "exp2f_fast": exp2f_fast,
    "expf_fast": expf_fast,
    "logf_fast": logf_fast,
    "recip_fast": recip_fast,
}

__all__ = ["FORMS", "IDEAL", "LN2_F32", "LOG2E_F32", "MufuDataError", "MufuModel", "model_names",
           "clear_models", "ex2", "exp2f_fast", "expf_fast", "lg2", "logf_fast", "model", "rcp",
           "recip_fast", "tanh"]
