"""The evaluator seam (``simulator.flash.evaluator``): a launch's evaluator is picked once from
the engine setting and the launch's work, and carries that choice into its tasks."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from simulator import engine, flash
from simulator.flash import evaluator


def test_pick_follows_the_setting_and_the_launchs_work(monkeypatch):
    with engine.use_engine("numpy"):
        assert evaluator.pick(1 << 40) is evaluator.SPECIFICATION
        assert not evaluator.plan_compiled()
    if not engine.available():
        return
    with engine.use_engine("numba"):
        assert evaluator.pick(0) is evaluator.COMPILED and evaluator.plan_compiled()
    with engine.use_engine("auto"):
        assert evaluator.pick(engine.AUTO_MIN_WORK - 1) is evaluator.SPECIFICATION
        assert evaluator.pick(engine.AUTO_MIN_WORK) is evaluator.COMPILED
        assert not evaluator.plan_compiled()  # a launch's own work is not priced in its plan
        with engine.launching(engine.AUTO_MIN_WORK):  # an enclosing launch's choice holds
            assert evaluator.pick(1) is evaluator.COMPILED and evaluator.plan_compiled()


def test_exact_wraps_the_evaluator_the_launch_would_take():
    exact = flash.Exactness(ex2=True)
    with engine.use_engine("numpy"):
        ev = evaluator.pick(1, exact)
    assert ev.exact is exact and ev.base is evaluator.SPECIFICATION and not ev.compiled
    assert not ev.decodes(None, 16) and not ev.block_step_ready("h200")
    assert evaluator.pick(1).exact is None


def test_evaluators_travel_with_executor_tasks():
    """A process pool's or dask's task pickles its evaluator: the same choice comes back."""
    for ev in (evaluator.SPECIFICATION, evaluator.COMPILED,
               evaluator.Exact(flash.Exactness(mma=True), evaluator.COMPILED)):
        back = pickle.loads(pickle.dumps(ev))
        assert (back.name, back.compiled, back.exact) == (ev.name, ev.compiled, ev.exact)
        assert back is ev or back.base is ev.base  # the module's own instances come back


def test_the_specification_has_no_compiled_only_steps():
    spec = evaluator.SPECIFICATION
    assert not spec.decodes(None, 16) and not spec.block_step_ready("h200")
    assert spec.task_threads() == 1
    for call in (lambda: spec.decode(np.zeros((1, 1, 1)), None), lambda: spec.block_step(),
                 lambda: spec.backward_ds(*[None] * 6)):
        with pytest.raises(NotImplementedError, match="numpy evaluator"):
            call()


@pytest.mark.skipif(not engine.available(), reason="numba is not installed")
def test_the_compiled_evaluator_gives_the_specifications_bits():
    """Each operation of the compiled evaluator against the specification's, for a warpgroup's
    and a warp's threads."""
    rng = np.random.default_rng(0)
    scores = (rng.standard_normal((2, 128, 2, 8)) * 4).astype(np.float32)
    prev = rng.standard_normal((2, 128, 2)).astype(np.float32)
    scale = np.full((2, 128, 2), 0.125, np.float32)
    acc = rng.standard_normal((2, 256, 16)).astype(np.float32)
    spec, comp = evaluator.SPECIFICATION, evaluator.COMPILED
    for s in (scores, scores[:, :32]):
        for first in (None, prev[:, : s.shape[1]]):
            assert np.array_equal(spec.row_max(s, first).view(np.uint32),
                                  comp.row_max(s, first).view(np.uint32))
        for mufu in ("h200", "ideal"):
            p, q = (e.scaled_exp2(s, scale[:, : s.shape[1]], -prev[:, : s.shape[1]], mufu)
                    for e in (spec, comp))
            assert np.array_equal(p.view(np.uint32), q.view(np.uint32))
        sums = [e.row_sum(p, scale[:, : s.shape[1]], prev[:, : s.shape[1]]) for e in (spec, comp)]
        assert np.array_equal(*(x.view(np.uint32) for x in sums))
    rows = scale.reshape(2, 256)
    assert np.array_equal(spec.scale_rows(acc, rows).view(np.uint32),
                          comp.scale_rows(acc, rows).view(np.uint32))
    x = scores.reshape(2, 256, 8)
    neg = -prev.reshape(2, 256)
    assert np.array_equal(spec.exp2_rows(x, np.float32(0.125), neg, "h200").view(np.uint32),
                          comp.exp2_rows(x, np.float32(0.125), neg, "h200").view(np.uint32))
