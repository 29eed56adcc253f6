"""The evaluator seam: what evaluates a launch's arithmetic, picked once per launch.

A launch (:func:`simulator.flash.scheduler.launch`, :func:`simulator.flash.backward`) calls
:func:`pick` once with its whole work, and passes the evaluator it gets to its mainloop; the
mainloops, :class:`simulator.flash.Softmax` and :func:`simulator.flash.rescale_o` call its
methods for the operations the specification and its compiled twin both evaluate (the GEMMs,
the softmax's per-element steps, the O rescale, the backward's P and dS) and never ask which
engine is set. Three evaluators, the same bits wherever they overlap:

* :data:`SPECIFICATION`: the NumPy specification (:mod:`simulator.mma`, :mod:`simulator.hw`,
  :mod:`simulator.numerics`), readable, every rule there;
* :data:`COMPILED`: the compiled twin (:mod:`simulator.engine`, numba) of each operation where
  its kernels take the arguments, else the specification;
* :class:`Exact`: the float64 switches of an :class:`simulator.flash.exact.Exactness`
  (``exact=``), its tensor-core GEMMs on the specification or the compiled twin.

This is the one module of :mod:`simulator.flash` that imports :mod:`simulator.engine`
(``tests/test_architecture.py`` holds it to that): the engine setting, ``"auto"``'s rule and
an enclosing :func:`simulator.engine.launching` block are read here, once per launch.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from .. import engine, mma
from ..numerics.mufu import ex2, model
from . import exact as _exact


class Evaluator(Protocol):
    """The operations a mainloop asks of its launch's evaluator.

    Two kinds. ``gemm`` and the decoded-operand and fused-step methods evaluate. The
    per-element steps (``row_max``, ``scaled_exp2``, ``row_sum``, ``scale_rows``, ``softcap``,
    ``p_operand``, ``exp2_rows``) return the evaluator's own result, or None where the
    specification applies: the specification is written beside the step it belongs to
    (:class:`simulator.flash.Softmax`, the mainloops), which evaluates it on None. The
    specification evaluator returns None for all of them.

    Attributes:
        name: ``"numpy"``, ``"numba"`` or ``"exact"``.
        compiled: whether its tensor-core GEMMs run on the compiled engine.
        exact: the :class:`simulator.flash.exact.Exactness` it evaluates, or None (the
            GPU's arithmetic).
    """

    name: str
    compiled: bool
    exact: _exact.Exactness | None

    def gemm(self, a, b, c, instruction) -> np.ndarray: ...
    def decodes(self, params, kblock: int) -> bool: ...
    def decode(self, x, params, index=None): ...
    def gemm_decoded(self, a, b, c, params, kblock: int, c_index=None) -> np.ndarray: ...
    def row_max(self, scores, prev) -> np.ndarray | None: ...
    def scaled_exp2(self, scores, scale, neg_max, mufu: str) -> np.ndarray | None: ...
    def row_sum(self, p, sum_scale, prev) -> np.ndarray | None: ...
    def scale_rows(self, acc, scale) -> np.ndarray | None: ...
    def softcap(self, s, softcap_val, mufu: str) -> np.ndarray | None: ...
    def p_operand(self, p, fmt: str) -> np.ndarray | None: ...
    def block_step_ready(self, mufu: str) -> bool: ...
    def block_step(self, *args): ...
    def exp2_rows(self, x, scale, neg, mufu: str) -> np.ndarray | None: ...
    def backward_ds(self, p, dp, dpsum, dtanh, fmt: str, emin: int): ...
    def task_threads(self) -> int: ...


class Specification:
    """The NumPy specification: GEMMs through :func:`simulator.mma.gemm` (``compiled=False``),
    every per-element step the one written beside it (None here: :class:`Evaluator`). It has
    no decoded operands and no fused block steps (:meth:`decodes` and :meth:`block_step_ready`
    are False)."""

    name = "numpy"
    compiled = False
    exact = None
    _instance = "SPECIFICATION"  # the module's one instance, what a pickled copy loads as

    def gemm(self, a, b, c, instruction) -> np.ndarray:
        """``c + a @ b`` on the tensor core, chained over the instruction's k-steps
        (:func:`simulator.mma.gemm`): a [..., M, K], b [..., K, N] narrow, c float32."""
        return mma.gemm(a, b, c, instruction=instruction, compiled=self.compiled)

    def decodes(self, params, kblock: int) -> bool:
        """Whether GEMMs with parameters ``params`` and k = ``kblock`` run on operands decoded
        once (:meth:`decode`, :meth:`gemm_decoded`)."""
        return False

    def decode(self, x, params, index=None):
        """A GEMM operand decoded once (only where :meth:`decodes`)."""
        raise NotImplementedError(f"the {self.name} evaluator has no decoded operands")

    def gemm_decoded(self, a, b, c, params, kblock: int, c_index=None) -> np.ndarray:
        """:meth:`gemm` on decoded operands (only where :meth:`decodes`)."""
        raise NotImplementedError(f"the {self.name} evaluator has no decoded operands")

    def row_max(self, scores, prev) -> np.ndarray | None:
        """The row maximum of ``scores`` [..., T, nrow, ncol] over a thread's columns (after
        ``prev``, or none when None), then over its quad; None: the specification's."""
        return None

    def scaled_exp2(self, scores, scale, neg_max, mufu: str) -> np.ndarray | None:
        """P = ``ex2(ffma(scores, scale, neg_max))`` (FFMA.FTZ then MUFU.EX2 of ``mufu``),
        ``scale`` and ``neg_max`` one value per thread and row; None: the specification's."""
        return None

    def row_sum(self, p, sum_scale, prev) -> np.ndarray | None:
        """A thread's row sum of P over its columns in order, from zero when ``prev`` is None,
        else ``ffma(sum_scale, prev, p[0]) + p[1] + ...``; None: the specification's."""
        return None

    def scale_rows(self, acc, scale) -> np.ndarray | None:
        """``acc[..., row, :] * scale[..., row]`` (FMUL.FTZ, the O rescale); None: the
        specification's."""
        return None

    def softcap(self, s, softcap_val, mufu: str) -> np.ndarray | None:
        """``tanh(s * softcap_val)`` (FMUL.FTZ then MUFU.TANH); None: the specification's."""
        return None

    def p_operand(self, p, fmt: str) -> np.ndarray | None:
        """P as the P V GEMM's A operand (``cvt.rn`` to ``fmt``); None: the specification's."""
        return None

    def block_step_ready(self, mufu: str) -> bool:
        """Whether :meth:`block_step` evaluates a forward's softmax block step for ``mufu``."""
        return False

    def block_step(self, *args):
        """One K/V block's softmax step fused (only where :meth:`block_step_ready`)."""
        raise NotImplementedError(f"the {self.name} evaluator has no fused block step")

    def exp2_rows(self, x, scale, neg, mufu: str) -> np.ndarray | None:
        """The backward's P = ``ex2(ffma(x, scale, neg[..., None]))`` (FFMA.FTZ, MUFU.EX2),
        ``neg`` one value per row of ``x`` [..., rows, n]; None: the specification's."""
        return None

    def backward_ds(self, p, dp, dpsum, dtanh, fmt: str, emin: int):
        """The backward's dS step on decoded operands (only where :meth:`decodes`)."""
        raise NotImplementedError(f"the {self.name} evaluator has no decoded operands")

    def task_threads(self) -> int:
        """Threads a launch spreads its chunks over (1: the specification's NumPy releases
        the GIL too rarely for threads to pay)."""
        return 1

    def __repr__(self) -> str:
        return f"<{self.name} evaluator>"

    def __reduce__(self):  # an executor's task carries the launch's evaluator: the same one
        return self._instance


class Compiled(Specification):
    """The compiled twin (:mod:`simulator.engine`): each operation through its numba kernel
    where the kernel takes the arguments (shapes, dtypes, the instruction family), else None
    or the specification's (which raises its errors). The same bits (``tests/test_engine*.py``)."""

    name = "numba"
    compiled = True
    _instance = "COMPILED"

    def decodes(self, params, kblock: int) -> bool:
        return engine.decoded_supported(params, kblock)

    def decode(self, x, params, index=None):
        return engine.decode_operand(x, params, index)

    def gemm_decoded(self, a, b, c, params, kblock: int, c_index=None) -> np.ndarray:
        return engine.dot_add_decoded(a, b, c, params, kblock, c_index)

    def row_max(self, scores, prev) -> np.ndarray | None:
        return engine.softmax_row_max(scores, prev) if engine.softmax_shaped(scores) else None

    def scaled_exp2(self, scores, scale, neg_max, mufu: str) -> np.ndarray | None:
        if not engine.softmax_shaped(scores):
            return None
        table = model(mufu).ex2_table()  # None for "ideal": the FFMA compiled, ex2 here
        p = engine.softmax_exp2(scores, scale, neg_max, table)
        return p if table is not None else ex2(p, model=mufu)

    def row_sum(self, p, sum_scale, prev) -> np.ndarray | None:
        return engine.softmax_row_sum(p, sum_scale, prev) if engine.softmax_shaped(p) else None

    def scale_rows(self, acc, scale) -> np.ndarray | None:
        if not engine.softmax_shaped(acc, rowcol=False):
            return None
        return engine.softmax_scale_rows(acc, scale)

    def block_step_ready(self, mufu: str) -> bool:
        return engine.softmax_step_ready(mufu)

    def block_step(self, *args):
        """:func:`simulator.engine.softmax_step`'s arguments and result."""
        return engine.softmax_step(*args)

    def exp2_rows(self, x, scale, neg, mufu: str) -> np.ndarray | None:
        if not engine.softmax_shaped(x, rowcol=False):
            return None
        return engine.ex2_ffma_rows(x, scale, neg, mufu)

    def backward_ds(self, p, dp, dpsum, dtanh, fmt: str, emin: int):
        """:func:`simulator.engine.backward_ds`: (P^T, dS, dS^T) decoded."""
        return engine.backward_ds(p, dp, dpsum, dtanh, fmt, emin)

    def task_threads(self) -> int:
        """numba's pool size (``engine.set_threads``): each task thread runs the serial twins."""
        return engine.pool_threads()


class Exact(Specification):
    """The float64 switches of ``exact`` (:mod:`simulator.flash.exact`): the exact GEMM,
    softcap, P and the O rescale where their switches say (``Softmax`` takes the generic path
    of :class:`simulator.flash.exact.Ops` for an evaluator with ``exact``); the tensor-core
    GEMMs that stay approximate run on ``base`` (the evaluator the launch would take without
    ``exact``)."""

    name = "exact"

    def __init__(self, exact: _exact.Exactness, base: Specification):
        self.exact = exact
        self.base = base
        self.compiled = base.compiled

    def gemm(self, a, b, c, instruction) -> np.ndarray:
        return _exact.gemm(a, b, c, instruction, self.exact, compiled=self.compiled)

    def scale_rows(self, acc, scale) -> np.ndarray:
        return _exact.Ops(self.exact).mul(acc, scale[..., None])

    def softcap(self, s, softcap_val, mufu: str) -> np.ndarray:
        return _exact.softcap(s, softcap_val, mufu, self.exact)

    def p_operand(self, p, fmt: str) -> np.ndarray:
        return _exact.p_operand(p, fmt, self.exact)

    def task_threads(self) -> int:
        return self.base.task_threads()

    def __reduce__(self):
        return Exact, (self.exact, self.base)


#: the NumPy specification's evaluator
SPECIFICATION = Specification()
#: the compiled engine's evaluator
COMPILED = Compiled()


def pick(work: int, exact: _exact.Exactness | None = None) -> Specification:
    """The evaluator of a launch of ``work`` tensor-core products, once for all its calls: the
    engine setting (``simulator.engine.set_engine`` / ``use_engine`` / ``SIMULATOR_ENGINE``),
    under ``"auto"`` by ``work`` or an enclosing ``engine.launching`` block
    (:func:`simulator.engine.launch_compiled`); wrapped in :class:`Exact` with ``exact``."""
    base = COMPILED if engine.launch_compiled(work) else SPECIFICATION
    return base if exact is None else Exact(exact, base)


def plan_compiled() -> bool:
    """Whether a forward's memory plan prices its chunks at the compiled engine's working
    arrays: where the setting alone (or an enclosing launch) takes every call compiled. Under
    ``"auto"`` the launch's own work is not counted, so that the up-front check of a call
    (``flash.check_memory``, before AppendKV writes a cache) and the launch plan alike."""
    return engine.launch_compiled(0)


def set_compile_note(note) -> None:
    """Where the compiled engine says, once per process, that its kernels are compiling (no
    cached machine code for these sources: the first compiled launch of a fresh install or an
    edited engine waits 20-60 s): a callable ``note(line)``, or None for silence. Default: the
    line on stderr where stderr is a terminal. Nothing to set without numba.

    Raises:
        TypeError: ``note`` neither None nor callable.
    Source: :mod:`simulator.engine.launch` (numba's ``numba:compile`` event).
    """
    if note is not None and not callable(note):
        raise TypeError(f"note: expected a callable note(line) or None, got {type(note).__name__}")
    if engine.available():
        from ..engine import launch

        launch.set_compile_note(note)


def serial_thread() -> None:
    """The initializer of a launch's task threads: each runs the compiled kernels' serial
    twins (:func:`simulator.engine.serial_thread`)."""
    engine.serial_thread()
