"""dask clusters whose worker processes keep the compiled engine's speed.

dask's nanny starts every worker process with ``MALLOC_TRIM_THRESHOLD_=65536`` in its
environment (the ``distributed.nanny.pre-spawn-environ`` setting). Setting that variable at
all turns off glibc's adaptive mmap threshold, so the engine's per-step working arrays (hundreds
of kB each) are mapped and unmapped, page faults included, at every K/V block: measured on the
2-core development machine, a serial forward took 4.45 s in a plain process and 8.94 s in such
a worker, and a 2-worker LocalCluster sped the forward up 0.99x with the variable, 1.41x
without it. :func:`dask_config` is the nanny setting without it (and with the worker's thread
counts and engine); :func:`local_cluster` starts a ``distributed.LocalCluster`` under it;
:func:`forward_by_heads` runs one forward as tasks of a few heads each.

A value in the client's own environment is inherited by the workers and kept: exported by the
user, or left there by an earlier dask cluster of the same process (the nanny copies its
pre-spawn environment into the client's ``os.environ``); :func:`local_cluster` warns then.
"""

from __future__ import annotations

import os
import warnings

import numpy as np

from .engine import ENGINES

#: variables of dask's default worker environment that this module drops
DROPPED = ("MALLOC_TRIM_THRESHOLD_",)


def _check(threads, engine) -> None:
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads: expected a positive int, got {threads!r}")
    if engine not in ENGINES:
        raise ValueError(f"engine: expected one of {ENGINES}, got {engine!r}")


def dask_config(threads: int = 1, engine: str = "numba") -> dict:
    """dask settings for ``dask.config.set`` (or dask's YAML): the nanny's
    ``pre-spawn-environ`` (set before a worker process starts, so glibc and BLAS read it)
    without ``MALLOC_TRIM_THRESHOLD_`` (None: dask sets nothing) and with BLAS / OpenMP pools
    of ``threads``; its ``environ`` (set inside the worker before it runs anything) with
    ``NUMBA_NUM_THREADS=threads`` and ``SIMULATOR_ENGINE=engine``. Set it before creating or
    scaling a cluster whose workers run the simulator:
    ``dask.config.set(simulator.cluster.dask_config())``.

    Args:
        threads: threads of each worker's numba and BLAS pools (int >= 1).
        engine: one of :data:`simulator.engine.ENGINES`.
    Raises:
        ValueError: ``threads`` not a positive int, or an unknown ``engine``.
    """
    _check(threads, engine)
    pre: dict = {name: None for name in DROPPED}
    pre.update({name: str(threads) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                 "OPENBLAS_NUM_THREADS")})
    return {"distributed.nanny.pre-spawn-environ": pre,
            "distributed.nanny.environ": {"NUMBA_NUM_THREADS": str(threads),
                                          "SIMULATOR_ENGINE": engine}}


def local_cluster(n_workers: int, threads: int = 1, engine: str = "numba", **kwargs):
    """A ``distributed.LocalCluster`` of ``n_workers`` processes (one task at a time each,
    ``threads`` for its numba and BLAS pools) started under :func:`dask_config`; ``kwargs``
    go to ``LocalCluster`` (``memory_limit=``, ``dashboard_address=``, ...). Use it as
    ``with local_cluster(16) as cluster, distributed.Client(cluster) as client:`` and pass
    ``executor=client.get_executor()`` to ``flash.forward`` / ``flash.backward``. Workers
    added later by ``cluster.scale`` read dask's settings then: set :func:`dask_config`
    globally for those.

    Raises:
        ValueError: ``n_workers`` not a positive int, or as :func:`dask_config`.
        ImportError: dask.distributed missing (``pip install -e '.[dask]'``).
    """
    if isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1:
        raise ValueError(f"n_workers: expected a positive int, got {n_workers!r}")
    config = dask_config(threads, engine)
    try:
        import dask
        import distributed
    except ImportError as err:
        raise ImportError("local_cluster needs dask.distributed: pip install -e '.[dask]'") from err
    for name in DROPPED:
        if name in os.environ:
            warnings.warn(f"{name}={os.environ[name]} in this process's environment reaches the "
                          "dask workers and slows the engine (about 2x); unset it before "
                          "creating the cluster", RuntimeWarning, stacklevel=2)
    with dask.config.set(config):
        return distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1,
                                        processes=True, **kwargs)


def forward_by_heads(client, q, k, v, *, kv_heads_per_task: int | None = None, **kwargs):
    """``simulator.flash.forward(q, k, v, **kwargs)`` as dask tasks of a few kv heads each
    (with their query heads): CTAs never mix heads, so every task's O and LSE are those rows of
    the whole forward, bit for bit. Each task ships only its heads' inputs (an ``executor=``
    forward sends the whole padded inputs with every chunk, which for a long-context layer is
    hundreds of MB per task).

    Args:
        client: a ``distributed.Client`` (e.g. on :func:`local_cluster`).
        q, k, v: as ``flash.forward`` ([batch, seqlen, heads, head_dim], heads a multiple of
            k's heads_kv).
        kv_heads_per_task: kv heads per task (int >= 1); default: the kv heads over the
            client's workers, rounded up (one task per worker).
        kwargs: the other arguments of ``flash.forward``; ``qv`` and [batch, heads_kv]
            descales are sliced with the heads. Not ``executor``, ``trace`` or ``num_splits``.
    Returns:
        ``flash.ForwardResult`` (out [batch, seqlen_q, heads, head_dim_v], lse
        [batch, heads, seqlen_q]).
    Raises:
        ValueError: a refused argument, ``kv_heads_per_task`` not a positive int, a closed
            ``client``, heads that do not group over heads_kv, or what ``flash.forward``'s
            argument checks (:func:`simulator.flash.make_config`) refuse for the whole call.
        TypeError: a keyword ``flash.forward`` does not take.
    """
    import inspect

    from .flash import forward
    from .flash.config import ForwardResult, make_config

    unknown = sorted(set(kwargs) - set(inspect.signature(forward).parameters))
    if unknown:
        raise TypeError(f"forward_by_heads: unexpected keyword arguments {unknown} (not "
                        "flash.forward's)")
    for name in ("executor", "trace", "num_splits"):
        if kwargs.get(name) is not None:
            raise ValueError(f"{name}: not with forward_by_heads (each task is a serial forward)")
    if isinstance(client, type) or not (hasattr(client, "submit") and hasattr(client, "gather")):
        raise ValueError(f"client: expected a distributed.Client, got {client!r:.60}")
    if getattr(client, "status", "running") in ("closing", "closed"):
        raise ValueError(f"client: expected a running distributed.Client, got a {client.status} one")
    q, k, v = (np.asarray(x) for x in (q, k, v))
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"q, k, v: expected [batch, seqlen, heads, head_dim] arrays, got shapes "
                         f"{q.shape}, {k.shape}, {v.shape}")
    heads, hkv = q.shape[2], k.shape[2]
    if hkv < 1 or heads % hkv:
        raise ValueError(f"q, k: {heads} query heads do not group over {hkv} kv heads")
    # the whole call's shapes, dtypes, descales and qv, checked here: a task sees only its slice
    # of heads, where v's extra heads or a wider descale would be cut off without a word
    params = inspect.signature(make_config).parameters
    make_config(q, k, v, **{name: x for name, x in kwargs.items() if name in params})
    g = heads // hkv
    if kv_heads_per_task is None:
        workers = max(1, len(client.scheduler_info().get("workers", {})))
        kv_heads_per_task = -(-hkv // workers)
    if isinstance(kv_heads_per_task, bool | np.bool_) or not isinstance(kv_heads_per_task,
                                                                         int | np.integer) \
            or kv_heads_per_task < 1:
        raise ValueError(f"kv_heads_per_task: expected a positive int, got {kv_heads_per_task!r}")
    kv_heads_per_task = int(kv_heads_per_task)
    futures = []
    for j0 in range(0, hkv, kv_heads_per_task):
        j1 = min(hkv, j0 + kv_heads_per_task)
        kw = dict(kwargs)
        if kw.get("qv") is not None:
            kw["qv"] = np.asarray(kw["qv"])[:, :, j0 * g: j1 * g]
        for name in ("q_descale", "k_descale", "v_descale"):
            if kw.get(name) is not None and np.ndim(kw[name]) == 2:
                kw[name] = np.asarray(kw[name])[:, j0:j1]
        # the arrays scattered first (large arrays inside a task's graph make dask warn and slow
        # down), each under a key of its own: with dask's content hashing, equal slices of two
        # calls share one key, and releasing the first call's futures loses the second's data
        data = client.scatter([np.ascontiguousarray(q[:, :, j0 * g: j1 * g]),
                               np.ascontiguousarray(k[:, :, j0:j1]),
                               np.ascontiguousarray(v[:, :, j0:j1])], hash=False)
        futures.append(client.submit(_heads_task, *data, kw, pure=False))
    parts = client.gather(futures)
    return ForwardResult(np.concatenate([o for o, _ in parts], axis=2),
                         np.concatenate([s for _, s in parts], axis=1))


def _heads_task(q, k, v, kwargs):
    """One task of :func:`forward_by_heads`: the serial forward of a slice of heads."""
    from . import flash

    res = flash.forward(q, k, v, **kwargs)
    return res.out, res.lse
