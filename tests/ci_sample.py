"""CI's deterministic sample of the recorded device cases that the tests replay one by one.

Replaying every recorded call of the real FA3 library takes most of the suite's time, so each
such test is parametrised over every recorded case, and the cases outside a sample carry the
``full_replay`` marker: tests/conftest.py deselects them unless pytest runs with
``--full-replay``. ``python -m simulator verify`` replays every recorded case whatever pytest
does (docs/testing.md).

The sample is stratified and fixed: the cases are grouped by kernel class (a caller-given key),
a seeded draw keeps ``fraction`` of each group (at least one case, so every class stays
covered), then one more case is drawn for each feature label (softcap, GQA, an empty sequence,
...) that no kept case has, and the ``always`` cases (named edge cases) are added. The same
recordings give the same sample on every machine and run.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable

import numpy as np
import pytest

#: seed of every CI sample; changing it changes which cases CI replays, never how many per class
SEED = 20261204


def pick(n: int, stratum: Callable[[int], Hashable], fraction: float,
         features: Callable[[int], Iterable[str]] | None = None,
         always: Iterable[int] = (), seed: int = SEED) -> set[int]:
    """The sampled indices among ``range(n)``.

    Args:
        n: number of recorded cases.
        stratum: case index -> its group (kernel class); each group keeps
            ``max(1, round(fraction * size))`` cases, drawn without replacement.
        fraction: share of each group kept, in (0, 1].
        features: case index -> labels of the code paths it takes; a label no kept case has
            gets one case drawn among those that have it.
        always: indices kept whatever the draw (named edge cases).
        seed: seed of the draw (numpy's default_rng).

    Raises:
        ValueError: ``fraction`` outside (0, 1] or an ``always`` index outside ``range(n)``.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction: expected a share in (0, 1], got {fraction!r}")
    chosen = {int(i) for i in always}
    if any(not 0 <= i < n for i in chosen):
        raise ValueError(f"always: expected indices in range({n}), got {sorted(chosen)}")
    rng = np.random.default_rng(seed)
    groups: dict[Hashable, list[int]] = {}
    for i in range(n):
        groups.setdefault(stratum(i), []).append(i)
    for key in sorted(groups, key=repr):  # a fixed order of draws, whatever the dict order
        members = groups[key]
        size = max(1, round(fraction * len(members)))
        chosen.update(int(i) for i in rng.choice(members, size=size, replace=False))
    if features is not None:
        labels = [frozenset(features(i)) for i in range(n)]
        for label in sorted(frozenset().union(*labels)):
            if not any(label in labels[i] for i in chosen):
                chosen.add(int(rng.choice([i for i in range(n) if label in labels[i]])))
    return chosen


def params(n: int, stratum: Callable[[int], Hashable], fraction: float, **kw) -> list:
    """``pytest.param(i)`` for every ``i`` in ``range(n)`` (ids as plain indices), those
    outside :func:`pick`'s sample marked ``full_replay``."""
    chosen = pick(n, stratum, fraction, **kw)
    return [pytest.param(i, id=str(i), marks=() if i in chosen else pytest.mark.full_replay)
            for i in range(n)]


# ---- the recordings of the real FA3 library (forward) -------------------------------------------
def library_params(records: list[dict], sample) -> list:
    """``params`` over fa3_library_report.json's cases: a quarter of each (format, head dim,
    causal) cell (one of its five cases), every embedded-input case, and every special input,
    softcap, scale, ``seqused_k`` (with a 0), descale, seqlen_q 1, causal seqlen_q > seqlen_k,
    GQA, MQA and batched case kind at least once."""
    cases = [r["case"] for r in records]

    def stratum(i):
        c = cases[i]
        return ("embedded", i) if "embedded" in c else (c["dtype"], c["head_dim"], c["causal"])

    def features(i):
        c = cases[i]
        if "embedded" in c:
            return {"embedded"}
        f = {c["special"]}
        f |= {name for name, on in (
            (f"softcap {c['softcap']:g}", c["softcap"]), ("softmax_scale", c["softmax_scale"] is not None),
            ("seqused_k", c["seqused_k"] is not None), ("seqused_k 0", 0 in (c["seqused_k"] or ())),
            ("descales", c["descales"]), ("seqlen_q 1", c["seqlen_q"] == 1),
            ("causal sq > sk", c["causal"] and c["seqlen_q"] > c["seqlen_k"]),
            ("mqa", c["heads_kv"] == 1 < c["heads"]), ("gqa", 1 < c["heads_kv"] < c["heads"]),
            ("batch > 1", c["batch"] > 1), ("values sampled", f"c{i}_out" in sample)) if on}
        return f

    return params(len(cases), stratum, 0.25, features=features)


# ---- the recorded calls of FA3's Python API -----------------------------------------------------
def _api_features(case: dict, record: dict, full_values: bool) -> set[str]:
    c = case
    f = {f"api {c['api']}", f"dtype {c.get('dtype')}", f"causal {c.get('causal')}",
         f"splits {min(c.get('num_splits', 0), 2)}", f"batch > 1 {c['batch'] > 1}"}
    f |= {k for k in ("seqlen_new", "cache_batch_idx", "cache_leftpad", "softcap", "descales",
                      "seqused_k", "seqused_q", "empty") if c.get(k)}
    if c.get("heads_kv") and c["heads"] > c["heads_kv"]:
        f.add(f"gqa {c['heads'] // c['heads_kv']}")
    if 0 in (c.get("seqlens_k") or ()):
        f.add("an empty sequence")
    if "head_dim_v" in c:
        f.add(f"head_dim_v {c['head_dim_v']}")
    if c["api"] == "combine":
        f.add(f"combine into {c['out_dtype']}")
    if "out_accum" in record:
        f.add("split partials")
    if c.get("seqlen_cache", 0) >= 32768:
        f.add("cache 32k")
    if full_values:
        f.add("values sampled")
    return f


def api_params(records: list[dict], sample) -> list:
    """``params`` over fa3_api_report.json's calls: a quarter of each (API, format, head dim,
    V head dim) class, at least one; and every split count (FA3's heuristic, 1, more),
    append, ``cache_batch_idx``, ``cache_leftpad``, softcap, descale, ``seqused_*``, empty
    sequence, GQA ratio, combine output type, Split-kernel partials and 32k cache at least once."""
    cases = [r["case"] for r in records]
    return params(len(cases), lambda i: (cases[i]["api"], cases[i].get("dtype"), cases[i].get("head_dim"),
                                         cases[i].get("head_dim_v")), 0.25,
                  features=lambda i: _api_features(cases[i], records[i], f"c{i}_out" in sample))


def drawn_api_params(records: list[dict]) -> list:
    """``params`` over a device replay's sampled hypothesis-drawn API calls: a third of each
    (API, format) group, and every feature of :func:`api_params` (and V head dim) once."""
    cases = [r["case"] for r in records]
    return params(len(cases), lambda i: (cases[i]["api"], cases[i].get("dtype")), 1 / 3,
                  features=lambda i: _api_features(cases[i], records[i], False))
