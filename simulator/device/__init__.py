"""The device side: CUDA kernels in ``kernels/`` compiled and launched through CuPy.

Importing this package never needs CuPy; functions that launch kernels import it on first use
and raise :class:`~simulator.device.runtime.DeviceUnavailable` with the install command when
CuPy or a GPU is missing.
"""

from .runtime import DeviceUnavailable, device_info, gpu_available, load_module

__all__ = ["DeviceUnavailable", "device_info", "gpu_available", "load_module"]
