"""The puzzle ladder: from one float32 instruction to a key block of the backward, in order.

Each :class:`Puzzle` is one rung: its stub (in :mod:`.stubs`, or :mod:`.puzzles` for the expert
rungs), about how many lines it takes, hints revealed one at a time, and the recording it is
checked on. ``check`` (in :mod:`simulator.exercises`) dispatches on :attr:`Puzzle.kind`.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import puzzles, stubs


@dataclass(frozen=True)
class Puzzle:
    """One rung of the ladder.

    Attributes:
        number: its place on the ladder (1 = the first).
        name: the stub's function name (the name FILE must define).
        stub: the stub function.
        lines: about how many lines a solution takes.
        hints: revealed one at a time (``check N FILE --hint K`` shows the first K).
        checked_on: the device recording it is checked against, in words.
        kind: which check runs it: ``("legacy", n)`` for :mod:`.checker`'s exercise ``n``,
            ``("fma",)``, ``("cvt", fmt)``, ``("mufu", form)``, ``("trace", name)``,
            ``("wgmma",)``, ``("mainloop",)``, ``("ds",)``.
    """

    number: int
    name: str
    stub: object
    lines: int
    hints: tuple[str, ...]
    checked_on: str
    kind: tuple


_TRACES = "the 7 forward step traces (H200, twin kernel)"

_RUNGS = (
    ("fma", stubs.fma, 1, ("fma",), "numerics sweep: FFMA.FTZ block 0 (2^16 raw H200 results, "
     "the digest of all 2^20)", (
        "--use_fast_math lets the compiler contract a multiply followed by an add into one "
        "instruction. Which one, and how many roundings does it make?",
        "FFMA rounds once; FMUL then FADD rounds twice: simulator.numerics.ffma(a, b, c, ...).",
        "Fast math also flushes subnormal inputs and results to zero: ftz=True.")),
    ("to_bf16", stubs.to_bf16, 1, ("cvt", "bf16"), "numerics sweep: digests of cvt.rn.bf16.f32 "
     "over the special 2^20-pattern chunks", (
        "Round to nearest, ties to even; chopping the low 16 bits rounds toward zero.",
        "A NaN becomes the canonical NaN whatever its payload.",
        "simulator.numerics.convert(x, 'bf16').")),
    ("to_e4m3", stubs.to_e4m3, 1, ("cvt", "e4m3"), "numerics sweep: digests of "
     "cvt.rn.satfinite.e4m3x2.f32 over the special chunks", (
        "e4m3 (the 'fn' variant) has no infinity: its largest value is 448 and 0x7f is NaN.",
        "FA3 converts with the .satfinite form: values past 448, and inf, become +-448, not NaN.",
        "simulator.numerics.convert(x, 'e4m3', satfinite=True); going through bf16 first "
        "rounds twice.")),
    ("exp2_row", stubs.exp2_row, 1, ("mufu", "ex2_ftz"), "MUFU calibration: 2^20 inputs of "
     "ex2.approx.ftz.f32 with the H200's results", (
        "Under fast math exp2f is one instruction of the special function unit (MUFU).",
        "MUFU.EX2 is an approximation, not the correctly rounded 2^x: np.exp2 is not it.",
        "simulator.numerics.mufu.ex2(x, ftz=True) reads the H200's calibrated tables.")),
    ("fast_expf", stubs.fast_expf, 2, ("mufu", "expf_fast"), "MUFU calibration: 2^20 inputs "
     "of __expf (fast math) with the H200's results", (
        "e^x = 2^(x log2 e): fast math turns expf into puzzle 4's instruction.",
        "x * log2(e) is one FMUL.FTZ by the float32 constant (mufu.LOG2E_F32), rounded before "
        "MUFU.EX2 sees it.",
        "ex2(fmul(x, LOG2E_F32, ftz=True), ftz=True).")),
    ("quad_max", stubs.quad_max, 3, ("trace", "quad_max"), f"{_TRACES}: row_max of every "
     "max_get_scale (thread maxima taken from the H200's scores)", (
        "The four threads of a quad each hold part of the row; shuffles read another lane's "
        "register.",
        "A butterfly: x = max(x, shfl_xor(x, offset)) for two offsets; after both rounds all "
        "four lanes hold the maximum.",
        "Offsets 2 then 1 (Allreduce<4>), fmax(..., ftz=True); simulator.hw.shfl_xor(x, "
        "lane_mask, axis=-2).")),
    ("reduce_max", puzzles.reduce_max, 6, ("legacy", 1), f"{_TRACES}: max_get_scale's "
     "row_max; the reduction probe (subnormals, +-0, inf, NaN)", (
        "Two stages, as softmax.h names them: thread_reduce_ (each thread folds its own "
        "columns), then quad_allreduce_ (puzzle 6).",
        "Fold the columns in order ni = 0, 1, ...: start from column 0, or from max(row_max, "
        "column 0) when a running maximum is given; then m = max(m, column ni).",
        "fmax(..., ftz=True) is max.ftz.f32: a subnormal counts as a zero of its sign, and NaN "
        "loses to a number (the probe has all of these; np.maximum lets NaN win).",
        "The butterfly: m = fmax(m, shfl_xor(m, 2, axis=-2), ftz=True), then the same with "
        "lane mask 1.")),
    ("quad_sum", stubs.quad_sum, 3, ("trace", "quad_sum"), f"{_TRACES}: finalize's row_sum",
     ("The same butterfly as puzzle 6, with an add.",
      "Float32 addition is not associative: the order of the offsets changes bits.",
      "Offsets 2 then 1: x = fadd(x, shfl_xor(x, offset, axis=-2), ftz=True).")),
    ("scale_apply_exp2", stubs.scale_apply_exp2, 3, ("trace", "scale_apply_exp2"),
     f"{_TRACES}, bf16 / f16: P of every online_softmax", (
        "Scale the row maximum once per row; a row whose maximum is -inf uses 0 (Check_inf), "
        "so its P is 0, not NaN.",
        "The multiply by scale_log2 and the subtraction fold into one FFMA per element: "
        "ffma(scores, scale_log2, -max_scaled).",
        "max_scaled = fmul(row_max, scale_log2, ftz=True); then puzzle 4's MUFU.EX2.")),
    ("max_get_scale", stubs.max_get_scale, 8, ("trace", "max_get_scale"), f"{_TRACES}: "
     "row_max and scores_scale of every max_get_scale, first and later blocks", (
        "The new row maximum is puzzle 7 (with the previous maximum on a later block).",
        "The scale is 2^((prev - new) * scale_log2), with 0 for a new maximum of -inf "
        "(Check_inf); 1 on the first block.",
        "Here the compiler does not contract: FSUB, then FMUL, then MUFU.EX2.")),
    ("rescale_o", stubs.rescale_o, 1, ("trace", "rescale_o"), f"{_TRACES}: O of every "
     "rescale_o (both schedules, bf16, f16, e4m3)", (
        "Each row of O has one factor, held by the four threads of the quad that own the row: "
        "broadcast it over the row's columns.",
        "One multiply per element and nothing to add: FMUL, with fast math's ftz.",
        "fmul(acc_o, scores_scale[..., None], ftz=True).")),
    ("online_rescale", puzzles.online_rescale, 10, ("legacy", 2), f"{_TRACES}, bf16 / f16: "
     "every later block (scale, P, row_sum, rescaled O)", (
        "Puzzle 10's scale, then puzzle 9's P, then the row sum, then O.",
        "The scale: cur = row_max with -inf replaced by 0 (Check_inf); scores_scale = "
        "ex2(fmul(fsub(row_max_prev, cur), scale_log2)): here the compiler does not contract.",
        "P: max_scaled = fmul(row_max, scale_log2) (0 where row_max is -inf); p = "
        "ex2(ffma(scores, scale_log2, -max_scaled[..., None])): one rounding.",
        "softmax.h writes row_sum *= scores_scale and then a sum; the compiler fuses the "
        "multiply with the first add: ffma(scores_scale, row_sum_prev, p[..., 0]), then fadd "
        "p[..., ni] for ni = 1, 2, ... in order.",
        "rescale_o multiplies every element of a row of O by the row's scale: "
        "fmul(acc_o, scores_scale[..., None]). Every instruction is .ftz.")),
    ("online_softmax", stubs.online_softmax, 10, ("trace", "online_softmax"), f"{_TRACES}, "
     "bf16 / f16: row_max, scores_scale, P and row_sum of each CTA's first two blocks", (
        "First block: puzzle 10 without a previous maximum, puzzle 9, then the thread's "
        "columns of P added in order, starting from column 0 (no quad sum yet).",
        "Second block: puzzle 10 with the first block's maximum, puzzle 9, and the sum of "
        "puzzle 12: the old sum rescaled, the multiply fused with the first add.",
        "row_sum = ffma(scores_scale, row_sum_prev, p[..., 0], ftz=True), then fadd "
        "p[..., ni] for ni = 1, 2, ...; stack each result over the two blocks.")),
    ("fp8_exp2", puzzles.fp8_exp2, 4, ("legacy", 3), f"{_TRACES}, e4m3: P of every block", (
        "An FP8 kernel shifts P by 2^8 so that it uses e4m3's range: Max_offset = 8, "
        "subtracted from the scaled maximum.",
        "The -8 is the c operand of the FFMA that scales the maximum, not a separate add: "
        "max_scaled = ffma(row_max, scale_log2, -8) (0 where row_max is -inf).",
        "Then puzzle 9: p = ex2(ffma(scores, scale_log2, -max_scaled[..., None])); without "
        "the offset every P is 256 times too small.")),
    ("finalize", puzzles.finalize, 12, ("legacy", 5), f"{_TRACES}: every finalize "
     "(row_sum, scores_scale, lse)", (
        "Puzzle 8's quad sum (lane mask 2, then 1; fadd.ftz) gives the total; return it as "
        "row_sum, before any FP8 correction.",
        "scores_scale = fmul(rcp(total), final_scale), with 0 instead of rcp where the total "
        "is 0 or NaN.",
        "With max_offset, undo FP8's 2^8 before the log: total = fmul(total, 2^-max_offset).",
        "lse = ffma(row_max, fmul(scale_log2, LN2_F32), fmul(lg2(total), LN2_F32)), -inf where "
        "the (scaled) total is 0 or NaN; LN2_F32 is simulator.numerics.mufu's float32 ln 2.")),
    ("wgmma_dot_add", stubs.wgmma_dot_add, 15, ("wgmma",), "tensor-core probe: wgmma "
     "m64n8k16 bf16, block 0 (512 instructions; the first 8,192 raw H200 outputs, the "
     "block's digest)", (
        "Every product of two bf16 values is exact in float64 (8-bit significands), and so is "
        "C: the question is only how the tensor core adds the 17 terms.",
        "The sum is fused: the products and C are aligned to the largest exponent E among "
        "them, each term keeps only 25 bits below 2^E (truncated toward zero), and the kept "
        "parts add exactly.",
        "A product's exponent is the sum of its operands' exponents, floor(log2|a|) + "
        "floor(log2|b|), a subnormal bf16 counting as -126: not the exponent of the product.",
        "The exact sum is truncated toward zero to float32's 24 bits (below 2^-126 in steps "
        "of 2^-149); inf and NaN terms give IEEE's sum, every NaN 0x7fffffff; -0 only when "
        "every term is -0. simulator/mma/spec.py writes the model out.")),
    ("cta_mainloop", stubs.cta_mainloop, 25, ("mainloop",), f"{_TRACES}: O and the LSE of "
     "the 4 traced bf16 CTAs without softcap (both schedules, head dims 64 and 192)", (
        "Scores: simulator.mma.gemm(q, k_block.T, C, instruction='wgmma.m64n{N}k16.f32.bf16."
        "bf16') with C all -0.0 (the kernel's zero-initialised accumulator); then -inf where "
        "keep is False.",
        "view = simulator.hw.rowcol_view(f'm64n{N}k16'): view.apply(view.layout.from_matrix("
        "tile)) gives each thread's rows and columns, view.layout.to_matrix(view.unapply(x)) "
        "goes back, view.row_values(state) gives one value per row.",
        "Per block: puzzle 10, puzzle 9, the carried sum of puzzle 13; O times the block's "
        "scale by row (puzzle 11), then O = gemm(P converted to q's format, v_block, O).",
        "After the last block, puzzle 15 (max_offset 0, final_scale 1): O times its "
        "scores_scale, row by row; the LSE one value per row. The schedule (plain or "
        "overlapped) does not change these bits.")),
    ("combine", puzzles.combine, 15, ("legacy", 4), "29 split-KV combines of the real FA3 "
     "library (fa3-fwd 0.0.3, H200)", (
        "Subtract the maximum LSE over the splits (allreduce(lse, 'max'); cur = 0 where it is "
        "-inf) before exponentiating: without it an LSE of 100 gives e = inf.",
        "e = puzzle 5's expf of (lse - cur): ex2(fmul(fsub(lse, cur), LOG2E_F32)): an FMUL by "
        "the float32 log2(e), not an FFMA.",
        "total = allreduce(e, 'sum'); lse_out = ffma(lg2(total), LN2_F32, m): logf(total) + m "
        "contracted, one rounding, and m, not cur.",
        "inv = rcp(total) where total is nonzero (a flushed subnormal and NaN count as 0), else "
        "0; weights w = fmul(e, inv).",
        "out = +0; for each split s in order, where w[s] > 0: out = ffma(w[s], o[s], out). "
        "Every instruction is .ftz.")),
    ("backward_ds", stubs.backward_ds, 3, ("ds",), "the twin backward's step traces (H200): dS "
     "of every m_block of the 3 CTAs kept in full; dPsum from the preprocess, whose bits the "
     "twin backward report's digests check", (
        "dP - dPsum first, then the product with P.",
        "No FFMA here: FSUB.FTZ, then FMUL.FTZ.",
        "With a softcap, multiply the result by dtanh (one more FMUL.FTZ).")),
)

LADDER = {i: Puzzle(i, name, stub, lines, hints, checked_on, kind)
          for i, (name, stub, lines, kind, checked_on, hints) in enumerate(_RUNGS, start=1)}
BY_NAME = {p.name: p for p in LADDER.values()}
