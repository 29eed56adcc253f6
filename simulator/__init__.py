"""Bit-exact NumPy emulator of a Hopper (sm_90) warpgroup running FlashAttention-3's forward.

Subpackages:
    simulator.numerics -- float32/FP8 arithmetic, conversions with PTX semantics
    simulator.device   -- CUDA kernels through CuPy, device sweeps (CuPy optional)
Command line: ``python -m simulator --help``.
"""

__version__ = "0.1.0"
