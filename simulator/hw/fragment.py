"""Register fragments: an array ``[..., thread, register]`` together with its layout.

A :class:`Fragment` is what a warpgroup (or warp) holds in registers for one MMA operand or
accumulator: ``data[..., t, r]`` is register ``r`` of thread ``t``; leading axes are batch axes
(many CTAs). Its :class:`~simulator.hw.layouts.Layout` says which matrix element each register
holds, so ``to_matrix`` / ``from_matrix`` convert exactly, both ways.
"""

from __future__ import annotations

import numpy as np

from .layouts import Layout, accumulator_layout, rowcol_view
from .threads import QUAD_SIZE, WARP_SIZE, thread_index

NOTEBOOKS_HINT = "pip install 'fa3-hopper-simulator[notebooks]'"


def _as_layout(layout) -> Layout:
    if isinstance(layout, Layout):
        return layout
    if isinstance(layout, str):
        return accumulator_layout(layout)
    raise TypeError(f"layout: expected a Layout or an accumulator shape string like "
                    f"'m64n128k16', got {type(layout).__name__}")


class Fragment:
    """Per-thread registers of a warpgroup/warp plus their layout.

    Args:
        data: array ``[..., threads, registers]`` (any dtype; float32 for accumulators).
        layout: a :class:`Layout`, or an accumulator shape string (``"m64n128k16"``).
    Raises:
        ValueError: the thread axis or the register count does not match the layout (the
            message says which).
    """

    __slots__ = ("data", "layout")

    def __init__(self, data, layout):
        self.layout = _as_layout(layout)
        self.data = self.layout.check_fragment(data, "Fragment data")

    # ---- construction and conversion -------------------------------------------------------
    @classmethod
    def from_matrix(cls, matrix, layout) -> Fragment:
        """Distribute ``matrix [..., rows, cols]`` over the threads as ``layout`` says."""
        lay = _as_layout(layout)
        return cls(lay.from_matrix(matrix), lay)

    def to_matrix(self) -> np.ndarray:
        """Gather the fragment back into the matrix ``[..., rows, cols]``."""
        return self.layout.to_matrix(self.data)

    def rowcol(self) -> np.ndarray:
        """``convert_layout_acc_rowcol`` view as an array ``[..., threads, nrow, ncol]`` (a copy).

        Raises:
            ValueError: not an accumulator fragment.
        """
        return rowcol_view(self.layout).apply(self.data)

    def with_rowcol(self, tensor) -> Fragment:
        """A new fragment with the same layout from a row/col array ``[..., threads, nrow, ncol]``."""
        return Fragment(rowcol_view(self.layout).unapply(tensor), self.layout)

    def replace(self, data) -> Fragment:
        """A new fragment with the same layout and new ``data``."""
        return Fragment(data, self.layout)

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """The leading (batch) axes of ``data``."""
        return self.data.shape[:-2]

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    def __repr__(self) -> str:
        return (f"Fragment({self.layout.name}, batch_shape={self.batch_shape}, "
                f"dtype={self.data.dtype})")

    # ---- inspection ---------------------------------------------------------------------
    def _select(self, batch) -> np.ndarray:
        batch = batch if isinstance(batch, tuple) else (batch,)
        if len(batch) != len(self.batch_shape):
            raise ValueError(f"batch: expected an index of {len(self.batch_shape)} leading axes "
                             f"{self.batch_shape}, got {batch!r}")
        return self.data[batch] if batch else self.data

    def dump_quad(self, quad: int = 0, *, warp: int = 0, batch=()) -> str:
        """Readable text of the four lanes of one quad: thread, lane, register, (row, col), value.

        Args:
            quad: quad index in the warp (0..7).
            warp: warp index in the warpgroup (0..3; 0 for a warp fragment).
            batch: index into the batch axes (a tuple; ``()`` when there are none).
        Returns:
            a multi-line string; float32 values are shown with their bit pattern.
        Raises:
            ValueError: quad/warp out of range or a batch index of the wrong length.
        """
        nwarps = self.layout.threads // WARP_SIZE
        if not 0 <= quad < WARP_SIZE // QUAD_SIZE:
            raise ValueError(f"quad must be in 0..7, got {quad}")
        if not 0 <= warp < nwarps:
            raise ValueError(f"warp must be in 0..{nwarps - 1}, got {warp}")
        d = self._select(batch)
        threads = warp * WARP_SIZE + quad * QUAD_SIZE + np.arange(QUAD_SIZE)
        ti = thread_index(threads, threads=self.layout.threads)
        lines = [f"{self.layout.name}: warp {warp}, quad {quad} (lanes {4 * quad}..{4 * quad + 3})"
                 + (f", batch {tuple(batch)}" if batch != () else "")]
        for k, t in enumerate(threads):
            lines.append(f"  thread {int(t):3d}  lane {int(ti.lane[k]):2d}  "
                         f"lane_in_quad {int(ti.lane_in_quad[k])}")
            for r in range(self.layout.registers):
                v = d[t, r]
                if d.dtype == np.float32:
                    val = f"{float(v): .9g}  (0x{int(np.float32(v).view(np.uint32)):08x})"
                else:
                    val = repr(v.item() if hasattr(v, "item") else v)
                lines.append(f"    r{r:<3d} -> (row {int(self.layout.row[t, r]):3d}, "
                             f"col {int(self.layout.col[t, r]):3d})  {val}")
        return "\n".join(lines)

    def plot(self, *, batch=(), color_by: str = "thread", annotate: bool | None = None,
             ax=None, cmap=None):
        """matplotlib picture of ownership: every matrix element with its thread and register.

        Args:
            batch: index into the batch axes (``()`` when none).
            color_by: "thread", "warp", "quad", "lane_in_quad", "register" or "value".
            annotate: write "t<thread>/r<register>" in each cell (default: when the matrix has
                at most 64 x 32 elements).
            ax: a matplotlib Axes to draw into (default: a new figure).
            cmap: a matplotlib colormap name (default "tab20" for owners, "viridis" for values).
        Returns:
            the matplotlib Figure.
        Raises:
            ImportError: matplotlib is missing (install with
                ``pip install 'fa3-hopper-simulator[notebooks]'``).
            ValueError: unknown ``color_by``.
        """
        try:
            import matplotlib.pyplot as plt  # noqa: PLC0415 - optional dependency
        except ImportError as exc:
            raise ImportError(f"Fragment.plot needs matplotlib: {NOTEBOOKS_HINT}") from exc
        lay = self.layout
        owners = thread_index(lay.thread_of.astype(np.int64), threads=lay.threads)
        choices = {"thread": owners.thread, "warp": owners.warp, "quad": owners.quad_in_warpgroup,
                   "lane_in_quad": owners.lane_in_quad, "register": lay.reg_of}
        if color_by == "value":
            grid = np.asarray(lay.to_matrix(self._select(batch)), dtype=np.float64)
        elif color_by in choices:
            grid = choices[color_by]
        else:
            raise ValueError(f"color_by must be one of {sorted(choices) + ['value']}, got "
                             f"{color_by!r}")
        if ax is None:
            fig, ax = plt.subplots(figsize=(min(2 + lay.cols * 0.35, 40),
                                            min(1.5 + lay.rows * 0.3, 40)))
        else:
            fig = ax.figure
        default_cmap = "viridis" if color_by == "value" else "tab20"
        im = ax.imshow(grid, cmap=cmap or default_cmap, interpolation="nearest", aspect="auto")
        fig.colorbar(im, ax=ax, label=color_by)
        if annotate is None:
            annotate = lay.rows * lay.cols <= 64 * 32
        if annotate:
            for i, j in np.ndindex(lay.rows, lay.cols):
                ax.text(j, i, f"t{lay.thread_of[i, j]}\nr{lay.reg_of[i, j]}", ha="center",
                        va="center", fontsize=5)
        ax.set_xlabel("col")
        ax.set_ylabel("row")
        ax.set_title(f"{lay.name}: owner (thread/register), colour = {color_by}")
        return fig
