"""The exercises (simulator.exercises): the checker accepts each reference solution on the H200's
recordings, rejects wrong attempts at the step and position where they first differ, and a
stub says what to do.

The recordings: the forward's step traces (simulator/data/device/forward_traces.npz), the
reduction probe (hw_reduce.npz) and the real FA3 library's split-KV calls (fa3_api_*). Each
wrong attempt below is a mistake a reader makes (FMUL + FADD for the FFMA, one butterfly round,
no ``.ftz``, Max_offset 0, a combine without the max subtraction); the expected positions are
the recordings' (the device's bits at that place are asserted where the claim is about them).
"""

from __future__ import annotations

import ast
import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simulator import exercises
from simulator.compare import bits
from simulator.exercises import EXERCISES, puzzles, solutions
from simulator.exercises.recorded import trace_cases
from simulator.hw import shfl_down, shfl_xor
from simulator.numerics import fadd, ffma, fmax, fmul, fsub
from simulator.numerics.mufu import LN2_F32, LOG2E_F32, ex2, lg2, rcp

ROOT = Path(__file__).resolve().parents[1]
NEG_INF = np.float32(-np.inf)
EXPECTED_CASES = {"reduce_max": 11, "online_rescale": 5, "fp8_exp2": 2, "combine": 29, "finalize": 7}
LEGACY = tuple(EXPECTED_CASES)


# ---- the reference solutions pass, the stubs say what to do ---------------------------------------
@pytest.mark.parametrize("name", LEGACY)
def test_reference_solution_passes(name):
    ex = exercises.puzzle(name)
    result = exercises.check(name, getattr(solutions, ex.name))
    assert result.passed, str(result)
    assert result.failing == 0 and result.where is None
    assert result.cases == EXPECTED_CASES[name] and result.compared > 5000
    assert str(result).startswith(f"puzzle {ex.number} ({ex.name}): PASS")


@pytest.mark.parametrize("name", LEGACY)
def test_stub_raises_a_clear_error(name):
    ex = exercises.puzzle(name)
    with pytest.raises(NotImplementedError, match=rf"puzzle {name} is a stub"
                                                  rf".*check\('{name}', your_function\)"):
        exercises.check(name, ex.stub)
    assert getattr(puzzles, ex.name) is ex.stub and ex.stub.__doc__.startswith(f"Puzzle {name} ")


def test_solutions_are_kept_apart():
    """Nothing the reader imports with the exercises imports the solutions."""
    for name in ("__init__", "puzzles", "checker", "recorded"):
        tree = ast.parse((ROOT / "simulator" / "exercises" / f"{name}.py").read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)
                    for a in n.names} | {n.module or "" for n in ast.walk(tree)
                                         if isinstance(n, ast.ImportFrom)}
        assert not any("solutions" in m for m in imported), name


def test_check_arguments():
    with pytest.raises(ValueError, match="number: expected a puzzle number in"):
        exercises.check(99, solutions.reduce_max)
    with pytest.raises(TypeError, match="fn: expected a function"):
        exercises.check("reduce_max", "reduce_max")


def test_wrong_return_type_or_shape_is_a_failure_saying_so():
    r = exercises.check("reduce_max", lambda s, m: solutions.reduce_max(s, m).astype(np.float64))
    assert not r.passed and "expected float32" in str(r) and "float64" in str(r)
    r = exercises.check("finalize", lambda *a: solutions.finalize(*a)[:2])
    assert not r.passed and "expected a tuple of 3 arrays" in str(r)
    r = exercises.check("fp8_exp2", lambda s, m, c: solutions.fp8_exp2(s, m, c)[..., :1])
    assert not r.passed and "expected shape" in str(r)


# ---- exercise 1: the quad max ----------------------------------------------------------------------
def _reduce_max(*, ftz=True, lane_masks=(2, 1), shuffle=shfl_xor, keep_prev=True):
    def fn(scores, row_max):
        m = scores[..., 0] if row_max is None or not keep_prev else fmax(row_max, scores[..., 0], ftz=ftz)
        for ni in range(1, scores.shape[-1]):
            m = fmax(m, scores[..., ni], ftz=ftz)
        for lane_mask in lane_masks:
            m = fmax(m, shuffle(m, lane_mask, axis=-2), ftz=ftz)
        return m
    return fn


def test_reduce_max_with_one_butterfly_round_diverges_at_the_first_max_get_scale():
    r = exercises.check("reduce_max", _reduce_max(lane_masks=(1,)))
    assert not r.passed and r.failing == 11
    w = r.where
    assert (w["case"], w["event_index"], w["step"], w["array"]) == (
        "recorded step trace 'bf16_causal_plain'", 2, "max_get_scale", "row_max")
    assert (w["warpgroup"], w["thread"], w["position"]) == (0, 0, (1,))
    assert w["b"] == "0x41f0a4d7 (30.0804882)"           # the H200's row max of tile row 8
    assert "row 8 of the warpgroup's 64" in str(r) and "H200          = 0x41f0a4d7" in str(r)


def test_reduce_max_with_shfl_down_reads_another_quad():
    r = exercises.check("reduce_max", _reduce_max(shuffle=shfl_down))
    assert not r.passed and r.where["step"] == "max_get_scale" and r.where["lane"] == 1


def test_reduce_max_without_the_running_max_diverges_on_the_second_block():
    r = exercises.check("reduce_max", _reduce_max(keep_prev=False))
    assert not r.passed and (r.where["event_index"], r.where["n_block"]) == (8, 0)


def test_reduce_max_without_ftz_is_caught_by_the_probe_only():
    """The traces hold no subnormal score; the probe's do, and max.ftz flushes them."""
    r = exercises.check("reduce_max", _reduce_max(ftz=False))
    assert not r.passed and r.failing == 2
    assert r.where["case"] == "reduction probe 'hw_reduce n40 zero_init'"
    assert (r.where["block"], r.where["thread"], r.where["mi"]) == (8, 68, 0)
    assert r.where["a"].startswith("0x004d75ea") and r.where["b"] == "0x00000000 (0)"
    assert "block 8 of 32" in str(r) and "lane 4, quad 17" in str(r)


def test_max_butterfly_order_does_not_change_bits():
    """max is exact: the rounds in the other order (1 then 2) give the H200's bits everywhere
    (exercise 5 shows that the order of the sum's rounds does change them)."""
    assert exercises.check("reduce_max", _reduce_max(lane_masks=(1, 2))).passed


# ---- exercise 2: the online rescale ------------------------------------------------------------------
def _online_rescale(*, p_unfused=False, row_sum_unfused=False, scale_ffma=False, rescale_o=True):
    def fn(scores, row_max_prev, row_max, row_sum_prev, acc_o, scale_log2):
        cur = np.where(row_max == NEG_INF, np.float32(0), row_max)
        arg = (ffma(row_max_prev, scale_log2, -fmul(cur, scale_log2)) if scale_ffma
               else fmul(fsub(row_max_prev, cur), scale_log2))
        scale = ex2(arg)
        max_scaled = np.where(row_max == NEG_INF, np.float32(0), fmul(row_max, scale_log2))
        p = ex2(fadd(fmul(scores, scale_log2), -max_scaled[..., None]) if p_unfused
                else ffma(scores, scale_log2, -max_scaled[..., None]))
        row_sum = (fadd(fmul(scale, row_sum_prev), p[..., 0]) if row_sum_unfused
                   else ffma(scale, row_sum_prev, p[..., 0]))
        for ni in range(1, p.shape[-1]):
            row_sum = fadd(row_sum, p[..., ni])
        return scale, p, row_sum, fmul(acc_o, scale[..., None]) if rescale_o else acc_o
    return fn


def test_online_rescale_with_fmul_fadd_instead_of_ffma_diverges_in_p():
    r = exercises.check("online_rescale", _online_rescale(p_unfused=True))
    w = r.where
    assert not r.passed and r.failing == 5
    assert (w["event_index"], w["step"], w["n_block"], w["array"]) == (9, "online_softmax", 0, "acc_s")
    assert (w["thread"], w["position"]) == (0, (10,))
    assert w["a"] == "0x3f3b8046 (0.732426047)" and w["b"] == "0x3f3b8047 (0.732426107)"
    assert "column 16 of the K/V block" in str(r)


def test_online_rescale_with_the_row_sum_rescale_unfused_diverges_in_row_sum():
    r = exercises.check("online_rescale", _online_rescale(row_sum_unfused=True))
    assert not r.passed and (r.where["step"], r.where["array"]) == ("online_softmax", "row_sum")


def test_online_rescale_with_an_ffma_scale_diverges_in_scores_scale():
    r = exercises.check("online_rescale", _online_rescale(scale_ffma=True))
    assert not r.passed and (r.where["step"], r.where["array"]) == ("max_get_scale", "scores_scale")


def test_online_rescale_without_rescaling_o_diverges_at_rescale_o():
    r = exercises.check("online_rescale", _online_rescale(rescale_o=False))
    assert not r.passed and (r.where["step"], r.where["array"]) == ("rescale_o", "acc_o")
    assert "column 0 of the head dim" in str(r)


# ---- exercise 3: Max_offset -----------------------------------------------------------------------
def _fp8_exp2(offset):
    def fn(scores, row_max, scale_log2):
        max_scaled = np.where(row_max == NEG_INF, np.float32(0),
                              ffma(row_max, scale_log2, np.float32(-offset)))
        return ex2(ffma(scores, scale_log2, -max_scaled[..., None]))
    return fn


def test_max_offset_zero_is_256_times_too_small_at_the_first_block():
    r = exercises.check("fp8_exp2", _fp8_exp2(0))
    w = r.where
    assert not r.passed and r.failing == 2
    assert (w["case"], w["event_index"], w["step"], w["array"]) == (
        "recorded step trace 'e4m3_none_overlap_descales'", 3, "online_softmax", "acc_s")
    got, want = (np.float32(float(x.split("(")[1].rstrip(")"))) for x in (w["a"], w["b"]))
    assert bits(np.float32(got * 256)) == bits(want)  # the exponent, 8 binades down
    case = next(c for c in trace_cases() if c.name == "e4m3_none_overlap_descales")
    device = case.device.events[3].data["acc_s"]
    assert np.max(device) == np.float32(256) or abs(float(np.max(device)) / 256 - 1) < 2**-16


# ---- exercise 4: the split-KV combine --------------------------------------------------------------
def _combine(*, subtract_max=True, fused_lse=True, tree=True):
    def fn(lse, o, allreduce):
        m = allreduce(lse, "max")
        cur = np.where(m == NEG_INF, np.float32(0), m)
        e = ex2(fmul(fsub(lse, cur), LOG2E_F32)) if subtract_max else ex2(fmul(lse, LOG2E_F32))
        if tree:
            total = allreduce(e, "sum")
        else:  # one thread over all splits, in order
            total = fadd(np.float32(0), e[0])
            for s in range(1, len(e)):
                total = fadd(total, e[s])
        if not subtract_max:  # log(sum exp(lse_s)) directly: exact in real numbers
            lse_out = fmul(lg2(total), LN2_F32)
        elif fused_lse:
            lse_out = ffma(lg2(total), LN2_F32, m)
        else:
            lse_out = fadd(fmul(lg2(total), LN2_F32), m)
        nonzero = (total != 0) & ~np.isnan(total)
        w = fmul(e, np.where(nonzero, rcp(np.where(nonzero, total, np.float32(1))), np.float32(0)))
        out = np.zeros(o.shape[1:], np.float32)
        for s in range(len(o)):
            take = w[s] > 0
            out[take] = ffma(w[s][take, None], o[s][take], out[take])
        return out, lse_out
    return fn


def test_combine_without_the_max_subtraction_fails_every_call():
    r = exercises.check("combine", _combine(subtract_max=False))
    assert not r.passed and r.failing == 29
    assert r.where["case"].startswith("fa3_api call 160") and r.where["array"] == "lse"
    assert r.where["position"] == (0,) and r.where["b"] == "0x41051245 (8.31696033)"
    assert r.where["a"] == "0x41051244 (8.31695938)"              # one ulp: the roundings differ
    # and from an LSE of about 88.7 on, exp overflows float32: that row's LSE becomes inf
    out, lse = _combine(subtract_max=False)(np.array([[100.0], [99.0]], np.float32),
                                            np.ones((2, 1, 4), np.float32),
                                            exercises.split_allreduce(2, 64))
    assert lse[0] == np.inf and not out.any()
    out, lse = solutions.combine(np.array([[100.0], [99.0]], np.float32),
                                 np.ones((2, 1, 4), np.float32), exercises.split_allreduce(2, 64))
    assert abs(float(lse[0]) - (100 + np.log1p(np.exp(-1.0)))) < 1e-4 and np.all(out == 1)


def test_combine_with_lse_unfused_or_a_sequential_sum_diverges_in_the_lse():
    r = exercises.check("combine", _combine(fused_lse=False))
    assert not r.passed and r.where["array"] == "lse" and r.where["position"] == (5,)
    r = exercises.check("combine", _combine(tree=False))
    assert not r.passed and r.where["case"].startswith("fa3_api call 192")


def test_combine_divergence_in_a_digest_only_call_is_located():
    """Calls 343 and 345 (100 splits) keep only digests: a wrong output there is found by the
    digest and placed with the emulator's bits, which equal that digest."""
    def wrong_at_100_splits(lse, o, allreduce):
        out, lse_out = solutions.combine(lse, o, allreduce)
        if len(lse) == 100:
            out = out.copy()
            out[3, 7] = np.float32(0.5)
        return out, lse_out

    r = exercises.check("combine", wrong_at_100_splits)
    assert not r.passed and r.failing == 2 and r.where["case"].startswith("fa3_api call 343")
    assert r.where["array"] == "out" and r.where["position"] == (3, 7)
    assert r.where["a"] == "0x3f000000 (0.5)"


def test_split_allreduce_rejects_bad_arguments():
    reduce = exercises.split_allreduce(3, 128)
    with pytest.raises(ValueError, match="op: expected 'max' or 'sum'"):
        reduce(np.zeros((3, 4), np.float32), "min")
    with pytest.raises(ValueError, match=r"x: expected float32 \[3, rows\]"):
        reduce(np.zeros((2, 4), np.float32), "sum")


# ---- exercise 5: finalize ---------------------------------------------------------------------------
def _finalize(*, lane_masks=(2, 1), offset=True):
    def fn(row_max, row_sum, scale_log2, max_offset, final_scale):
        total = row_sum
        for lane_mask in lane_masks:
            total = fadd(total, shfl_xor(total, lane_mask, axis=-2))
        empty = (total == 0) | np.isnan(total)
        inv = np.where(empty, np.float32(0), rcp(np.where(empty, np.float32(1), total)))
        scaled = fmul(total, np.float32(2.0 ** -max_offset)) if max_offset and offset else total
        empty = (scaled == 0) | np.isnan(scaled)
        lse = ffma(row_max, fmul(scale_log2, LN2_F32),
                   fmul(lg2(np.where(empty, np.float32(1), scaled)), LN2_F32))
        return total, fmul(inv, final_scale), np.where(empty, NEG_INF, lse).astype(np.float32)
    return fn


def test_finalize_with_the_butterfly_in_the_wrong_order_diverges_in_row_sum():
    r = exercises.check("finalize", _finalize(lane_masks=(1, 2)))
    assert not r.passed and r.failing == 7
    assert (r.where["event_index"], r.where["step"], r.where["array"]) == (12, "finalize", "row_sum")


def test_finalize_without_the_fp8_sum_correction_is_8_ln2_off():
    r = exercises.check("finalize", _finalize(offset=False))
    assert not r.passed and r.failing == 2 and "e4m3" in r.where["case"]
    assert r.where["array"] == "lse"
    got, want = (float(x.split("(")[1].rstrip(")")) for x in (r.where["a"], r.where["b"]))
    assert abs(got - want - 8 * np.log(2)) < 1e-4


# ---- the command line ----------------------------------------------------------------------------
def test_command_line(tmp_path):
    attempt = tmp_path / "attempt.py"
    attempt.write_text("from simulator.exercises.solutions import fp8_exp2 as _s\n"
                       "def fp8_exp2(scores, row_max, scale_log2):\n"
                       "    return _s(scores, row_max, scale_log2) * 2\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = [sys.executable, "-m", "simulator.exercises"]
    ok = subprocess.run([*run, "check", "fp8_exp2", "--solution"], capture_output=True, text=True, env=env,
                        cwd=ROOT)
    assert ok.returncode == 0 and "PASS" in ok.stdout, ok.stderr
    bad = subprocess.run([*run, "check", "fp8_exp2", str(attempt)], capture_output=True, text=True,
                         env=env, cwd=ROOT)
    assert bad.returncode == 1 and "FAIL" in bad.stdout and "online_softmax" in bad.stdout
    missing = subprocess.run([*run, "check", "fp8_exp2", str(tmp_path / "none.py")], capture_output=True,
                             text=True, env=env, cwd=ROOT)
    assert missing.returncode == 2 and "no such file" in missing.stderr


@pytest.mark.parametrize("number", sorted(exercises.EXERCISES))
def test_a_function_that_writes_its_inputs_changes_no_later_check(number):
    """The recordings are cached: a function that works in place on its arguments (after
    computing the right answer) must leave every later check, its own included, unchanged."""
    solution = getattr(solutions, exercises.EXERCISES[number].name)

    def in_place(*args):
        result = solution(*args)
        for a in args:
            if isinstance(a, np.ndarray):
                a[...] = 1.0
        return result

    assert exercises.check(number, in_place).passed
    assert exercises.check(number, solution).passed


@pytest.mark.parametrize(("body", "code", "says"), [
    ("def reduce_max(scores, row_max)\n    pass\n", 2, "syn.py line 1 does not import: SyntaxError"),
    ("import not_a_module_here\n", 2, "line 1 does not import: ModuleNotFoundError"),
    ("import sys\nsys.exit(0)\n", 2, "does not import: SystemExit: 0"),
    ("def reduce_max(scores, row_max):\n    raise ValueError('mine')\n", 1,
     "FAIL, your function raised ValueError: mine"),
    ("def reduce_max(scores, row_max):\n    raise SystemExit(0)\n", 1,
     "FAIL, your function raised SystemExit: 0"),
    ("def reduce_max(scores, row_max):\n    raise KeyboardInterrupt\n", 130, "interrupted"),
])
def test_command_line_file_that_fails(tmp_path, capsys, body, code, says):
    """A FILE that does not import is a usage error (2, one line naming it), never a PASS; an
    exception of the reader's function is a FAIL (1) with its traceback, not a usage error."""
    from simulator.exercises.__main__ import main

    attempt = tmp_path / "syn.py"
    attempt.write_text(body)
    assert main(["check", "reduce_max", str(attempt)]) == code
    out, err = capsys.readouterr()
    assert says in out + err
    if code == 2:
        assert err.count("\n") == 1 and "Traceback" not in err


def test_command_line_usage_error_names_the_module(capsys):
    """argparse's one-line error names ``simulator.exercises check``, not ``.exercises check``
    (the main command line's prefix cut from another module's name)."""
    from simulator.exercises.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main(["check", "99", "--solution"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err.startswith("error: simulator.exercises check: argument number: invalid choice: 99")


def test_a_wrong_return_of_finalize_names_it_like_the_other_exercises():
    r = exercises.check("finalize", lambda *a: (*solutions.finalize(*a)[:2], None))
    assert not r.passed
    assert "lse (3rd returned): expected a float32 array of shape (1, 128, 2), got NoneType" in str(r)


def test_the_list_says_how_to_start_and_fits_100_columns():
    """``python -m simulator.exercises`` alone is where a newcomer starts: besides the list it
    names the stubs' file and the command that checks an attempt."""
    from simulator.exercises.__main__ import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([]) == 0
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) < 100
    assert all(f"{n}. {ex.name} (~" in text and "checked on" in text for n, ex in EXERCISES.items())
    assert "simulator/exercises/puzzles.py" in text
    assert "python -m simulator.exercises check N FILE.py" in text
    assert "simulator/exercises/stubs.py" in text
