"""How the H200's MUFU.EX2 table (``simulator.numerics.mufu_data``, 2^24 entries, measured on
the device) departs from the correctly rounded 2^f: the numbers behind docs/engine.md's note on
what a faster compiled MUFU.EX2 would need. Prints, for the x >= 0 half (index bit 23 clear)
and the x < 0 half against it: how the halves differ (the x < 0 half is the x >= 0 half one
index lower, which ``simulator.engine.ex2_packed`` relies on), how well a smooth error model
predicts the entries (per segment of the 23-bit fraction, a least-squares polynomial of the
error in ulps; an entry is predicted as the nearest integer to 2^f * 2^23 plus the model), with
the band around the rounding midpoint that holds every mispredicted entry; then each half fitted
by a cubic per segment of 2^15 entries (what a read-free path for most elements would use),
and the spread per segment of 4096 entries that the compiled engine's one-bit packing needs
below 2 ulp.
Run: ``python scripts/ex2_table_structure.py`` (about 1 GB, a minute).
"""

import numpy as np

from simulator.numerics.mufu import model

HALF = 1 << 23


def _band(pred: np.ndarray, hw: np.ndarray) -> tuple[float, float, float]:
    """(mispredicted fraction, half-width of the band around 0.5 holding every mispredicted
    entry's fractional part, fraction of all entries inside that band)."""
    whole = np.floor(pred)
    frac = pred - whole
    wrong = (hw - whole) != (frac > 0.5)
    dist = np.abs(frac - 0.5)
    width = float(dist[wrong].max()) if wrong.any() else 0.0
    return float(wrong.mean()), width, float((dist <= width).mean())


def main() -> None:
    table = model("h200").ex2_table().astype(np.int64)
    pos, neg = table[:HALF], table[HALF:]
    diff, counts = np.unique(neg - pos, return_counts=True)
    print("x < 0 entry minus x >= 0 entry of the same index (ulps):",
          ", ".join(f"{d:+d}: {c / HALF:.2%}" for d, c in zip(diff, counts, strict=True)))
    shifted = bool(neg[0] == pos[0] and np.array_equal(neg[1:], pos[:-1]))
    print(f"x < 0 entry 2^23 + j equal to x >= 0 entry j - 1 for every j >= 1, and entry 2^23 "
          f"to entry 0: {shifted}")
    f = np.arange(HALF, dtype=np.float64) / HALF
    exact = np.exp2(f) * HALF                      # 2^f in units of the last place of [1, 2)
    hw = pos - 0x3F800000 + HALF
    err = hw - exact
    print(f"x >= 0: error in ulps {err.min():+.3f}..{err.max():+.3f}, mean {err.mean():+.3f}")
    for label, segments, degree in (("one polynomial, degree 8", 1, 8),
                                     ("64 segments, quadratic", 64, 2),
                                     ("256 segments, quadratic", 256, 2),
                                     ("1024 segments, quadratic", 1024, 2)):
        width = HALF // segments
        x = np.arange(width, dtype=np.float64) / width
        basis = np.vander(x, degree + 1)
        coef, *_ = np.linalg.lstsq(basis, err.reshape(segments, width).T, rcond=None)
        fit = (basis @ coef).T.reshape(-1)
        wrong, band, inside = _band(exact + fit, hw)
        print(f"{label}: {wrong:.2%} mispredicted, all within +-{band:.3f} ulp of a rounding "
              f"midpoint, a band holding {inside:.1%} of the entries")
    for h, half in enumerate((pos, neg)):  # each half's entries fitted directly, per segment
        _cubic_segments(half, h)
    # the x < 0 half's segments start one entry later (the shift above): fitted as shifted
    _cubic_segments(np.concatenate([neg[1:], neg[-1:]]), 1, label="x < 0 read one index higher")
    spread = (exact - hw).reshape(-1, 4096)
    print(f"x >= 0, per 4096 entries: mantissa - 2^f 2^23 spreads at most "
          f"{(spread.max(axis=1) - spread.min(axis=1)).max():.3f} ulp (below 2: one bit per "
          f"entry places it, simulator/engine/ex2_packed.py)")


def _cubic_segments(entries: np.ndarray, h: int, width: int = 1 << 15, label: str = "") -> None:
    """A cubic per segment of ``width`` entries fitted to the entries themselves (as integers,
    2^23 per unit): the mispredictions, the band around the rounding midpoint that holds them,
    and whether every entry inside the band is the fit's floor or the next integer."""
    target = (entries - 0x3F800000 + HALF).astype(np.float64)
    x = np.arange(width, dtype=np.float64) / width
    basis = np.vander(x, 4)
    coef, *_ = np.linalg.lstsq(basis, target.reshape(-1, width).T, rcond=None)
    fit = (basis @ coef).T.reshape(-1)
    wrong, band, inside = _band(fit, target)
    floor_step = target - np.floor(fit)
    dist = np.abs(fit - np.floor(fit) - 0.5)
    ok = bool(np.isin(floor_step[dist <= band], (0, 1)).all())
    print(f"{label or ('x < 0' if h else 'x >= 0')}, a cubic per {width} entries: "
          f"{wrong:.2%} mispredicted, "
          f"band +-{band:.3f} ulp holding {inside:.1%}, largest |entry - fit| "
          f"{np.abs(target - fit).max():.2f} ulp, in-band entries floor or floor + 1: {ok}")


if __name__ == "__main__":
    main()
