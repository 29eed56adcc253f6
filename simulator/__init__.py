"""Bit-exact NumPy emulator of a Hopper (sm_90) warpgroup running FlashAttention-3's forward.

Subpackages:
    simulator.numerics   float32 / narrow-format arithmetic and MUFU approximations (PTX semantics)
    simulator.hw         threads, quads, fragments and layouts, shuffles, reductions
    simulator.mma        tensor-core arithmetic (wgmma, mma.sync, GEMMs)
    simulator.flash      the FA3 forward (Softmax, mainloop), float64 reference
    simulator.trace, simulator.compare, simulator.strategies
    simulator.device     the CUDA twin and the device sweeps (CuPy optional)
Command line: ``python -m simulator --help``; the design: docs/architecture.md.
"""

__version__ = "0.1.0"
