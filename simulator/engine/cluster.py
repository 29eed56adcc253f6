"""dask clusters whose worker processes keep the compiled engine's speed.

dask's nanny starts every worker process with ``MALLOC_TRIM_THRESHOLD_=65536`` in its
environment (the ``distributed.nanny.pre-spawn-environ`` setting). Setting that variable at
all turns off glibc's adaptive mmap threshold, so the engine's per-step working arrays (hundreds
of kB each) are mapped and unmapped, page faults included, at every K/V block: measured on the
2-core development machine, a serial forward took 4.45 s in a plain process and 8.94 s in such
a worker, and a 2-worker LocalCluster sped the forward up 0.99x with the variable, 1.41x
without it. :func:`dask_config` is the nanny setting without it (and with the worker's thread
counts and engine); :func:`local_cluster` starts a ``distributed.LocalCluster`` under it.

A value in the client's own environment is inherited by the workers and kept: exported by the
user, or left there by an earlier dask cluster of the same process (the nanny copies its
pre-spawn environment into the client's ``os.environ``); :func:`local_cluster` warns then.
"""

from __future__ import annotations

import os
import warnings

from . import ENGINES

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
    ``dask.config.set(simulator.engine.cluster.dask_config())``.

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
