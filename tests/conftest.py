"""Test configuration: tests marked ``device`` run only where CuPy sees a CUDA GPU."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=200, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("deep", max_examples=20_000, deadline=None)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(config, items):
    if not any("device" in item.keywords for item in items):
        return
    from simulator.device import gpu_available

    ok, reason = gpu_available()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU through CuPy: {reason}")
    for item in items:
        if "device" in item.keywords:
            item.add_marker(skip)
