"""CI's sample of recorded cases (tests/ci_sample.py): fixed, every class and feature kept."""

from __future__ import annotations

import ci_sample
import pytest

from simulator.replay import fa3_api, fa3_cases, fa3_library


def test_every_group_and_feature_is_kept_and_the_draw_is_fixed():
    stratum = lambda i: i % 7  # noqa: E731
    features = lambda i: {"rare"} if i == 95 else {f"f{i % 11}"}  # noqa: E731
    chosen = ci_sample.pick(100, stratum, 0.2, features=features, always=[3])
    assert chosen == ci_sample.pick(100, stratum, 0.2, features=features, always=[3])
    assert {stratum(i) for i in chosen} == set(range(7)) and 3 in chosen and 95 in chosen
    assert {f"f{k}" for k in range(11)} <= set().union(*(features(i) for i in chosen))
    assert len(chosen) <= 7 * 3 + 11 + 2  # round(0.2 * 14 or 15) = 3 per group, then the extras
    assert ci_sample.pick(100, stratum, 0.2, seed=1) != ci_sample.pick(100, stratum, 0.2, seed=2)


@pytest.mark.parametrize("fraction, always", [(0, ()), (1.5, ()), (0.5, [10])])
def test_bad_arguments_are_refused(fraction, always):
    with pytest.raises(ValueError, match="fraction|always"):
        ci_sample.pick(10, lambda i: 0, fraction, always=always)


def test_the_library_sample_keeps_every_cell_and_the_embedded_calls():
    report, sample = fa3_library.load()
    params = ci_sample.library_params(report["cases"], sample)
    kept = [p.values[0] for p in params if not p.marks]
    cases = [report["cases"][i]["case"] for i in kept]
    cells = {(c["dtype"], c["head_dim"], c["causal"]) for c in cases if "embedded" not in c}
    assert len(cells) == sum(2 * len(d) for d in fa3_cases.HEAD_DIMS.values())
    assert sum("embedded" in c for c in cases) == 4
    assert len(params) == len(report["cases"]) and 0.2 < len(kept) / len(params) < 0.3


def test_the_api_sample_keeps_every_api_kernel_and_split_kind():
    report, sample = fa3_api.load()
    params = ci_sample.api_params(report["cases"], sample)
    kept = {p.values[0] for p in params if not p.marks}
    every = [r["case"] for r in report["cases"]]
    key = lambda c: (c["api"], c.get("dtype"), c.get("head_dim"), c.get("head_dim_v"))  # noqa: E731
    assert {key(every[i]) for i in kept} == {key(c) for c in every}
    assert {min(every[i].get("num_splits", 0), 2) for i in kept} == {0, 1, 2}
    assert any("out_accum" in report["cases"][i] for i in kept)
