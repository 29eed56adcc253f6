"""Bit-exact NumPy emulator of what an H200 (sm_90) computes when it runs FlashAttention-3's
forward and backward (Dao-AILab ``hopper/``), with CUDA twin kernels launched through CuPy.

Entry points:
    simulator.fa3        FA3's Python API (``flash_attn_func``, ``flash_attn_varlen_func``,
                         ``flash_attn_with_kvcache``, ``flash_attn_combine``, the backward and
                         its autograd hook): swap the import
    simulator.flash      one kernel launch: ``forward``, ``backward``, the float64
                         ``reference``, ``Exactness`` (approximations made exact)
    simulator.budget     a forward's error budget: which approximation moves a result, how much
    simulator.strategies hypothesis strategies for attention's numerical edge cases
    ``python -m simulator`` (``fa3sim``): ``run`` (the forward on real inputs, simulator.run),
                         ``verify`` (replay every recorded H200 output), ``measure`` /
                         ``sweep`` / ``calibrate`` (record on a GPU)

The layers below:
    simulator.numerics   float32 and narrow-format arithmetic, conversions, MUFU models (PTX)
    simulator.hw         threads, quads, register fragments and layouts, shuffles, reductions
    simulator.mma        tensor-core arithmetic (wgmma, mma.sync, GEMMs over k-steps)
    simulator.engine     the switch between the NumPy model and its compiled numba twin (same
                         bits): ``engine.set_engine`` / ``use_engine``, ``SIMULATOR_ENGINE``
    simulator.trace, simulator.compare   step events with thread state; bitwise diffs
    simulator.device     the CUDA twins (``kernels/``) and the real library's launchers (CuPy,
                         optional); simulator.measure the GPU runs; simulator.replay their CPU
                         replay; simulator.data the recordings, with provenance

The design: docs/architecture.md.
"""

__version__ = "0.1.0"
