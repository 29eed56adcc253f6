"""flash.forward in CTA chunks: a memory budget and an executor change no bit."""

from __future__ import annotations

import importlib
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor

import ml_dtypes
import numpy as np
import pytest

from simulator import engine, flash
from simulator.flash import chunks

BF16 = ml_dtypes.bfloat16


def _inputs(dtype=BF16, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((2, 200, 4, 64)).astype(dtype)
    k = rng.standard_normal((2, 260, 2, 64)).astype(dtype)
    v = rng.standard_normal((2, 260, 2, 64)).astype(dtype)
    return q, k, v


def _same(a, b):
    assert np.array_equal(a.out.view(np.uint8), b.out.view(np.uint8))
    assert np.array_equal(a.lse.view(np.uint32), b.lse.view(np.uint32))


@pytest.mark.parametrize("kwargs", [dict(causal=True), dict(window=(40, 7)), dict(num_splits=3),
                                    dict(seqlens_k=np.array([260, 31], np.int32), softcap=5.0)])
def test_small_memory_budget_runs_cta_by_cta_with_the_same_bits(kwargs):
    q, k, v = _inputs()
    serial = flash.forward(q, k, v, **kwargs)
    fixed, per_cta = flash.forward_memory.memory_needed(flash.make_config(q, k, v, **kwargs),
                                                        q.dtype)
    tight = flash.forward(q, k, v, memory_budget=fixed + 2 * per_cta, **kwargs)  # two CTAs a chunk
    _same(serial, tight)


def test_thread_and_process_executors_give_the_serial_bits():
    q, k, v = _inputs(seed=1)
    serial = flash.forward(q, k, v, causal=True)
    with ThreadPoolExecutor(2) as ex:
        _same(serial, flash.forward(q, k, v, causal=True, executor=ex))
    with ProcessPoolExecutor(2) as ex:
        _same(serial, flash.forward(q, k, v, causal=True, executor=ex))


def test_budget_too_small_is_refused_with_the_estimate():
    q, k, v = _inputs()
    with pytest.raises(MemoryError, match=r"memory_budget: .* needs about .* MiB .* budget of"):
        flash.forward(q, k, v, memory_budget=1 << 20)
    with pytest.raises(MemoryError, match=r"plus \d+\.\d MiB per CTA\), more than the budget "
                                          r"of 1 bytes;"):
        flash.forward(q, k, v, memory_budget=1)  # never "0.00 GiB", whatever the budget


def test_bad_executor_and_trace_with_executor_are_refused():
    q, k, v = _inputs()
    with pytest.raises(TypeError, match="executor"):
        flash.forward(q, k, v, executor=object())
    with ThreadPoolExecutor(1) as ex, pytest.raises(ValueError, match="trace"):
        flash.forward(q, k, v, executor=ex, trace=[(0, 0, 0)])


def test_progress_counts_every_block_visit_and_changes_no_bit(capsys):
    q, k, v = _inputs(seed=3)
    serial = flash.forward(q, k, v, causal=True)
    seen = []
    _same(serial, flash.forward(q, k, v, causal=True, memory_budget=10 << 20,
                                progress=lambda done, total: seen.append((done, total))))
    done, total = zip(*seen, strict=True)
    assert len(seen) > 1 and list(done) == sorted(done) and done[-1] == total[0] == total[-1]
    with ThreadPoolExecutor(2) as ex:
        _same(serial, flash.forward(q, k, v, causal=True, executor=ex, progress=True))
    assert "flash.forward" in capsys.readouterr().err
    with pytest.raises(TypeError, match="progress"):
        flash.forward(q, k, v, progress="yes")


def test_dask_local_cluster_gives_the_serial_bits():
    distributed = pytest.importorskip("dask.distributed", reason="optional: pip install -e '.[dask]'")
    q, k, v = _inputs(seed=2)
    serial = flash.forward(q, k, v)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        _same(serial, flash.forward(q, k, v, executor=client.get_executor()))


def test_progress_off_a_terminal_writes_whole_lines(capsys):
    pytest.importorskip("tqdm")  # installed, tqdm still must not draw into a log
    bar = chunks.Progress(True, 4, "emulating")
    for _ in range(4):
        bar.update(1)
    bar.close()
    err = capsys.readouterr().err
    assert "\r" not in err and err.endswith("\n")
    assert "emulating: 4/4 K/V block visits (100%)" in err


def test_an_executor_class_rather_than_an_executor_is_refused():
    q, k, v = _inputs()
    with pytest.raises(TypeError, match=r"executor: .* got the class ThreadPoolExecutor"):
        flash.forward(q, k, v, executor=ThreadPoolExecutor)


@pytest.mark.parametrize("kwargs", [dict(), dict(num_splits=3), dict(pack_gqa=True, num_splits=2),
                                    dict(causal=True, seqlens_k=np.array([260, 0], np.int32))])
def test_memory_needed_is_what_the_forward_holds(kwargs):
    """The estimate check_memory refuses by, without running, is that of the arrays forward
    allocates: its padded inputs and outputs."""
    import importlib

    fwd = importlib.import_module("simulator.flash.forward")
    q, k, v = _inputs()
    cfg = flash.make_config(q, k, v, **kwargs)
    res = flash.forward(q, k, v, **kwargs)
    fixed, per_cta = fwd.memory_needed(cfg, q.dtype)
    loop = importlib.import_module("simulator.flash.mainloop_fwd_sm90")
    assert fixed == chunks.fixed_bytes(*loop.padded_inputs(cfg, q, k, v), res.out, res.lse)
    assert per_cta == chunks.cta_bytes(cfg.kblock_m, cfg.kblock_n, cfg.kernel_head_dim_v,
                                       cfg.kernel_head_dim, engine.wants_numba("dotadd", 0))
    fwd.check_memory(q, k, v, memory_budget=fixed + per_cta, **kwargs)
    with pytest.raises(MemoryError, match="memory_budget"):
        fwd.check_memory(q, k, v, memory_budget=fixed + per_cta - 1, **kwargs)


class _CountingPool(ThreadPoolExecutor):
    """A thread pool that records the CTAs of each chunk submitted to it."""

    def __init__(self, workers):
        super().__init__(workers)
        self.sizes = []

    def submit(self, fn, *args, **kwargs):
        self.sizes.append(len(args[3]))
        return super().submit(fn, *args, **kwargs)


def test_workers_share_the_memory_budget():
    from simulator.flash.forward import memory_needed

    q, k, v = _inputs(seed=2)
    fixed, per_cta = memory_needed(flash.make_config(q, k, v), q.dtype)
    budget = fixed + 12 * per_cta
    serial = flash.forward(q, k, v)
    with _CountingPool(4) as pool:
        _same(serial, flash.forward(q, k, v, executor=pool, memory_budget=budget))
    assert fixed + 4 * max(pool.sizes) * per_cta <= budget, pool.sizes
    # threads share this process's memory: a pool of 4 at a budget for 3 CTAs runs 3 at once
    with _CountingPool(4) as pool:
        _same(serial, flash.forward(q, k, v, executor=pool, memory_budget=fixed + 3 * per_cta))
    assert max(pool.sizes) == 1, pool.sizes
    # other executors' workers hold a chunk each: all four count, and they do not fit
    with _SerialWorkers(4) as pool, pytest.raises(MemoryError, match="times 4 chunks running at once"):
        flash.forward(q, k, v, executor=pool, memory_budget=fixed + 3 * per_cta)
    assert pool.sizes == []


class _SerialWorkers(Executor):
    """An executor that is not a thread pool (as a process pool or dask's): ``_max_workers``
    workers, each task run at once in the caller, chunk sizes recorded."""

    def __init__(self, workers):
        self._max_workers, self.sizes = workers, []

    def submit(self, fn, *args, **kwargs):
        self.sizes.append(len(args[3]))
        future = Future()
        future.set_result(fn(*args, **kwargs))
        return future


def test_a_thread_pool_runs_no_more_chunks_at_once_than_the_budget_affords(monkeypatch):
    """A user's thread pool of 4 at a budget of the fixed arrays plus 2 CTAs: never more than
    two chunks (of one CTA) run at once, with the serial bits."""
    import threading
    import time

    loop = importlib.import_module("simulator.flash.mainloop_fwd_sm90")
    from simulator.flash.forward import memory_needed

    q, k, v = _inputs(seed=2)
    fixed, per_cta = memory_needed(flash.make_config(q, k, v), q.dtype)
    serial = flash.forward(q, k, v)
    lock, now, most = threading.Lock(), [0], [0]
    real = loop.MAINLOOP.run_group

    def counted(*args):
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(0.01)
        try:
            return real(*args)
        finally:
            with lock:
                now[0] -= 1

    monkeypatch.setattr(loop, "MAINLOOP", loop.MAINLOOP._replace(run_group=counted))
    with ThreadPoolExecutor(4) as pool:
        _same(serial, flash.forward(q, k, v, executor=pool, memory_budget=fixed + 2 * per_cta))
    assert most[0] == 2


@pytest.mark.parametrize("stderr", ["closed", "no isatty"])
def test_progress_true_into_a_closed_or_replaced_stderr_runs_the_call(monkeypatch, stderr):
    """progress=True with a closed stderr (or one replaced by an object with no ``isatty``)
    shows nothing; the call is not lost for its progress line."""
    import io
    import sys

    err = io.StringIO()
    if stderr == "closed":
        err.close()
    else:
        err = type("Writer", (), {"write": lambda self, s: len(s), "flush": lambda self: None})()
    q, k, v = _inputs(seed=4)
    serial = flash.forward(q, k, v)
    monkeypatch.setattr(sys, "stderr", err)
    _same(serial, flash.forward(q, k, v, progress=True))


def test_progress_of_a_numpy_bool_names_its_type():
    q, k, v = _inputs()
    with pytest.raises(TypeError, match=r"progress: expected None, a bool .* got numpy\.bool"):
        flash.forward(q, k, v, progress=np.True_)


def test_task_threads_take_small_groups_whole_where_there_are_enough_of_them(monkeypatch):
    """The forward's rule (``scheduler._task_threads``): task threads where each gets a chunk of
    ``MIN_TASK_CTAS`` CTAs, or where there are at most ``MAX_THREADS_PER_GROUP`` threads per
    group that visits a K/V block (a causal launch's groups of one m_block each); else one
    thread (the kernels' parallel loops). Groups that visit no block do not count."""
    fwd = importlib.import_module("simulator.flash.scheduler")

    def groups(count, ctas, visits=1):
        return {((0, visits), (m,)): np.zeros((ctas, 4), np.int64) for m in range(count)}

    per = fwd.MAX_THREADS_PER_GROUP
    assert fwd._task_threads(16, groups(-(-16 // per), 8)) == 16
    assert fwd._task_threads(16, groups(-(-16 // per) - 1, 8)) == 1
    assert fwd._task_threads(16, groups(16, 8, visits=0)) == 1
    assert fwd._task_threads(16, groups(1, 16 * fwd.MIN_TASK_CTAS)) == 16
    assert fwd._task_threads(1, groups(64, 8)) == 1
