"""NumPy arrays and CPU torch tensors in and out of :mod:`simulator.fa3`.

FA3's Python API takes and returns torch tensors; the emulator computes on NumPy arrays.
:func:`to_numpy` gives the NumPy array of the same bits (bfloat16 and float8_e4m3fn through
their raw integer views), :func:`returned` gives the caller's kind back, and :func:`write_back`
copies an in-place update (the KV cache's appended keys) into the caller's tensor.
"""

from __future__ import annotations

import numpy as np


def to_numpy(x, name: str):
    """(array, was_torch): a torch tensor becomes a NumPy array of the same bits, a
    ``numpy.memmap`` a plain view of its memory; other ndarray subclasses are refused."""
    if isinstance(x, np.memmap):  # a file-backed array (np.load(mmap_mode=...)): no other meaning
        return x.view(np.ndarray), False  # the same memory; a read-only map stays read-only
    if x is None or isinstance(x, np.ndarray):
        if isinstance(x, np.ndarray) and type(x) is not np.ndarray:
            raise ValueError(f"{name}: expected a plain numpy array, got {type(x).__name__} "
                             "(a mask or subclass meaning would be lost)")
        return x, False
    mod = type(x).__module__
    if mod.startswith("torch"):
        return from_torch(x, name), True
    if isinstance(x, (int, float, np.integer, np.floating)):
        return x, False
    raise ValueError(f"{name}: expected a numpy array or a CPU torch tensor, got {type(x).__name__}")


def from_torch(t, name: str) -> np.ndarray:
    """The NumPy array of a CPU torch tensor's bits (bfloat16 and the float8 formats as their
    ml_dtypes counterparts, which the checks after this then accept or refuse by name).

    Raises:
        ValueError: a tensor on a GPU, a sparse (not strided) tensor, or a dtype with no NumPy
            counterpart, naming the argument.
    """
    import torch  # noqa: PLC0415 - optional

    if t.device.type != "cpu":
        raise ValueError(f"{name}: expected a CPU tensor, got one on {t.device}")
    if t.layout != torch.strided:
        raise ValueError(f"{name}: expected a dense (strided) tensor, got layout {t.layout}; "
                         f"pass {name}.to_dense()")
    t = t.detach().contiguous()  # the forward has no autograd; FA3 takes such tensors too
    views = _torch_views()
    if t.dtype in views:
        raw, dt = views[t.dtype]
        return t.view(raw).numpy().view(dt)
    try:
        return t.numpy()
    except TypeError:
        raise ValueError(f"{name}: torch dtype {t.dtype} has no NumPy counterpart; FA3 takes "
                         "bfloat16, float16 or float8_e4m3fn tensors (int32 for lengths and "
                         "indices)") from None


def _torch_views() -> dict:
    """torch dtype -> (the torch integer dtype of its bits, the ml_dtypes dtype), for the
    dtypes NumPy lacks that ml_dtypes has."""
    import ml_dtypes  # noqa: PLC0415
    import torch  # noqa: PLC0415

    names = {"bfloat16": ("int16", "bfloat16"), "float8_e4m3fn": ("uint8", "float8_e4m3fn"),
             "float8_e5m2": ("uint8", "float8_e5m2"), "float8_e4m3fnuz": ("uint8", "float8_e4m3fnuz"),
             "float8_e5m2fnuz": ("uint8", "float8_e5m2fnuz")}
    return {getattr(torch, t): (getattr(torch, raw), np.dtype(getattr(ml_dtypes, ml)))
            for t, (raw, ml) in names.items() if hasattr(torch, t) and hasattr(ml_dtypes, ml)}


def check_writable(orig, name: str) -> None:
    """Raise ValueError, naming the argument, unless :func:`write_back` can write the caller's
    ``orig``: a read-only NumPy array, or a torch tensor that refuses an in-place copy (an
    ``expand``-ed one, whose elements share memory). The torch test copies the tensor's bits
    onto themselves, which changes nothing and fails where the real write would."""
    if isinstance(orig, np.ndarray):
        if not orig.flags.writeable:
            raise ValueError(f"{name}: read-only, but the new k, v are written into it in place")
        return
    if not type(orig).__module__.startswith("torch"):
        return
    import torch  # noqa: PLC0415

    raw = orig.detach().view(torch.int16 if orig.element_size() == 2 else torch.uint8)
    try:
        raw.copy_(raw.clone())
    except RuntimeError as exc:
        raise ValueError(f"{name}: cannot be written in place ({str(exc).split('.')[0]}), but the "
                         f"new k, v are written into it; pass a tensor that owns its memory, "
                         f"e.g. {name}.clone()") from None


def write_back(orig, arr: np.ndarray) -> None:
    """Copy ``arr``'s bits into the caller's torch tensor ``orig`` (a view or non-contiguous
    tensor was copied by :func:`from_torch`); nothing for NumPy arrays, written in place."""
    if not type(orig).__module__.startswith("torch"):
        return
    import torch  # noqa: PLC0415

    raw = np.ascontiguousarray(arr).view(np.int16 if arr.itemsize == 2 else np.uint8)
    orig.view(torch.int16 if arr.itemsize == 2 else torch.uint8).copy_(torch.from_numpy(raw))


def to_torch(x: np.ndarray):
    """A CPU torch tensor of ``x``'s bits (ml_dtypes.bfloat16 as torch.bfloat16)."""
    import ml_dtypes  # noqa: PLC0415
    import torch  # noqa: PLC0415

    if x.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(x))


def returned(arrays, torch_out: bool) -> tuple:
    """``arrays`` as a tuple of torch tensors when the caller passed torch (``torch_out``),
    else as they are."""
    return tuple(to_torch(a) for a in arrays) if torch_out else tuple(arrays)
