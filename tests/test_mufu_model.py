"""The MUFU model object, its lazily loaded tables and its fast ex2 path.

The ex2 and lg2 cores are shaped for speed and memory (one gather into the combined ex2 table,
the range checks folded into two reductions; lg2's rounded-to-odd L computed per element, no
float64 table). These tests hold them to a straightforward formulation of the same rules, on a
dense structured sample of every sign and exponent (each call on one binade pair, so the
in-range, flush and clamping paths all run), bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator.numerics import mufu, mufu_data

LOW_BITS = np.array([0x00, 0x01, 0x5A, 0xA5, 0xFF], dtype=np.uint32)


@pytest.fixture(scope="module")
def tables():
    t = dict(mufu_data.load("sm90"))
    neg = t["ex2_neg"].astype(np.int32)
    neg2 = np.empty_like(neg)
    neg2[0] = neg[0]
    neg2[1:] = neg[:0:-1] + (1 << 23)
    t["ex2c"] = np.concatenate([t["ex2_pos"].astype(np.int32), neg2])
    t0 = t["lg2_e0"].view(np.float32).astype(np.float64)
    c = 1.0 + t["lg2_em1"].view(np.float32).astype(np.float64)
    floor23 = np.floor(t0 * 2.0**23)
    t["lg2_s"] = (floor23 * 2.0 + ((t0 * 2.0**23 != floor23) | (c != t0))) * 2.0**-24
    return t


def _binade(sign: int, e: int) -> np.ndarray:
    """float32 bit patterns of one binade: every 2^15 high-mantissa value x LOW_BITS."""
    hi = np.arange(1 << 15, dtype=np.uint32) << np.uint32(8)
    u = (hi[:, None] | LOW_BITS[None, :]).reshape(-1)
    return u | np.uint32((sign << 31) | (e << 23))


def _ex2_straightforward(x: np.ndarray, t: dict) -> np.ndarray:
    """MUFU.EX2 (ftz) step by step: clamp, fixed point, split, one gather, flush, NaN."""
    ex2c = t["ex2c"]  # [lo] = ex2_pos[lo], [2^23 | lo] = 2 ex2_neg[2^23 - lo] (lo > 0)
    f = np.fmin(x, np.float32(128.0))
    f = np.fmax(f, np.float32(-130.0))
    fx = (f * np.float32(2.0**23)).astype(np.int32)
    idx = ((fx >> np.int32(8)) & np.int32(0x800000)) | (fx & np.int32(0x7FFFFF))
    r = ex2c.take(idx, mode="clip") + (fx & np.int32(~0x7FFFFF))
    r[r < np.int32(0x00800000)] = 0
    r = r.view(np.uint32)
    r[np.isnan(x)] = 0x7FFFFFFF
    return r


def _lg2_straightforward(x: np.ndarray, t: dict) -> np.ndarray:
    """MUFU.LG2 (ftz) as first written, with the float64 table of L rounded to odd."""
    lg2_s = t["lg2_s"]
    u = x.view(np.uint32)
    e = ((u >> np.uint32(23)) & np.uint32(0xFF)).view(np.int32) - np.int32(127)
    j = u & np.uint32(0x7FFFFF)
    v = lg2_s[j] + e
    v.view(np.uint64)[:] &= np.uint64(0xFFFF_FFFF_E000_0000)
    r = v.astype(np.float32).view(np.uint32)
    r[e == 0] = t["lg2_e0"][j[e == 0]]
    r[e == -1] = t["lg2_em1"][j[e == -1]]
    r[e == -127] = 0xFF800000
    r[e == 128] = 0x7F800000
    r[(u > 0x80000000) & (e != -127)] = 0x7FFFFFFF
    r[np.isnan(x)] = 0x7FFFFFFF
    return r


def test_ex2_equals_the_straightforward_formulation(tables):
    checked = 0
    for e in range(256):
        pos, neg = _binade(0, e), _binade(1, e)
        for u in (pos, neg, np.concatenate([pos, neg])):  # one sign each, then both in one call
            x = u.view(np.float32)
            want = _ex2_straightforward(x, tables)
            got = mufu.ex2(x).view(np.uint32)
            bad = np.flatnonzero(got != want)
            assert bad.size == 0, f"exponent {e}: x bits {u[bad[:4]]}, got {got[bad[:4]]}"
            checked += u.size
    assert checked == 256 * 4 * 5 << 15


@pytest.mark.parametrize("values", [
    [-125.5, -125.0, 0.0, 1.0],  # in range, just above the no-flush bound
    [-129.9, -126.5, -126.0, -3.0],  # in range, results flushed
    [-130.0, 128.0, 127.99999, -0.0],  # the clamp bounds themselves
    [np.nan, 1.0, -1.0, 2.5],  # NaN: clamped path
    [np.inf, -np.inf, 3.0e38, -3.0e38],
    [1e-45, -1e-45, 1.1754942e-38, -2.0**-24],
])
def test_ex2_range_paths_equal_the_straightforward_formulation(tables, values):
    x = np.array(values, dtype=np.float32)
    assert mufu.ex2(x).view(np.uint32).tolist() == _ex2_straightforward(x, tables).tolist()
    assert mufu.ex2(x, ftz=False).view(np.uint32)[~(x < -126)].tolist() == \
        _ex2_straightforward(x, tables)[~(x < -126)].tolist()


def test_lg2_equals_the_straightforward_formulation(tables):
    for e in range(256):
        u = np.concatenate([_binade(0, e), _binade(1, e)])
        x = u.view(np.float32)
        got = mufu.lg2(x).view(np.uint32)
        want = _lg2_straightforward(x, tables)
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, f"exponent {e}: x bits {u[bad[:4]]}"


def test_model_is_resolved_once_per_table_set():
    """One model per calibrated table set: the GPUs whose records name the same tables share
    it (the H200, the H100 SXM and PCIe: the GH100 die, docs/h100.md)."""
    assert mufu.model("h200") is mufu.model("h200") is mufu.model()
    assert mufu.model("h100") is mufu.model("h200") is mufu.model("h100-pcie")
    assert mufu.model("ideal").ideal and not mufu.model("h200").ideal
    x = np.linspace(-4, 4, 33, dtype=np.float32)
    m = mufu.model("h200")
    for name in ("ex2", "rcp", "lg2"):
        assert getattr(m, name)(x).view(np.uint32).tolist() == \
            getattr(mufu, name)(x).view(np.uint32).tolist()
    assert m.tanh(x).view(np.uint32).tolist() == mufu.tanh(x).view(np.uint32).tolist()
    with pytest.raises(ValueError, match=r"unknown MUFU model 'sm80'.*\['h200', 'h100', 'h100-pcie'\]"):
        mufu.model("sm80")
    for bad in (["h200"], None, 90):  # unhashable too: a ValueError naming the argument
        with pytest.raises(ValueError, match=r"model: expected a string, one of \['ideal', 'h200'"):
            mufu.ex2(np.float32([1.0]), model=bad)
    with pytest.raises(TypeError, match="x: expected a float32 array, got dtype float64"):
        m.ex2(np.zeros(2))


def test_only_the_tables_a_function_needs_are_loaded(tmp_path, monkeypatch):
    monkeypatch.setenv("FA3SIM_CACHE", str(tmp_path))
    monkeypatch.delenv(mufu_data.ENV_DIR, raising=False)
    m = mufu.MufuModel("sm90")
    m.rcp(np.float32([3.0]))
    assert [p.name.split("-")[2] for p in tmp_path.glob("*.npy")] == ["rcp"]
    assert "_rcp_table" in vars(m) and "_ex2c" not in vars(m) and "_tanh_tables" not in vars(m)
    assert not m._rcp_table.flags.writeable
    again = mufu.MufuModel("sm90")  # from the cache: mapped, not read
    assert again.rcp(np.float32([3.0])).view(np.uint32) == m.rcp(np.float32([3.0])).view(np.uint32)
    assert isinstance(again._rcp_table, np.memmap) and not again._rcp_table.flags.writeable


def test_cold_resolve_decodes_in_parallel_and_leaves_no_thread(tmp_path, monkeypatch):
    """Decoding spreads chunks over threads and resolves functions side by side; the decoded
    tables are the same as with one thread (they pass their recorded checksums either way)
    and no decode thread outlives the call (a caller may fork right after)."""
    import threading

    monkeypatch.delenv(mufu_data.ENV_DIR, raising=False)
    before = threading.active_count()
    monkeypatch.setenv("FA3SIM_CACHE", str(tmp_path / "many"))
    many = mufu.MufuModel("sm90").resolve(("rcp", "lg2"))
    assert threading.active_count() == before
    monkeypatch.setenv("FA3SIM_CACHE", str(tmp_path / "one"))
    monkeypatch.setattr(mufu_data, "_decode_threads", lambda: 1)
    monkeypatch.setattr(mufu_data, "_SLOTS", {})
    one = mufu.MufuModel("sm90").resolve(("rcp", "lg2"))
    assert np.array_equal(many._rcp_table, one._rcp_table)
    assert all(np.array_equal(x, y) for x, y in zip(many._lg2_tables, one._lg2_tables, strict=True))


def _counting_reference(monkeypatch, first_call):
    """reference_bits counting its calls (one per decoded chunk), ``first_call()`` run at the
    first one."""
    calls = []
    orig = mufu_data.reference_bits

    def ref(name, x):
        calls.append(name)
        if len(calls) == 1:
            first_call()
        return orig(name, x)

    monkeypatch.setattr(mufu_data, "reference_bits", ref)
    return calls


def test_chunk_error_surfaces_and_stops_the_decode(tmp_path, monkeypatch):
    """An error in one chunk surfaces as the MufuDataError a one-thread decode gave, and the
    chunks not started yet are skipped (a table has 32 of them)."""
    monkeypatch.setenv("FA3SIM_CACHE", str(tmp_path))
    monkeypatch.delenv(mufu_data.ENV_DIR, raising=False)

    def fail():
        raise ValueError("bad chunk")

    calls = _counting_reference(monkeypatch, fail)
    with pytest.raises(mufu.MufuDataError, match=r"malformed content \(ValueError\('bad chunk'\)\)"):
        mufu.MufuModel("sm90").resolve(("rcp",))
    assert len(calls) < 32
    assert not list(tmp_path.glob("*.npy"))


def test_interrupted_cold_resolve_stops_decoding(tmp_path, monkeypatch):
    """Ctrl-C during a cold resolve interrupts it at once: the other functions' decodes stop
    after their chunks in progress (3 tables of 32 chunks here), nothing is cached, no thread
    is left."""
    import signal
    import threading

    monkeypatch.setenv("FA3SIM_CACHE", str(tmp_path))
    monkeypatch.delenv(mufu_data.ENV_DIR, raising=False)
    main = threading.main_thread().ident
    calls = _counting_reference(monkeypatch, lambda: signal.pthread_kill(main, signal.SIGINT))
    before = threading.active_count()
    # Python's own SIGINT handler, also in a background job (which starts with SIGINT ignored)
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            mufu.MufuModel("sm90").resolve(("rcp", "lg2"))
    finally:
        signal.signal(signal.SIGINT, handler)
    assert threading.active_count() == before
    assert len(calls) < 32  # not one table's worth (96 when the decodes ran on)
    assert not list(tmp_path.glob("*.npy"))


def test_a_function_named_twice_is_loaded_once(tmp_path, monkeypatch):
    """resolve(("rcp", "rcp")) decodes rcp's table once (32 chunks), not once per name in two
    threads at the same time (functools.cached_property has no lock from Python 3.12)."""
    monkeypatch.setenv("FA3SIM_CACHE", str(tmp_path))
    monkeypatch.delenv(mufu_data.ENV_DIR, raising=False)
    calls = _counting_reference(monkeypatch, lambda: None)
    mufu.MufuModel("sm90").resolve(("rcp", "lg2", "rcp"))
    assert calls.count("rcp") == 32


def test_ex2_of_empty_and_scalar():
    assert mufu.ex2(np.zeros(0, np.float32)).shape == (0,)
    assert mufu.ex2(np.zeros((0, 3), np.float32), ftz=False).shape == (0, 3)
    assert mufu.ex2(np.float32(-1.0)).view(np.uint32) == 0x3F000000


@pytest.mark.parametrize("name", ["ex2", "rcp", "lg2", "tanh"])
def test_ideal_rounding_equals_the_tolerance_test(name):
    """The correctly rounded functions test for nearby midpoints on the bits of the float64
    value; the relative-tolerance test they used before gives the same bits (random patterns
    over every exponent, and three dense binades)."""
    from simulator.numerics import mufu_ideal as mi

    rng = np.random.default_rng(11)
    u = np.concatenate([rng.integers(0, 1 << 32, 1 << 21, dtype=np.uint64).astype(np.uint32),
                        _binade(0, 127)[::7], _binade(1, 126)[::7], _binade(0, 3)[::7]])
    x = mi._prep(u.view(np.float32), False)
    with np.errstate(all="ignore"):
        f64 = x.astype(np.float64)
        y = {"ex2": np.exp2, "rcp": lambda v: 1.0 / v, "lg2": np.log2, "tanh": np.tanh}[name](f64)
    exact = {"ex2": mi._exact_ex2, "rcp": mi._exact_rcp, "lg2": mi._exact_lg2,
             "tanh": mi._exact_tanh}[name]
    got = mi._round_to_f32(x, y.copy(), exact).view(np.uint32)
    want = mi._round_to_f32_general(x, y.copy(), exact).view(np.uint32)
    assert np.array_equal(got, want)



def test_resolve_loads_the_named_functions_tables(tmp_path, monkeypatch):
    monkeypatch.setenv("FA3SIM_CACHE", str(tmp_path))
    m = mufu.MufuModel("sm90").resolve(("rcp", "lg2"))
    assert {"_rcp_table", "_lg2_tables"} <= set(vars(m)) and "_ex2c" not in vars(m)
    assert mufu.model("ideal").resolve() is mufu.model("ideal")
    want = r"functions: expected names from \['ex2', 'lg2', 'rcp', 'tanh'\], got \['exp'\]"
    with pytest.raises(ValueError, match=want):
        m.resolve(("ex2", "exp"))
