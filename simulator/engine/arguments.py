"""Argument checks of the compiled engine's entry points (:mod:`simulator.engine`): what the
NumPy model's operations refuse is refused here too, by name, before a kernel sees it (the
kernels read their arrays unchecked). No numba here."""

from __future__ import annotations

import numpy as np


def require_float32_array(name: str, x, min_ndim: int = 0) -> None:
    """Refuse what the NumPy model's operations refuse: anything but a plain float32 array of
    ``min_ndim`` dimensions or more (TypeError naming ``name``)."""
    from ..numerics.bits import reject_subclass

    reject_subclass(name, x)
    if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim < min_ndim:
        what = (f"{x.dtype} of {x.ndim} dimension(s)" if isinstance(x, np.ndarray)
                else type(x).__name__)
        raise TypeError(f"{name}: expected a float32 array of {min_ndim} or more dimensions, "
                        f"got {what}")


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
