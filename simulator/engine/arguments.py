"""Argument checks of the compiled engine's entry points (:mod:`simulator.engine`): what the
NumPy model's operations refuse is refused here too, by name, before a kernel sees it (the
kernels read their arrays unchecked). No numba here."""

from __future__ import annotations

import numpy as np


def require_float32_array(name: str, x, min_ndim: int = 0) -> np.ndarray:
    """``x`` as :func:`simulator.numerics.bits.require_float32` takes it (a plain float32
    array, or a ``numpy.float32`` as a 0-d one), of ``min_ndim`` dimensions or more.

    Raises:
        TypeError: naming ``name``, what was expected and what was given.
    """
    from ..numerics.bits import require_float32

    x = require_float32(name, x)
    if x.ndim < min_ndim:
        raise TypeError(f"{name}: expected a float32 array of {min_ndim} or more dimensions, "
                        f"got {x.ndim}")
    return x


def require_float32_shape(name: str, x, shape: tuple, what: str | None = None) -> None:
    """Check that ``x`` is a float32 ndarray of ``shape`` (None: any extent) before a kernel
    reads it unchecked.

    Raises:
        ValueError: naming ``name``, what was expected (``what``, else the shape) and given.
    """
    if not (isinstance(x, np.ndarray) and x.dtype == np.float32 and x.ndim == len(shape)
            and all(e is None or e == d for e, d in zip(shape, x.shape, strict=True))):
        raise ValueError(f"{name}: expected float32 {what or shape}, got "
                         f"{getattr(x, 'dtype', type(x).__name__)} {np.shape(x)}")


def rows3(x, lead, name: str = "operand"):
    """``x`` (a float32 array or ``numpy.float32``) broadcast to the shape ``lead``
    (``[..., a, b]``), as a C-contiguous [R, a, b].

    Raises:
        TypeError: ``x`` is not float32 or is an ndarray subclass (as the NumPy model's
            operations raise), naming ``name``.
        ValueError: ``x`` does not broadcast to ``lead``, naming ``name``.
    """
    from ..numerics.bits import require_float32

    x = require_float32(name, x)
    try:
        x = np.ascontiguousarray(np.broadcast_to(x, lead))
    except ValueError:
        raise ValueError(f"{name}: shape {x.shape} does not broadcast to {tuple(lead)}") from None
    return x.reshape((int(np.prod(x.shape[:-2], dtype=np.int64)),) + x.shape[-2:])
