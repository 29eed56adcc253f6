"""The dask helper (simulator/cluster.py, above flash/): worker processes start without
dask's MALLOC_TRIM_THRESHOLD_ (which halves the compiled engine's speed), with the thread counts
and engine asked for."""

import os

import numpy as np
import pytest

from simulator import cluster


def test_dask_config_drops_malloc_trim_and_sets_threads_and_engine():
    cfg = cluster.dask_config(threads=3, engine="numba")
    pre = cfg["distributed.nanny.pre-spawn-environ"]
    assert "MALLOC_TRIM_THRESHOLD_" in pre and pre["MALLOC_TRIM_THRESHOLD_"] is None
    assert pre["OMP_NUM_THREADS"] == pre["OPENBLAS_NUM_THREADS"] == pre["MKL_NUM_THREADS"] == "3"
    assert cfg["distributed.nanny.environ"] == {"NUMBA_NUM_THREADS": "3", "SIMULATOR_ENGINE": "numba"}


@pytest.mark.parametrize("kwargs, match", [(dict(threads=0), "threads"), (dict(threads=True), "threads"),
                                           (dict(threads=1.0), "threads"), (dict(engine="fast"), "engine")])
def test_dask_config_refuses_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        cluster.dask_config(**kwargs)


def test_dask_default_sets_malloc_trim_and_the_helper_removes_it():
    dask = pytest.importorskip("dask")
    pytest.importorskip("distributed")
    from distributed.nanny import _get_env_variables

    key = "distributed.nanny.pre-spawn-environ"
    if "MALLOC_TRIM_THRESHOLD_" not in os.environ:  # dask reads the client's environment first
        assert "MALLOC_TRIM_THRESHOLD_" in _get_env_variables(key)  # what the helper is for
    with dask.config.set(cluster.dask_config()):
        assert "MALLOC_TRIM_THRESHOLD_" not in _get_env_variables(key)


def test_local_cluster_workers_start_without_malloc_trim(monkeypatch):
    distributed = pytest.importorskip("distributed")
    # an earlier dask cluster of this process leaves dask's values in os.environ
    for name in ("MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                 "OPENBLAS_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    names = ("MALLOC_TRIM_THRESHOLD_", "SIMULATOR_ENGINE", "NUMBA_NUM_THREADS", "OMP_NUM_THREADS")
    before = os.environ.get("SIMULATOR_ENGINE")
    with cluster.local_cluster(1, threads=2, engine="numpy", dashboard_address=None) as lc, \
            distributed.Client(lc) as client:
        seen = list(client.run(lambda: {n: os.environ.get(n) for n in names}).values())
    assert seen == [{"MALLOC_TRIM_THRESHOLD_": None, "SIMULATOR_ENGINE": "numpy",
                     "NUMBA_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}]
    assert os.environ.get("SIMULATOR_ENGINE") == before  # the engine is set inside workers only


def test_local_cluster_warns_about_an_inherited_value(monkeypatch):
    pytest.importorskip("distributed")
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")
    with pytest.warns(RuntimeWarning, match="MALLOC_TRIM_THRESHOLD_=65536"):
        cluster.local_cluster(1, dashboard_address=None).close()
    with pytest.raises(ValueError, match="n_workers"):
        cluster.local_cluster(0)


def test_forward_by_heads_gives_the_serial_bits():
    distributed = pytest.importorskip("distributed")
    import ml_dtypes
    import numpy as np

    from simulator import flash

    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 200, 6, 64)).astype(ml_dtypes.bfloat16)
    k, v = (rng.standard_normal((2, 260, 3, 64)).astype(ml_dtypes.bfloat16) for _ in range(2))
    serial = flash.forward(q, k, v, causal=True)
    with cluster.local_cluster(1, engine="numpy", dashboard_address=None) as lc, \
            distributed.Client(lc) as client:
        for per in (None, 2):
            got = cluster.forward_by_heads(client, q, k, v, causal=True, kv_heads_per_task=per)
            assert np.array_equal(got.out.view(np.uint16), serial.out.view(np.uint16))
            assert np.array_equal(got.lse.view(np.uint32), serial.lse.view(np.uint32))
        with pytest.raises(ValueError, match="executor"):
            cluster.forward_by_heads(client, q, k, v, executor=object())
        with pytest.raises(ValueError, match="kv_heads_per_task"):
            cluster.forward_by_heads(client, q, k, v, kv_heads_per_task=0)
        with pytest.raises(ValueError, match="group"):
            cluster.forward_by_heads(client, q[:, :, :5], k, v)


def test_forward_by_heads_checks_the_whole_call_before_slicing_heads():
    """A task sees only its heads: v with more heads than k, or a descale wider than heads_kv,
    would be cut to fit without a word; they are refused up front, naming the argument, as the
    serial forward refuses them. A closed client and a misspelt keyword are named too."""
    distributed = pytest.importorskip("distributed")
    import ml_dtypes
    import numpy as np

    from simulator import flash

    rng = np.random.default_rng(6)
    q = rng.standard_normal((2, 70, 6, 64)).astype(ml_dtypes.bfloat16)
    k, v = (rng.standard_normal((2, 90, 3, 64)).astype(ml_dtypes.bfloat16) for _ in range(2))
    e4m3 = [x.astype(ml_dtypes.float8_e4m3fn) for x in (q, k, v)]
    serial = flash.forward(q, k, v)
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=1,
                            dashboard_address=None) as client:
        with pytest.raises(ValueError, match=r"k, v: expected the same"):
            cluster.forward_by_heads(client, q, k, np.concatenate([v, v], axis=2))
        with pytest.raises(ValueError, match=r"k_descale: expected a scalar or shape \[2, 3\]"):
            cluster.forward_by_heads(client, *e4m3, k_descale=np.ones((2, 5), np.float32))
        with pytest.raises(TypeError, match="casual"):
            cluster.forward_by_heads(client, q, k, v, casual=True)
        got = cluster.forward_by_heads(client, q, k, v, kv_heads_per_task=np.int64(2))
        assert np.array_equal(got.out.view(np.uint16), serial.out.view(np.uint16))
        assert np.array_equal(got.lse.view(np.uint32), serial.lse.view(np.uint32))
    with pytest.raises(ValueError, match="client: expected a running"):
        cluster.forward_by_heads(client, q, k, v)


def test_forward_by_heads_scatters_each_array_under_a_key_of_its_own():
    """dask names scattered data by its content unless hash=False: equal slices of two calls
    then share one key, and releasing the first call's futures lost the second's data
    ("lost dependencies", seen under load). Every scatter must pass hash=False, and the small
    keyword dict travels inside the task, not as scattered data."""
    import ml_dtypes

    from simulator import flash

    class Inline:
        """A client stand-in that runs tasks at once and records every scatter."""

        def __init__(self):
            self.scatters = []

        def scheduler_info(self):
            return {"workers": {"w0": {}}}

        def scatter(self, data, **kw):
            self.scatters.append((data, kw))
            return list(data)

        def submit(self, fn, *args, **kw):
            return fn(*args)

        def gather(self, futures):
            return futures

    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((1, 40, 2, 64)).astype(ml_dtypes.bfloat16) for _ in range(3))
    client = Inline()
    got = cluster.forward_by_heads(client, q, k, v, causal=True, kv_heads_per_task=1)
    want = flash.forward(q, k, v, causal=True)
    assert np.array_equal(got.out.view(np.uint16), want.out.view(np.uint16))
    assert np.array_equal(got.lse.view(np.uint32), want.lse.view(np.uint32))
    assert len(client.scatters) == 2
    for data, kw in client.scatters:
        assert kw.get("hash") is False, kw
        assert all(isinstance(x, np.ndarray) for x in data), [type(x).__name__ for x in data]
