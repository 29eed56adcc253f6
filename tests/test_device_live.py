"""Live checks on a GPU (skipped, with the reason, where CuPy sees none)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.device


def test_live_numerics_sweep_small(tmp_path):
    from simulator.measure import numerics_sweep

    rc = numerics_sweep.main(["--out", str(tmp_path), "--blocks", "1", "--skip-conversions"])
    report = json.loads((tmp_path / "numerics_report.json").read_text())
    assert report["total_mismatches"] == 0, report
    assert rc == 0


def test_live_emulator_matches_device_on_drawn_cases():
    """hypothesis drives the device check itself, with the project's example database: inputs
    that disagreed before (stored under the key of simulator.measure.hypothesis_replay's device check,
    shared with ``python -m simulator measure hypothesis_replay --database``) replay first."""
    from hypothesis import settings

    from simulator.measure import hypothesis_replay as hr

    hr.device_property(settings.default.database, max(10, settings.default.max_examples // 4))()


def _library():
    from simulator.device import fa3_library

    ok, why = fa3_library.available()
    if not ok:
        pytest.skip(f"the real FA3 library is not available here: {why}")
    return fa3_library


@pytest.mark.parametrize("index", [0, 57, 123, 200, 301])
def test_live_library_emulator_and_twin_agree(index):
    """The same call through the real-library launcher, the emulator (FA3's dispatch) and the
    twin kernel, on cases of the recorded matrix: identical bits."""
    from simulator import flash
    from simulator.device import forward as twin
    from simulator.replay import fa3_cases

    lib = _library()
    kwargs = fa3_cases.case_inputs(fa3_cases.matrix()[index])
    got = lib.forward(**kwargs)
    want = flash.forward(**kwargs)
    dev = twin.forward(**kwargs)
    for res in (want, dev):
        assert res.out.view("u2").tobytes() == got.out.view("u2").tobytes()
        assert res.lse.view("u4").tobytes() == got.lse.view("u4").tobytes()


def test_live_user_call_head_dim_80_gqa_causal_softcap():
    """One call as a user makes it (head dim 80, so FA3's 96 kernel; GQA; causal; softcap) on
    the library and on the emulator: same shapes, same bits."""
    import ml_dtypes
    import numpy as np

    from simulator import flash

    lib = _library()
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal(s).astype(ml_dtypes.bfloat16)
               for s in ((2, 300, 8, 80), (2, 451, 2, 80), (2, 451, 2, 80)))
    a, b = lib.forward(q, k, v, causal=True, softcap=20.0), flash.forward(q, k, v, causal=True, softcap=20.0)
    assert a.out.shape == b.out.shape == (2, 300, 8, 80) and a.lse.shape == b.lse.shape == (2, 8, 300)
    assert np.array_equal(a.out.view(np.uint16), b.out.view(np.uint16))
    assert np.array_equal(a.lse.view(np.uint32), b.lse.view(np.uint32))


@pytest.mark.parametrize("index", [0, 3, 8, 40, 95, 117, 160, 187, 200, 201, 225, 283, 310,
                                   313, 325, 330])
def test_live_library_api_call_equals_simulator_fa3(index):
    """The same API call (KV cache with splits, a 32k cache, varlen, flash_attn_func with
    splits, V head dims different from Q/K's, flash_attn_combine itself) through the
    real-library launcher and through ``simulator.fa3``: identical out and LSE bits."""
    from simulator import fa3
    from simulator.replay import fa3_api_cases

    lib = _library()
    name, args = fa3_api_cases.call_args(fa3_api_cases.matrix()[index])
    got = lib.call(name, {k: (v.copy() if hasattr(v, "copy") else v) for k, v in args.items()})
    out, lse = getattr(fa3, name)(**args)[:2]
    want = fa3_api_cases.result_bits(name, args, got["out"], got["lse"])
    mine = fa3_api_cases.result_bits(name, args, out, lse)
    for key in ("out", "lse"):
        assert mine[key].shape == want[key].shape, key
        assert mine[key].tobytes() == want[key].tobytes(), key
