"""A forward call's launch configuration: the inputs checked, FA3's dispatch resolved once.

:func:`make_config` turns the arguments of :func:`simulator.flash.forward` into a
:class:`Config`: the kernel format, FA3's tile and schedule (``hopper/flash_api.cpp``,
``hopper/tile_size.h``, ``hopper/heuristics.h`` through :mod:`simulator.flash.dispatch`), the
window after FA3's rules (:mod:`simulator.flash.masks`), the host-side scale constants
(:mod:`simulator.flash.constants`), FP8 descales, seqlens_k and the split layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..gpus import DEFAULT_GPU, GPU, get_gpu, mufu_model_name
from ..numerics import FORMATS
from ..trace import Trace
from .constants import host_constants
from .dispatch import Dispatch, check_head_dim, check_head_dim_v, fa3_dispatch, should_pack_gqa
from .masks import chunk_window, fa3_window, kernel_flags, normalize_window

#: the formats of q, k, v FA3's forward takes (hopper/flash_api.cpp: bf16, fp16, e4m3); the one
#: list the API, the CLI, the strategies and the replays read
INPUT_FORMATS = ("bf16", "f16", "e4m3")
#: format name -> NumPy dtype of those inputs (ml_dtypes.bfloat16, numpy.float16,
#: ml_dtypes.float8_e4m3fn); :func:`input_format` goes the other way
DTYPES = {name: FORMATS[name].dtype for name in INPUT_FORMATS}
_FORMAT_OF = {dt: name for name, dt in DTYPES.items()}
SCHEDULES = ("plain", "intra_wg_overlap")


def input_format(dtype) -> str | None:
    """The format name (``"bf16"``, ``"f16"``, ``"e4m3"``) of a NumPy dtype FA3's forward takes
    as input, or None for any other dtype or a value NumPy reads as no dtype."""
    try:
        return _FORMAT_OF.get(np.dtype(dtype))
    except TypeError:
        return None


@dataclass
class ForwardResult:
    """Output of :func:`forward`: ``out`` [B, Sq, H, head_dim_v], ``lse`` [B, H, Sq] float32 (natural log),
    ``trace`` (a :class:`simulator.trace.Trace` or None). Unpacks as ``out, lse = result``."""

    out: np.ndarray
    lse: np.ndarray
    trace: Trace | None = None

    def __iter__(self):
        return iter((self.out, self.lse))


@dataclass(frozen=True)
class Config:
    """Validated parameters of one forward call (shared with ``simulator.device.forward``)."""

    fmt: str
    batch: int
    seqlen_q: int
    seqlen_k: int
    heads: int
    heads_kv: int
    head_dim: int
    kernel_head_dim: int
    window: tuple[int, int]
    softcap: float
    kblock_m: int
    kblock_n: int
    schedule: str
    mufu: str
    consts: dict
    seqlens_k: np.ndarray
    q_descale: np.ndarray
    k_descale: np.ndarray
    v_descale: np.ndarray
    dispatch: Dispatch
    #: FA3 Split: K/V splits per batch ([batch] ints), or None for the unsplit kernel
    splits: np.ndarray | None = None
    #: the launch's max_seqlen_q / max_seqlen_k (varlen; else the arrays' lengths)
    max_seqlen_q: int = 0
    max_seqlen_k: int = 0
    #: PackGQA: the query heads of a kv head share tiles (rows ``position * g + head``)
    pack_gqa: bool = False
    #: V's head dim and the compiled kHeadDimV (0: the same as head_dim / kernel_head_dim)
    head_dim_v: int = 0
    kernel_head_dim_v: int = 0
    #: FA3's HasQv (MLA decode): S gains the GEMM of qv [.., head_dim_v] with V
    has_qv: bool = False
    #: FA3's attention_chunk (0: none): keys cut into chunks of this many, a row sees its own
    chunk: int = 0
    #: the GPU whose arithmetic runs (its tensor-core parameters; ``mufu`` names its MUFU model
    #: or "ideal"): a :class:`simulator.gpus.GPU`, None for the default one
    gpu: GPU | None = None
    #: the kernel family whose sm90 forward runs on this mainloop: "fa3" (hopper/), or "fa4"
    #: (flash_attn/cute/flash_fwd_sm90.py: FA4's softmax arithmetic, softcap as a score_mod,
    #: learnable sinks; :mod:`simulator.flash.softmax_fa4`)
    family: str = "fa3"
    #: FA4's learnable sink logits, float32 [heads] (natural log units), or None
    sink: np.ndarray | None = None

    def __post_init__(self):
        if self.gpu is None:
            object.__setattr__(self, "gpu", get_gpu())
        if not self.head_dim_v:
            object.__setattr__(self, "head_dim_v", self.head_dim)
        if not self.kernel_head_dim_v:
            object.__setattr__(self, "kernel_head_dim_v", self.kernel_head_dim)

    @property
    def qhead_per_khead(self) -> int:
        return self.heads // self.heads_kv

    @property
    def out_dtype(self) -> np.dtype:
        return FORMATS["bf16" if self.fmt == "e4m3" else self.fmt].dtype

    @property
    def k_step(self) -> int:
        return 32 if self.fmt == "e4m3" else 16

    @property
    def rescale_before_gemm(self) -> bool:
        """FA3's RescaleOBeforeGemm for the overlapped mainloop: kernel head dim > 128, not FP8."""
        return self.kernel_head_dim > 128 and self.fmt != "e4m3"

    @property
    def causal(self) -> bool:
        """The kernel's Is_causal (after FA3's window normalisation)."""
        return kernel_flags(self.window)[0]

    @property
    def local(self) -> bool:
        """The kernel's Is_local."""
        return kernel_flags(self.window)[1]


def _descale(name: str, x, fmt: str, batch: int, heads_kv: int) -> np.ndarray:
    if x is None:
        return np.ones((batch, heads_kv), dtype=np.float32)
    if fmt != "e4m3":
        raise ValueError(f"{name}: descales apply to e4m3 inputs only, got {fmt} inputs")
    if isinstance(x, np.ndarray) and type(x) is not np.ndarray:
        raise ValueError(f"{name}: expected a plain numpy array, got {type(x).__name__} "
                         "(a mask or subclass meaning would be lost)")
    arr = np.asarray(x)
    if arr.dtype != np.float32:
        raise ValueError(f"{name}: expected float32 (a scalar or [batch, heads_kv]), got {arr.dtype}")
    try:
        arr = np.broadcast_to(arr, (batch, heads_kv))
    except ValueError:
        raise ValueError(f"{name}: expected a scalar or shape [{batch}, {heads_kv}], "
                         f"got {arr.shape}") from None
    tiny = np.finfo(np.float32).tiny
    if not np.all(np.isfinite(arr) & (arr >= tiny)):
        raise ValueError(f"{name}: expected positive, finite, normal float32 values, got "
                         f"{np.unique(arr)[:4].tolist()}")
    return np.ascontiguousarray(arr)


def make_config(q, k, v, *, softmax_scale=None, causal=False, window=(-1, -1), softcap=0.0,
                seqlens_k=None, kblock_m=None, kblock_n=None, schedule=None,
                q_descale=None, k_descale=None, v_descale=None, gpu=DEFAULT_GPU,
                mufu=None, max_seqlen_q=None, max_seqlen_k=None, num_splits=None, pack_gqa=None,
                qv=None, attention_chunk=0) -> Config:
    """Validate every argument of :func:`forward` and resolve FA3's dispatch; raises ValueError
    naming the argument. ``kblock_m``, ``kblock_n``, ``schedule`` None: FA3's choice
    (:func:`simulator.flash.dispatch.fa3_dispatch`). With ``qv`` and no ``softmax_scale`` the
    scale is ``(head_dim + head_dim_v) ** -0.5``, as hopper/flash_attn_interface.py's default."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if isinstance(x, np.ndarray) and type(x) is not np.ndarray:
            raise ValueError(f"{name}: expected a plain numpy array, got {type(x).__name__} "
                             "(a mask or subclass meaning would be lost)")
        if not isinstance(x, np.ndarray) or x.ndim != 4:
            got = x.shape if isinstance(x, np.ndarray) else type(x).__name__
            raise ValueError(f"{name}: expected a 4-d array [batch, seqlen, heads, head_dim], got {got}")
        if input_format(x.dtype) is None:
            raise ValueError(f"{name}: expected dtype bfloat16, float16 or float8_e4m3fn, got {x.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v: dtypes differ ({q.dtype}, {k.dtype}, {v.dtype})")
    fmt = input_format(q.dtype)
    b, sq, h, d = q.shape
    bk, sk, hkv, dk = k.shape
    if bk != b or dk != d:
        raise ValueError(f"k: expected [batch={b}, seqlen_k, heads_kv, head_dim={d}], got {k.shape}")
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(f"k, v: expected the same [batch, seqlen_k, heads_kv], got {k.shape} "
                         f"and {v.shape}")
    check_head_dim(d, fmt)
    check_head_dim_v(d, v.shape[3], fmt)
    if hkv < 1 or h % hkv:
        raise ValueError(f"k: heads_kv = {hkv} must divide heads = {h}")
    if b < 1 or sq < 1 or h < 1:
        raise ValueError(f"q: batch, seqlen_q and heads must be >= 1, got {q.shape}")
    gpu = get_gpu(gpu)
    mufu = mufu_model_name(gpu, mufu)
    if not isinstance(causal, (bool, np.bool_)):
        raise ValueError(f"causal: expected True or False, got {causal!r}")
    max_q = _launch_max("max_seqlen_q", max_seqlen_q, sq)
    max_k = _launch_max("max_seqlen_k", max_seqlen_k, sk)
    chunk = check_chunk(attention_chunk)
    win = (fa3_window(normalize_window(bool(causal), window), max_q, max_k) if not chunk
           else chunk_window(bool(causal), window, max_q, max_k, chunk))
    is_causal, is_local = kernel_flags(win)
    disp = fa3_dispatch(fmt, d, max_q, causal=is_causal, local=is_local, softcap=_softcap_on(softcap),
                        head_dim_v=v.shape[3])
    kblock_m = disp.kblock_m if kblock_m is None else kblock_m
    kblock_n = disp.kblock_n if kblock_n is None else kblock_n
    schedule = disp.schedule if schedule is None else schedule
    if isinstance(kblock_m, bool) or not isinstance(kblock_m, (int, np.integer)) or \
            kblock_m not in (64, 128, 192):
        raise ValueError(f"kblock_m: expected 64, 128 or 192 (1-3 warpgroups), got {kblock_m!r}")
    step = 32 if fmt == "e4m3" else 16
    if isinstance(kblock_n, bool) or not isinstance(kblock_n, (int, np.integer)) or \
            kblock_n % step or not step <= kblock_n <= 256:
        raise ValueError(f"kblock_n: expected a multiple of {step} in {step}..256 for {fmt}, "
                         f"got {kblock_n!r}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule: expected one of {SCHEDULES}, got {schedule!r}")
    if seqlens_k is None:
        seqlens = np.full(b, sk, dtype=np.int64)
    else:
        if isinstance(seqlens_k, np.ndarray) and type(seqlens_k) is not np.ndarray:
            raise ValueError(f"seqlens_k: expected a plain numpy array, got {type(seqlens_k).__name__} "
                             "(a mask or subclass meaning would be lost)")
        seqlens = np.asarray(seqlens_k)
        if seqlens.shape != (b,) or not np.issubdtype(seqlens.dtype, np.integer):
            raise ValueError(f"seqlens_k: expected {b} integers, got {seqlens_k!r}")
        if np.any(seqlens < 0) or np.any(seqlens > sk):
            raise ValueError(f"seqlens_k: values must be in 0..{sk} (k.shape[1]), got {seqlens.tolist()}")
        seqlens = seqlens.astype(np.int64)
    has_qv = check_qv(qv, q, v.shape[3], fmt)
    if has_qv and softmax_scale is None:
        softmax_scale = (d + v.shape[3]) ** (-0.5)
    consts = host_constants(d, softmax_scale, softcap)
    return Config(fmt, b, sq, sk, h, hkv, d, disp.kernel_head_dim, win, float(softcap),
                  int(kblock_m), int(kblock_n), schedule, mufu, consts, seqlens,
                  _descale("q_descale", q_descale, fmt, b, hkv),
                  _descale("k_descale", k_descale, fmt, b, hkv),
                  _descale("v_descale", v_descale, fmt, b, hkv), disp,
                  _splits(num_splits, b), max_q, max_k,
                  _pack_gqa(pack_gqa, num_splits, h, hkv, max_q, kblock_m),
                  disp.head_dim_v, disp.kernel_head_dim_v, has_qv, chunk, gpu)


def check_chunk(attention_chunk) -> int:
    """FA3's ``attention_chunk``: an int >= 0 (0 = off)."""
    if isinstance(attention_chunk, bool) or not isinstance(attention_chunk, (int, np.integer)) \
            or not 0 <= attention_chunk < 2**31:
        raise ValueError(f"attention_chunk: expected an int >= 0 (0 = off), got {attention_chunk!r}")
    return int(attention_chunk)


def check_qv(qv, q, head_dim_v: int, fmt: str) -> bool:
    """Whether ``qv`` is given, after FA3's checks of it (hopper/flash_api.cpp, mha_fwd: head
    dim <= 64, head_dim_v >= 256, bf16 / fp16 only, q's dtype, shape [batch, seqlen_q, heads,
    head_dim_v]); the kernel then has HasQv (hopper/flash_fwd_launch_template.h: kernel head
    dim 64, kHeadDimV >= 256, not FP8).

    Raises:
        ValueError: naming ``qv``, with FA3's rule.
    """
    if qv is None:
        return False
    if isinstance(qv, np.ndarray) and type(qv) is not np.ndarray:
        raise ValueError(f"qv: expected a plain numpy array, got {type(qv).__name__} "
                         "(a mask or subclass meaning would be lost)")
    if not isinstance(qv, np.ndarray):
        raise ValueError(f"qv: expected a numpy array [batch, seqlen_q, heads, head_dim_v], got "
                         f"{type(qv).__name__}")
    if q.shape[3] > 64:
        raise ValueError(f"qv: FA3 takes qv only for head_dim <= 64 ('q_v is only supported for "
                         f"head_size <= 64'), got head_dim {q.shape[3]}")
    if head_dim_v < 256:
        raise ValueError(f"qv: FA3 takes qv only for head_dim_v >= 256 ('q_v is only supported "
                         f"for hdim_v >= 256'), got head_dim_v {head_dim_v}")
    if fmt not in ("bf16", "f16"):
        raise ValueError(f"qv: FA3 takes qv only for fp16 and bf16 inputs, got {fmt}")
    if qv.dtype != q.dtype:
        raise ValueError(f"qv: expected q's dtype {q.dtype}, got {qv.dtype}")
    want = q.shape[:3] + (head_dim_v,)
    if qv.shape != want:
        raise ValueError(f"qv: expected shape [batch, seqlen_q, heads, head_dim_v] = "
                         f"{list(want)}, got {list(qv.shape)}")
    return True


def _pack_gqa(pack_gqa, num_splits, heads: int, heads_kv: int, seqlen_q: int, kblock_m: int) -> bool:
    """FA3's PackGQA (``get_pack_gqa``, hopper/flash_api.cpp): the caller's choice, else always
    with a Split launch, never without GQA, else ``should_pack_gqa`` (hopper/heuristics.h)."""
    if pack_gqa is not None:
        if not isinstance(pack_gqa, (bool, np.bool_)):
            raise ValueError(f"pack_gqa: expected None, True or False, got {pack_gqa!r}")
        return bool(pack_gqa) and heads != heads_kv
    if heads == heads_kv:
        return False
    if num_splits is not None:
        return True
    return should_pack_gqa(False, seqlen_q, heads // heads_kv, kblock_m)


def _launch_max(name: str, value, least: int) -> int:
    """A launch's max_seqlen (FA3 varlen): None = the array's length; else an int >= it."""
    if value is None:
        return least
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise ValueError(f"{name}: expected None or an int >= {least} (the input's length), "
                         f"got {value!r}")
    return int(value)


def _splits(num_splits, batch: int) -> np.ndarray | None:
    """None (the unsplit kernel) or [batch] split counts >= 1 (an int applies to every batch)."""
    if num_splits is None:
        return None
    arr = np.asarray(num_splits)
    if arr.dtype.kind not in "iu" or arr.ndim > 1 or (arr.ndim == 1 and arr.shape != (batch,)):
        raise ValueError(f"num_splits: expected None, an int or {batch} ints, got {num_splits!r}")
    arr = np.broadcast_to(arr, (batch,)).astype(np.int64)
    if np.any(arr < 1) or np.any(arr > 256):
        raise ValueError(f"num_splits: expected values in 1..256, got {arr.tolist()}")
    return arr


def _softcap_on(softcap) -> float:
    """softcap as a float for the dispatch (its validation is host_constants')."""
    try:
        return float(softcap) if float(softcap) > 0 else 0.0
    except (TypeError, ValueError, OverflowError):
        return 0.0
