"""Step events of the forward, with per-thread state snapshots (emulator and device alike).

A :class:`Trace` is a list of :class:`Event` s in execution order. Each event names the step
(``qk_gemm``, ``softcap``, ``mask``, ``max_get_scale``, ``online_softmax``, ``rescale_o``,
``pv_gemm``, ``finalize``, ``epilogue``), the CTA ``(batch, head, m_block)``, the K/V block
``n_block`` (None for finalize / epilogue) and a dict of arrays whose leading axes are
``[warpgroup, thread]``: fragments ``[W, 128, registers]`` (``acc_s``, ``acc_o``) and row
state ``[W, 128, kNRows]`` (``row_max``, ``row_sum``, ``scores_scale``, ``lse``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .numerics.bits import is_int

#: step names; a step's position is its id in the twin kernel's trace dump, so new steps go last
#: (``qv_gemm``: the emulator's S after FA3's qv GEMM, which the twin does not run)
STEPS = ("qk_gemm", "softcap", "mask", "max_get_scale", "online_softmax", "rescale_o",
         "pv_gemm", "finalize", "epilogue", "qv_gemm")


def _check_cta(cta) -> tuple[int, int, int]:
    try:
        parts = tuple(cta)
    except TypeError:
        parts = None
    if parts is None or len(parts) != 3 or not all(is_int(c) and c >= 0 for c in parts):
        raise ValueError(f"cta: expected three ints >= 0 (batch, head, m_block), got {cta!r}")
    return tuple(int(c) for c in parts)


def _check_n_block(n_block) -> int | None:
    if n_block is None:
        return None
    if not is_int(n_block) or n_block < 0:
        raise ValueError(f"n_block: expected None or an int >= 0, got {n_block!r}")
    return int(n_block)


@dataclass
class Event:
    """One step of one CTA. ``data`` maps names to arrays ``[W, 128, ...]``."""

    step: str
    cta: tuple[int, int, int]
    n_block: int | None
    data: dict[str, np.ndarray] = field(default_factory=dict)

    def __repr__(self) -> str:
        keys = ", ".join(f"{k}{list(v.shape)}" for k, v in self.data.items())
        return f"Event({self.step}, cta={self.cta}, n_block={self.n_block}, {keys})"


@dataclass
class Trace:
    """Events in execution order, per CTA."""

    events: list[Event] = field(default_factory=list)

    def add(self, step: str, cta, n_block, **data) -> None:
        """Append an event (arrays are copied).

        Raises:
            ValueError: unknown ``step``; ``cta`` not three ints >= 0 (batch, head, m_block);
                ``n_block`` neither None nor an int >= 0.
        """
        if not isinstance(step, str) or step not in STEPS:
            raise ValueError(f"step: unknown {step!r}; known: {', '.join(STEPS)}")
        self.events.append(Event(step, _check_cta(cta), _check_n_block(n_block),
                                 {k: np.array(v, copy=True) for k, v in data.items()}))

    def for_cta(self, cta) -> list[Event]:
        """Events of one CTA ``(batch, head, m_block)``, in order."""
        cta = tuple(int(c) for c in cta)
        return [e for e in self.events if e.cta == cta]

    def ctas(self) -> list[tuple[int, int, int]]:
        seen: dict[tuple, None] = {}
        for e in self.events:
            seen.setdefault(e.cta, None)
        return list(seen)

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self):
        return iter(self.events)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The arrays :meth:`to_npz_bytes` stores: keys ``e{i}__{name}`` plus an index array."""
        arrays, index = {}, []
        for i, e in enumerate(self.events):
            index.append([i, STEPS.index(e.step), *e.cta, -1 if e.n_block is None else e.n_block])
            for k, v in e.data.items():
                arrays[f"e{i}__{k}"] = v
        arrays["index"] = np.array(index, dtype=np.int64).reshape(-1, 6)
        return arrays

    def to_npz_bytes(self) -> bytes:
        """Serialise (:meth:`to_arrays`) for ``np.load``."""
        from .io import npz_bytes

        return npz_bytes(self.to_arrays())

    @classmethod
    def from_npz(cls, npz) -> Trace:
        """Inverse of :meth:`to_npz_bytes` (``npz`` is an ``np.load`` result)."""
        trace = cls()
        data: dict[int, dict] = {}
        for key in npz.files:
            if key == "index":
                continue
            i, name = key.split("__", 1)
            data.setdefault(int(i[1:]), {})[name] = npz[key]
        for i, step, b, h, m, n in npz["index"]:
            trace.events.append(Event(STEPS[step], (int(b), int(h), int(m)),
                                      None if n < 0 else int(n), data.get(int(i), {})))
        return trace
