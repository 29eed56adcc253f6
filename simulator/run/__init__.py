"""``python -m simulator run``: the FlashAttention-3 forward on real attention inputs.

Loads Q, K, V (by default the embedded all-MiniLM-L6-v2 input of ``simulator/data/inputs/``,
one layer, every head, bf16), emulates the forward bit for bit (:func:`simulator.flash.forward`),
measures O and LSE against the float64 reference (:func:`simulator.flash.reference`), prints a
summary and writes O, LSE, the reference and the trace to an ``.npz`` atomically. Options add a
per-step table of one quad (``--step``), the H200 kernel and its bit diff (``--device``) and a
picture (``--plot``). docs/run.md describes the output; ``--help`` the options.

The parts: :mod:`.workload` (loading and checking the inputs), :mod:`.emulation` (the forward as
one launch with progress, ``--workers`` and the estimate of a long run; the reference),
:mod:`.metrics`, :mod:`.report` (what is printed), :mod:`.device` (``--device``),
:mod:`.results` (the result file), :mod:`.plotting` (``--plot``) and :mod:`.command` (the
options and the job). User errors raise
:class:`simulator.errors.UsageError` (or RecordedDataError / DeviceUnavailable) with a one-line
message; :mod:`simulator.cli` turns them into exit code 2.
"""

from ..errors import UsageError
from ..flash.config import DTYPES
from ..flash.config import INPUT_FORMATS as FORMATS
from .command import DEFAULT_OUT, build_parser, main
from .device import check_device, run_device, run_device_varlen
from .emulation import emulate, forward_kwargs, reference_result, sequence_configs
from .metrics import measure, measure_varlen, no_key_rows, no_key_rows_varlen, ulp
from .plotting import PLOT_FORMATS, check_plot_path, plot
from .report import default_trace_cta, idle_cta_note, step_choice, step_table, summary
from .results import check_output_path, load_result, save_result
from .workload import (
    EMBEDDED,
    Workload,
    check_embedded_sha256,
    check_shapes,
    is_varlen,
    kv_heads_for,
    load_workload,
    select_heads,
    varlen_lengths,
)

__all__ = [
    "DEFAULT_OUT", "DTYPES", "EMBEDDED", "FORMATS", "PLOT_FORMATS", "UsageError", "Workload",
    "build_parser", "check_device", "check_embedded_sha256", "check_output_path", "check_plot_path",
    "check_shapes", "default_trace_cta", "emulate", "forward_kwargs", "idle_cta_note", "is_varlen",
    "kv_heads_for", "load_result", "load_workload", "main", "measure", "measure_varlen",
    "no_key_rows", "no_key_rows_varlen", "plot", "reference_result", "run_device",
    "run_device_varlen", "save_result", "select_heads", "sequence_configs", "step_choice",
    "step_table", "summary", "ulp", "varlen_lengths",
]
