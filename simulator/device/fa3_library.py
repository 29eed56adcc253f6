"""The real FlashAttention-3 library on the GPU: the judge the emulator is held to.

The FA3 forward built from Dao-AILab's ``hopper/`` is published on PyPI as ``fa3-fwd`` (0.0.3:
a ``cp39-abi3`` wheel on the torch stable ABI, modules ``fa3_fwd_interface`` and
``fa3_fwd/_C.abi3.so``; built without fp16, local windows, paged KV and backward). This module
calls it with the emulator's argument names and returns a
:class:`simulator.flash.ForwardResult`, so that ``compare.diff`` puts emulator, twin kernel and
library side by side. It goes through ``fa3_fwd_interface._flash_attn_forward`` (the op behind
``flash_attn_func``) with ``num_splits=1`` and ``pack_gqa=None``: ``flash_attn_func``'s defaults,
so FA3's host code chooses tiles, kernel head dim and PackGQA as it does for a user's call;
``seqlens_k`` becomes ``seqused_k``, which ``flash_attn_func`` does not expose.

Needs torch with CUDA and the wheel importable (``pip install --no-deps fa3-fwd==0.0.3``);
:func:`provenance` records the wheel's version and the sha256 of its extension.
"""

from __future__ import annotations

import hashlib
import importlib
from pathlib import Path

import ml_dtypes
import numpy as np

from ..flash.config import ForwardResult
from .runtime import DeviceUnavailable

WHEEL = "fa3-fwd"
#: sha256 of fa3_fwd-0.0.3-cp39-abi3-manylinux_2_24_x86_64.whl as downloaded from PyPI
#: (27,571,724 bytes) and of the ``fa3_fwd/_C.abi3.so`` it holds (its RECORD agrees)
WHEEL_SHA256 = "44d26c6cfc69dde5a0f9c6bebbccbb96ed20e97bc8b9ddda638b0bf62e91b93d"
EXTENSION_SHA256 = "f74cff6d35de49a3df1fe5aed3c82f9bb7695bbf89b51dbba0ac663ae3812ef8"
INSTALL_HINT = "pip install --no-deps fa3-fwd==0.0.3 (needs torch with CUDA on an sm_90 GPU)"
_TORCH_DTYPE = {np.dtype(ml_dtypes.bfloat16): ("bfloat16", np.uint16),
                np.dtype(ml_dtypes.float8_e4m3fn): ("float8_e4m3fn", np.uint8),
                np.dtype(np.float16): ("float16", np.uint16)}


def _import():
    """(torch, fa3_fwd_interface), or :class:`DeviceUnavailable` naming what is missing."""
    try:
        torch = importlib.import_module("torch")
    except ImportError as exc:
        raise DeviceUnavailable(f"torch is not installed ({exc}); the real FA3 library needs it") from exc
    if not torch.cuda.is_available():
        raise DeviceUnavailable("torch sees no CUDA GPU; the real FA3 library needs an sm_90 GPU")
    try:
        iface = importlib.import_module("fa3_fwd_interface")
    except ImportError as exc:
        raise DeviceUnavailable(f"the FA3 library is not importable ({exc}); {INSTALL_HINT}") from exc
    return torch, iface


def available() -> tuple[bool, str]:
    """``(True, wheel version)`` when the library can run here, else ``(False, reason)``."""
    try:
        _import()
    except DeviceUnavailable as exc:
        return False, str(exc)
    return True, provenance()["version"]


def provenance() -> dict:
    """Wheel name, version, sha256 of ``_C.abi3.so``, build flags, torch and GPU."""
    torch, iface = _import()
    from importlib import metadata  # noqa: PLC0415

    ext = importlib.import_module("fa3_fwd._C")
    so = Path(ext.__file__)
    try:
        version = metadata.version(WHEEL)
    except metadata.PackageNotFoundError:
        version = "unknown (not installed as a distribution)"
    try:
        flags = importlib.import_module("fa3_fwd_config").CONFIG["build_flags"]
    except (ImportError, KeyError):
        flags = None
    return {"wheel": WHEEL, "version": version,
            "extension_sha256": hashlib.sha256(so.read_bytes()).hexdigest(),
            "build_flags": flags, "torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(0), "interface": Path(iface.__file__).name}


def _to_torch(torch, x: np.ndarray, name: str):
    """NumPy bits -> a CUDA tensor of the same dtype (through an integer view: no conversion)."""
    if not isinstance(x, np.ndarray) or x.dtype not in _TORCH_DTYPE:
        raise ValueError(f"{name}: expected a numpy array of bfloat16, float8_e4m3fn or float16, "
                         f"got {getattr(x, 'dtype', type(x).__name__)}")
    tname, bits = _TORCH_DTYPE[x.dtype]
    raw = np.ascontiguousarray(x).view(np.int16 if bits == np.uint16 else np.uint8)
    # a fresh tensor: torch's own strides also for empty arrays (FA3 checks stride(-1) == 1)
    dev = torch.empty(raw.shape, dtype=torch.int16 if bits == np.uint16 else torch.uint8,
                      device="cuda")
    dev.copy_(torch.from_numpy(raw))
    return dev.view(getattr(torch, tname))


def _descale(torch, x, batch: int, heads_kv: int):
    if x is None:
        return None
    arr = np.broadcast_to(np.asarray(x, dtype=np.float32), (batch, heads_kv))
    return torch.from_numpy(np.array(arr, dtype=np.float32)).cuda()  # a writable copy


def forward(q, k, v, *, softmax_scale=None, causal=False, window=(-1, -1), softcap=0.0,
            seqlens_k=None, q_descale=None, k_descale=None, v_descale=None) -> ForwardResult:
    """Run the real FA3 forward (``flash_attn_func`` defaults) on NumPy inputs.

    Args:
        q: [batch, seqlen_q, heads, head_dim]; k, v: [batch, seqlen_k, heads_kv, head_dim];
            ml_dtypes.bfloat16 or ml_dtypes.float8_e4m3fn (the published wheel has no fp16).
        softmax_scale: None = FA3's 1/sqrt(head_dim).
        causal, window, softcap: as :func:`simulator.flash.forward` (the wheel has no local
            windows; FA3 refuses them).
        seqlens_k: [batch] ints, passed as ``seqused_k`` (int32).
        q_descale, k_descale, v_descale: e4m3 only, float32 scalars or [batch, heads_kv].
    Returns:
        :class:`simulator.flash.ForwardResult`: ``out`` [batch, seqlen_q, heads, head_dim] (bf16
        for e4m3 inputs), ``lse`` [batch, heads, seqlen_q] float32, ``trace`` None.
    Raises:
        DeviceUnavailable: no torch, no GPU or no library; ValueError: a dtype FA3 has no kernel
        for; RuntimeError: FA3's own checks (its message).
    """
    torch, iface = _import()
    tq, tk, tv = (_to_torch(torch, x, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
    b, hkv = k.shape[0], k.shape[2]
    used = None if seqlens_k is None else torch.from_numpy(
        np.asarray(seqlens_k, dtype=np.int32)).cuda()
    out, lse, *_ = iface._flash_attn_forward(
        tq, tk, tv, seqused_k=used, softmax_scale=softmax_scale, causal=bool(causal),
        window_size_left=int(window[0]), window_size_right=int(window[1]), softcap=float(softcap),
        q_descale=_descale(torch, q_descale, b, hkv),
        k_descale=_descale(torch, k_descale, b, hkv),
        v_descale=_descale(torch, v_descale, b, hkv),
        num_splits=1, pack_gqa=None)
    torch.cuda.synchronize()
    out_np = out.view(torch.int16).cpu().numpy().view(ml_dtypes.bfloat16 if out.dtype == torch.bfloat16
                                                        else np.float16)
    return ForwardResult(out_np, lse.float().cpu().numpy(), None)


def call(name: str, args: dict) -> dict:
    """Call ``fa3_fwd_interface.<name>`` (``flash_attn_func``, ``flash_attn_varlen_func``,
    ``flash_attn_with_kvcache``, ``flash_attn_combine``) with NumPy arguments moved to the GPU
    (int arrays as int32 tensors, float32 arrays as float32 tensors, NumPy dtypes as torch
    dtypes, the rest through :func:`_to_torch`).

    Returns:
        dict with ``out`` and ``lse`` as NumPy arrays (bits as the library wrote them) and, for
        the KV cache, ``k_cache`` / ``v_cache`` after the call (appended keys included).
    Raises:
        DeviceUnavailable: no torch, GPU or library; RuntimeError: FA3's own checks.
    """
    torch, iface = _import()
    targs = {}
    for key, val in args.items():
        if isinstance(val, np.dtype):  # flash_attn_combine's out_dtype
            targs[key] = {"float32": torch.float32, "bfloat16": torch.bfloat16,
                          "float16": torch.float16}[str(val)]
        elif key == "lse_partial":  # mha_combine wants it contiguous along seqlen (dim -2)
            splits, batch, seqlen, heads = val.shape
            targs[key] = torch.empty_strided(val.shape, (batch * heads * seqlen, heads * seqlen, 1,
                                                         seqlen), dtype=torch.float32, device="cuda")
            targs[key].copy_(torch.from_numpy(np.ascontiguousarray(val)).cuda())
        elif isinstance(val, np.ndarray):
            if val.dtype.kind in "iu":
                targs[key] = torch.from_numpy(np.array(val, dtype=np.int32)).cuda()
            elif val.dtype == np.float32:
                targs[key] = torch.from_numpy(np.array(val)).cuda()
            else:
                targs[key] = _to_torch(torch, np.array(val), key)
        else:
            targs[key] = val
    res = getattr(iface, name)(**targs)
    torch.cuda.synchronize()
    out, lse = (res[0], res[1]) if isinstance(res, tuple) else (res, None)  # kvcache adds *rest
    out_np = out.cpu().numpy() if out.dtype == torch.float32 else out.view(torch.int16).cpu().numpy().view(
        ml_dtypes.bfloat16 if out.dtype == torch.bfloat16 else np.float16)
    got = {"out": out_np,
        "lse": None if lse is None else lse.float().cpu().numpy()}
    for key in ("k_cache", "v_cache"):
        if key in targs:
            t = targs[key]
            raw = t.view(torch.int16 if t.element_size() == 2 else torch.uint8).cpu().numpy()
            got[key] = raw.view(args[key].dtype)
    return got


def split_partials(args: dict) -> tuple[np.ndarray, np.ndarray]:
    """The Split kernel's partial outputs of a ``flash_attn_func`` call with ``num_splits > 1``
    (``_flash_attn_forward`` returns them as out_accum / softmax_lse_accum): float32
    [splits, batch, seqlen_q, heads, head_dim] and [splits, batch, heads, seqlen_q]."""
    torch, iface = _import()
    q, k, v = (_to_torch(torch, args[n], n) for n in ("q", "k", "v"))
    b, hkv = args["k"].shape[0], args["k"].shape[2]
    res = iface._flash_attn_forward(
        q, k, v, softmax_scale=args["q"].shape[-1] ** (-0.5), causal=bool(args["causal"]),
        softcap=float(args["softcap"]), num_splits=int(args["num_splits"]), pack_gqa=None,
        q_descale=_descale(torch, args.get("q_descale"), b, hkv),
        k_descale=_descale(torch, args.get("k_descale"), b, hkv),
        v_descale=_descale(torch, args.get("v_descale"), b, hkv))
    torch.cuda.synchronize()
    return res[2].cpu().numpy(), res[3].cpu().numpy()


def scheduler_metadata(kwargs: dict) -> np.ndarray:
    """The library's ``get_scheduler_metadata(**kwargs)`` (NumPy int arrays as int32 CUDA
    tensors, ``qkv_dtype`` a NumPy dtype) as a NumPy int32 array."""
    torch, iface = _import()
    targs = {}
    for key, val in kwargs.items():
        if isinstance(val, np.ndarray):
            targs[key] = torch.from_numpy(np.array(val, dtype=np.int32)).cuda()
        elif key == "qkv_dtype":
            targs[key] = {"bfloat16": torch.bfloat16, "float16": torch.float16,
                          "float8_e4m3fn": torch.float8_e4m3fn}[str(np.dtype(val))]
        else:
            targs[key] = val
    md = iface.get_scheduler_metadata(**targs)
    torch.cuda.synchronize()
    return md.cpu().numpy().astype(np.int32)
