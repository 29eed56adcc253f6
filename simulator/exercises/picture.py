"""A failed check as a picture: where a learner's bits part from the device's.

:func:`draw` takes a failed :class:`simulator.exercises.CheckResult` of a ladder rung that
records its tile (``result.tile``: both arrays' bits) and draws the array holding the first
divergence: a step trace's array as the grid of threads (rows, 128 per warpgroup) x registers
(columns), a flat array (an instruction's samples, dS) as rows of 256 (or its own 2-D shape).
Every differing element is coloured by its distance in units in the last place (log scale),
equal elements are grey, and the first divergence is circled. matplotlib is imported only here
(the command line selects the Agg backend and writes a PNG; Jupyter shows the returned
:class:`Picture` inline).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: elements per row when a flat array is drawn
ROW = 256


@dataclass
class Picture:
    """What :func:`draw` drew.

    Attributes:
        figure: the matplotlib figure.
        marked: int64 ``[k, ndim]``: the coordinates (in the tile's own shape) of every
            element drawn as differing, in C order.
        first: the coordinates of the circled element (the first divergence).
        ulps: float64, the tile's shape: the distance of each element in units in the last
            place of its format (0 where equal; inf where one side is NaN and the other not).
    """

    figure: object
    marked: np.ndarray
    first: tuple
    ulps: np.ndarray

    def _repr_png_(self):
        import io  # noqa: PLC0415

        buf = io.BytesIO()
        self.figure.savefig(buf, format="png", dpi=110, bbox_inches="tight")
        return buf.getvalue()


def ulp_distance_bits(a: np.ndarray, b: np.ndarray, width: int) -> np.ndarray:
    """Distance in ulps of two arrays of ``width``-bit float bit patterns (uint views).

    The patterns are mapped to integers ordered like the values (sign-magnitude to two's
    complement), so adjacent floats are 1 apart and +0 / -0 are 0 apart; a NaN against a
    non-NaN is inf, two NaNs 0 (the bits may still differ). float64 ``a.shape``.

    Raises:
        ValueError: ``width`` not 8, 16 or 32, or shapes that differ.
    """
    if width not in (8, 16, 32):
        raise ValueError(f"width: expected 8, 16 or 32, got {width!r}")
    if a.shape != b.shape:
        raise ValueError(f"a, b: shapes differ: {a.shape} vs {b.shape}")
    sign = np.int64(1) << (width - 1)

    def ordered(x):
        x = x.astype(np.int64)
        return np.where(x & sign, -(x & (sign - 1)), x)

    dist = np.abs(ordered(a) - ordered(b)).astype(np.float64)
    fmt = {8: None, 16: None, 32: np.float32}[width]
    if fmt is not None:
        na, nb = np.isnan(a.view(fmt)), np.isnan(b.view(fmt))
        dist = np.where(na | nb, np.where(na & nb, 0.0, np.inf), dist)
    return dist


def _grid(x: np.ndarray) -> np.ndarray:
    """The 2-D picture of a tile: threads x registers, or rows of :data:`ROW`."""
    if x.ndim == 1:
        pad = (-x.size) % ROW
        return np.concatenate([x, np.zeros(pad, x.dtype)]).reshape(-1, ROW)
    return x.reshape(-1, x.shape[-1])


def _grid_index(shape: tuple, pos: tuple) -> tuple[int, int]:
    flat = int(np.ravel_multi_index(pos, shape))
    if len(shape) == 1:
        return divmod(flat, ROW)
    return divmod(flat, shape[-1])


def draw(result, path=None, *, title: str | None = None) -> Picture:
    """Draw the first failing array of ``result`` with every differing element marked.

    Args:
        result: a failed :class:`simulator.exercises.CheckResult` whose ``tile`` is set (a
            ladder rung's check: the instruction, trace and dS rungs).
        path: write a PNG there (str or Path), or None.
        title: the figure's title (default: the puzzle, the case and the array).
    Returns:
        :class:`Picture` (the figure, the marked coordinates, the circled one, the ulps).
    Raises:
        ValueError: ``result`` passed, or records no tile (the legacy rungs' probe and combine
            cases).
    """
    if result.passed:
        raise ValueError("result: it passed; there is nothing to draw")
    if result.tile is None:
        raise ValueError(f"result: puzzle {result.exercise} ({result.name}) records no tile for "
                         "this failure (only its text)")
    import matplotlib.pyplot as plt  # noqa: PLC0415 - only for pictures
    from matplotlib.patches import Ellipse  # noqa: PLC0415

    got, want, dtype = result.tile
    ulps = ulp_distance_bits(got, want, 8 * got.dtype.itemsize)
    differs = got != want
    ulps = np.where(differs & (ulps == 0), 1.0, ulps)     # two NaNs of other payloads
    marked = np.argwhere(differs)
    first = tuple(int(i) for i in marked[0]) if len(marked) else ()
    grid = _grid(np.where(differs, np.log2(1 + np.minimum(ulps, 2.0**40)), np.nan))
    fig, ax = plt.subplots(figsize=(8, 5.5))
    ax.set_facecolor("0.85")
    im = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="viridis")
    fig.colorbar(im, ax=ax, label="log2(1 + ulps) of differing elements")
    if first:
        r, c = _grid_index(got.shape, first)
        ax.add_patch(Ellipse((c, r), max(1.2, grid.shape[1] / 12), max(3.0, grid.shape[0] / 12),
                             fill=False, color="red", linewidth=2))
    if got.ndim >= 2:
        ax.set_xlabel("register" if got.ndim == 3 else "column")
        ax.set_ylabel("thread (128 per warpgroup)" if got.ndim == 3 else "row")
    else:
        ax.set_xlabel(f"element mod {ROW}")
        ax.set_ylabel(f"element // {ROW}")
    where = result.where or {}
    ax.set_title(title or f"puzzle {result.exercise} ({result.name}): {where.get('array', '')}, "
                 f"{len(marked):,} of {got.size:,} differ; first circled at {first}", fontsize=9)
    if path is not None:
        fig.savefig(path, dpi=110, bbox_inches="tight")
    return Picture(fig, marked, first, ulps)
