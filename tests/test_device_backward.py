"""The real FA3 backward live (flash-attn3-jax on an sm_90 GPU) against the emulator, on cases
drawn apart from the recorded ones. Skipped, with the reason, without a GPU (CuPy) or without
jax and the wheel (scripts/device_bwd_session.sh installs it from .fa3bwd/)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.replay import bwd_cases
from simulator.replay import fa3_backward as replay

pytestmark = pytest.mark.device


def _library():
    from simulator.device import fa3_jax
    from simulator.device.runtime import DeviceUnavailable

    try:
        fa3_jax.provenance()
    except DeviceUnavailable as exc:
        pytest.skip(f"the FA3 backward build is not usable here: {exc}")
    return fa3_jax


@pytest.mark.parametrize("case", bwd_cases.drawn(99, 12), ids=lambda c: c["name"])
def test_live_backward_equals_emulator_and_default_runs_stay_in_spread(case):
    fa3_jax = _library()
    x = bwd_cases.case_inputs(case)
    kw = {n: x[n] for n in ("causal", "window", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
                            "max_seqlen_k", "softmax_scale")}
    out, lse = fa3_jax.forward(x["q"], x["k"], x["v"], **kw)
    got = replay.emulate(case)
    assert replay.digest(replay.bits(out)).hex() == got["out"]
    res = got["res"]
    det = fa3_jax.backward(x["dout"], x["q"], x["k"], x["v"], out, lse, deterministic=True, **kw)
    for name in ("dq", "dk", "dv"):
        np.testing.assert_array_equal(replay.bits(det[name]), replay.bits(getattr(res, name)),
                                      err_msg=name)
    for _ in range(5):
        run = fa3_jax.backward(x["dout"], x["q"], x["k"], x["v"], out, lse, deterministic=False, **kw)
        for name in ("dq", "dk", "dv"):
            lo, hi = (a.astype(np.float32) for a in res.spread[name])
            v = run[name].astype(np.float32)
            assert np.all((lo <= v) & (v <= hi)), name
