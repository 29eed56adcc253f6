"""The FlashAttention-3 forward on the GPU: ``kernels/fa3_forward.cu`` launched through CuPy.

This is the device twin of :func:`simulator.flash.forward.forward`: both execute the operation
sequence of docs/forward.md, so their outputs can be compared bit for bit. The host constants
come from :mod:`simulator.flash.constants` and the window from :mod:`simulator.flash.masks`,
the same functions the emulator uses. The kernel is compiled with NVRTC for ``sm_90a`` with
``--use_fast_math`` (FA3's flags; CuPy adds ``-ftz=true`` anyway) and ``-D`` macros for the
compile-time configuration (:func:`kernel_options`); one module per configuration is cached.
Kernel layout and the choices the contract leaves open: docs/kernel.md. With ``trace=[(b, h,
m_block), ...]`` the kernel is compiled with ``-DFA_TRACE=1`` and dumps the per-thread state of
those CTAs after every step; :mod:`simulator.device.forward_trace` turns the dump into a
:class:`simulator.trace.Trace` with exactly the emulator's events.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from ..flash.config import SCHEDULES, Config, ForwardResult, make_config
from ..flash.constants import MAX_OFFSET
from ..flash.forward import validate_trace
from ..gpus import DEFAULT_GPU
from . import forward_trace, runtime

KERNEL = "fa3_forward.cu"
KERNEL_NAME = "fa3_forward"
DTYPE_CODE = {"bf16": 0, "f16": 1, "e4m3": 2}
MAX_SMEM_BYTES = 227 * 1024  # opt-in dynamic shared memory per block on sm_90
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class LaunchConfig(Config):
    """A validated :class:`simulator.flash.forward.Config` plus what the launch derives from it
    (shared memory, grid, threads, NVRTC options)."""

    @property
    def elem_bytes(self) -> int:
        return 1 if self.fmt == "e4m3" else 2

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory: Q tile, K block, V^T block."""
        return (self.kblock_m + 2 * self.kblock_n) * self.kernel_head_dim * self.elem_bytes

    @property
    def grid(self) -> tuple[int, int, int]:
        return (-(-self.seqlen_q // self.kblock_m), self.heads, self.batch)

    @property
    def threads(self) -> int:
        return 128 * (self.kblock_m // 64)

    @property
    def options(self) -> tuple[str, ...]:
        return kernel_options(self.fmt, self.kernel_head_dim, self.kblock_m, self.kblock_n,
                              self.softcap > 0, self.schedule)


def kernel_options(fmt: str, head_dim: int, kblock_m: int, kblock_n: int, softcap: bool,
                   schedule: str, trace: bool = False) -> tuple[str, ...]:
    """NVRTC options of one kernel configuration: runtime.DEFAULT_OPTIONS plus the ``-D`` macros
    (FA_DTYPE, FA_HEAD_DIM, FA_KBLOCK_M, FA_KBLOCK_N, FA_SOFTCAP, FA_SCHEDULE, FA_MAX_OFFSET,
    and ``-DFA_TRACE=1`` for the step-dump build)."""
    return tuple(runtime.DEFAULT_OPTIONS) + (
        f"-DFA_DTYPE={DTYPE_CODE[fmt]}",
        f"-DFA_HEAD_DIM={int(head_dim)}",
        f"-DFA_KBLOCK_M={int(kblock_m)}",
        f"-DFA_KBLOCK_N={int(kblock_n)}",
        f"-DFA_SOFTCAP={1 if softcap else 0}",
        f"-DFA_SCHEDULE={SCHEDULES.index(schedule)}",
        f"-DFA_MAX_OFFSET={MAX_OFFSET[fmt]}",
    ) + (("-DFA_TRACE=1",) if trace else ())


def make_launch_config(q, k, v, **kwargs) -> LaunchConfig:
    """Validate the arguments of :func:`forward` exactly as the emulator does
    (:func:`simulator.flash.make_config`, same errors), then what the kernel adds: 32-bit
    indexing and the shared-memory budget.

    Raises:
        ValueError: any invalid argument, naming it.
    """
    cfg = LaunchConfig(**{f.name: getattr(make_config(q, k, v, **kwargs), f.name)
                          for f in fields(Config)})
    if cfg.has_qv or cfg.chunk:
        raise ValueError(f"{'qv' if cfg.has_qv else 'attention_chunk'}: the twin kernel does not "
                         "compute it; the real library does (simulator.device.fa3_library)")
    if cfg.head_dim_v != cfg.head_dim:
        raise ValueError(f"v: the twin kernel needs V's head dim equal to Q/K's ({cfg.head_dim}), "
                         f"got {cfg.head_dim_v}; the real library runs it "
                         "(simulator.device.fa3_library)")
    if max(q.size, k.size) > _INT32_MAX // 2 or cfg.batch > 65535 or cfg.heads > 65535:
        raise ValueError(f"q, k: too large for the kernel's 32-bit indexing ({q.shape}, {k.shape})")
    if cfg.smem_bytes > MAX_SMEM_BYTES:
        raise ValueError(f"kblock_m, kblock_n: (kblock_m + 2 kblock_n) * kernel head dim * "
                         f"{cfg.elem_bytes} bytes = {cfg.smem_bytes} of shared memory exceeds "
                         f"{MAX_SMEM_BYTES}; use smaller blocks")
    return cfg


def compile_kernel(options: tuple[str, ...]):
    """The compiled module of one configuration (cached per options; NVRTC through CuPy).

    Raises:
        DeviceUnavailable: no CuPy or no GPU; RuntimeError: NVRTC rejected the source.
    """
    return runtime.load_module(KERNEL, tuple(options))


def forward(q, k, v, *, softmax_scale=None, causal=False, window=(-1, -1), softcap=0.0,
            seqlens_k=None, kblock_m=None, kblock_n=None, schedule=None,
            q_descale=None, k_descale=None, v_descale=None, gpu=DEFAULT_GPU, trace=None):
    """FlashAttention-3 forward on the GPU (docs/forward.md), the device twin of the emulator.

    Args:
        q: [batch, seqlen_q, heads, head_dim]; k, v: [batch, seqlen_k, heads_kv, head_dim];
            all ml_dtypes.bfloat16, all numpy.float16 or all ml_dtypes.float8_e4m3fn;
            head_dim a multiple of 8 (16 for e4m3) up to 256, zero-padded to FA3's kernel head
            dim as the emulator does; heads_kv divides heads.
        softmax_scale: default 1/sqrt(head_dim) (float64, then float32).
        causal: bottom-right aligned causal mask (window right = 0).
        window: (left, right) local window, -1 = unbounded.
        softcap: > 0 applies ``tanh(s * softmax_scale / softcap)`` (scale folded, FA3-style).
        seqlens_k: [batch] ints in 0..seqlen_k (default seqlen_k): keys per batch.
        kblock_m, kblock_n, schedule: None for FA3's dispatch (as the emulator), or overrides:
            64, 128 or 192 query rows per CTA; keys per block, a multiple of 16 (32 for e4m3)
            up to 256; (kblock_m + 2 kblock_n) * kernel head dim * elem_bytes must fit in
            227 KiB of shared memory; "plain" or "intra_wg_overlap".
        q_descale, k_descale, v_descale: e4m3 only: float32 scalars or [batch, heads_kv].
        gpu: the GPU record (:mod:`simulator.gpus`) the arguments are checked against, as the
            emulator's ``gpu=`` (the kernel runs on the GPU present; the emulator's
            ``mufu="ideal"`` has no device twin).
        trace: None, or an iterable of CTAs ``(batch, head, m_block)`` to record (as the
            emulator's ``trace``; CTAs outside the grid record nothing). The kernel is then
            built with ``-DFA_TRACE=1`` (same arithmetic, plus stores of the state).
    Returns:
        :class:`simulator.flash.ForwardResult`: ``out`` [batch, seqlen_q, heads, head_dim] in the
        input dtype (bf16 for e4m3), ``lse`` [batch, heads, seqlen_q] float32 (natural log, -inf
        for rows with no key), ``trace`` (a :class:`simulator.trace.Trace` with the emulator's
        events, or None); unpacks as ``out, lse``.
    Raises:
        ValueError: invalid arguments, the same as the emulator's (see :func:`make_launch_config`),
            or a ``trace`` entry that is not three integers.
        DeviceUnavailable: no CuPy or no CUDA GPU.
    """
    cfg = make_launch_config(q, k, v, softmax_scale=softmax_scale, causal=causal, window=window,
                             softcap=softcap, seqlens_k=seqlens_k, kblock_m=kblock_m,
                             kblock_n=kblock_n, schedule=schedule, q_descale=q_descale,
                             k_descale=k_descale, v_descale=v_descale, gpu=gpu)
    if trace is None:
        return ForwardResult(*launch(cfg, q, k, v), None)
    validate_trace(trace, cfg)  # the emulator's rules: 3-int CTAs inside the grid
    ctas = forward_trace.trace_ctas(trace)
    out, lse, raw = launch(cfg, q, k, v, trace_ctas=ctas)
    return ForwardResult(out, lse, forward_trace.decode(raw, cfg, ctas))


def launch(cfg: LaunchConfig, q, k, v, trace_ctas=None):
    """Run the kernel for a validated :class:`LaunchConfig`; returns ``(out, lse)`` NumPy arrays,
    or ``(out, lse, raw)`` with ``trace_ctas`` (int array [T, 3] of ``(b, h, m_block)``): the
    trace build's dump, uint32 ``[T, slots, record]`` (:mod:`simulator.device.forward_trace`).

    Unwritten outputs would show as 0xFFFF / NaN: the buffers are filled with that poison first
    (the trace dump with 0xFFFFFFFF, which no record header matches).
    """
    cupy = runtime.require_gpu()
    traced = trace_ctas is not None
    options = cfg.options + (("-DFA_TRACE=1",) if traced else ())
    fn = compile_kernel(options).get_function(KERNEL_NAME)
    runtime.allow_dynamic_smem(cupy, fn, cfg.smem_bytes)
    bits = np.uint8 if cfg.elem_bytes == 1 else np.uint16
    dq, dk, dv = (cupy.asarray(_pad_head_dim(x, cfg.kernel_head_dim).view(bits)) for x in (q, k, v))
    out = cupy.full((cfg.batch, cfg.seqlen_q, cfg.heads, cfg.kernel_head_dim), 0xFFFF,
                    dtype=cupy.uint16)
    lse = cupy.full((cfg.batch, cfg.heads, cfg.seqlen_q), np.nan, dtype=cupy.float32)
    args = (dq, dk, dv, out, lse, cupy.asarray(cfg.seqlens_k.astype(np.int32)),
            cupy.asarray(cfg.q_descale), cupy.asarray(cfg.k_descale), cupy.asarray(cfg.v_descale),
            np.int32(cfg.seqlen_q), np.int32(cfg.seqlen_k), np.int32(cfg.heads),
            np.int32(cfg.heads_kv), np.int32(cfg.window[0]), np.int32(cfg.window[1]),
            runtime.f32_bits(cfg.consts["scale_log2"]), runtime.f32_bits(cfg.consts["softcap_val"]))
    if traced:
        ctas = np.asarray(trace_ctas, dtype=np.int32).reshape(-1, 3)
        slots = forward_trace.slots_per_cta(cfg, ctas)
        shape = (len(ctas), slots, forward_trace.record_words(cfg))
        buf = cupy.full(shape, 0xFFFFFFFF, dtype=cupy.uint32)
        dctas = cupy.asarray(ctas if len(ctas) else np.zeros((1, 3), np.int32))
        args += (buf, dctas, np.int32(len(ctas)), np.int32(slots))
    fn(cfg.grid, (cfg.threads,), args, shared_mem=cfg.smem_bytes)
    cupy.cuda.get_current_stream().synchronize()
    o = np.ascontiguousarray(out.get()[..., : cfg.head_dim]).view(cfg.out_dtype)
    if traced:
        return o, lse.get(), buf.get()
    return o, lse.get()


def _pad_head_dim(x: np.ndarray, kernel_head_dim: int) -> np.ndarray:
    """Zero columns up to the kernel head dim (what FA3's bulk tensor copy loads there)."""
    if x.shape[-1] == kernel_head_dim:
        return np.ascontiguousarray(x)
    out = np.zeros(x.shape[:-1] + (kernel_head_dim,), dtype=x.dtype)
    out[..., : x.shape[-1]] = x
    return out
