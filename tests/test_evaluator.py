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


def test_the_specification_leaves_every_step_to_the_code_beside_it():
    """The specification evaluator returns None for each per-element step (``Softmax`` and the
    mainloops evaluate what is written there) and has no compiled-only step."""
    spec = evaluator.SPECIFICATION
    x = np.zeros((1, 128, 2, 4), np.float32)
    rows = np.zeros((1, 128, 2), np.float32)
    assert all(r is None for r in (
        spec.row_max(x, None), spec.scaled_exp2(x, rows, rows, "h200"), spec.row_sum(x, None, None),
        spec.scale_rows(x[..., 0], rows[..., 0]), spec.softcap(x, rows, "h200"),
        spec.p_operand(x, "bf16"), spec.exp2_rows(x[0], np.float32(1), rows[0, :, 0], "h200")))
    assert not spec.decodes(None, 16) and not spec.block_step_ready("h200")
    assert spec.task_threads() == 1
    for call in (lambda: spec.decode(x, None), lambda: spec.block_step(),
                 lambda: spec.backward_ds(*[None] * 6)):
        with pytest.raises(NotImplementedError, match="numpy evaluator"):
            call()


@pytest.mark.skipif(not engine.available(), reason="numba is not installed")
def test_the_compiled_evaluators_twins_give_the_specifications_bits():
    """Each twin of the compiled evaluator against the specification written beside its step
    (``Softmax``, ``rescale_o``, the backward's P), for a warpgroup's and a warp's threads; an
    array its kernels do not take gets None (the specification then runs)."""
    from simulator.hw import quad_allreduce, thread_reduce
    from simulator.numerics import ffma, fmul
    from simulator.numerics.mufu import ex2

    rng = np.random.default_rng(0)
    scores = (rng.standard_normal((2, 128, 2, 8)) * 4).astype(np.float32)
    prev = rng.standard_normal((2, 128, 2)).astype(np.float32)
    scale = np.full((2, 128, 2), 0.125, np.float32)
    comp = evaluator.COMPILED

    def same(a, b):
        return a is not None and np.array_equal(a.view(np.uint32), b.view(np.uint32))

    for s, pr, sc in ((scores, prev, scale), (scores[:, :32], prev[:, :32], scale[:, :32])):
        assert same(comp.row_max(s, None), quad_allreduce(thread_reduce(s, op="max"), "max"))
        assert same(comp.row_max(s, pr), quad_allreduce(
            thread_reduce(s, pr, op="max", zero_init=False), "max"))
        for mufu in ("h200", "ideal"):
            assert same(comp.scaled_exp2(s, sc, -pr, mufu),
                        ex2(ffma(s, sc[..., None], -pr[..., None], ftz=True), model=mufu))
        start = ffma(sc, pr, s[..., 0], ftz=True)
        assert same(comp.row_sum(s, sc, pr),
                    thread_reduce(s[..., 1:], start, op="sum", zero_init=False))
    acc, rows = rng.standard_normal((2, 256, 16)).astype(np.float32), scale.reshape(2, 256)
    assert same(comp.scale_rows(acc, rows), fmul(acc, rows[..., None], ftz=True))
    x, neg = scores.reshape(2, 256, 8), -prev.reshape(2, 256)
    assert same(comp.exp2_rows(x, np.float32(0.125), neg, "h200"),
                ex2(ffma(x, np.float32(0.125), neg[..., None], ftz=True), model="h200"))
    assert comp.row_max(scores.astype(np.float64), None) is None  # not float32: the spec's
    assert comp.scale_rows(acc[0, 0], rows[0, :1]) is None        # one axis: the spec's
