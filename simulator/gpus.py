"""The GPUs the emulator knows, one record each: every number or table a rule reads off the chip.

A rule that depends on the GPU reads it from a :class:`GPU` record, never from a constant of
its own: the split heuristics of FlashAttention-3 (``hopper/flash_api.cpp``, ``get_num_splits``)
and FlashAttention-2 read the multiprocessor count, the MUFU models read the calibrated tables
the record names (``simulator/data/mufu/<mufu_tables>.npz``), the tensor-core model reads the
fused dot-add parameters the record names (:data:`simulator.mma.instructions.PARAMETER_SETS`).
Every public entry point takes ``gpu=`` (a key of :data:`GPUS` or a :class:`GPU`), default
:data:`DEFAULT_GPU`; an unknown GPU is refused (ValueError naming it and the known ones), never
given another chip's bits.

The entries and what backs them:

* ``h200``: NVIDIA H200 (GH100, 132 SMs), where every table was calibrated and every real
  library recorded (``simulator/data/device/*_report.json`` name the device, driver and CUDA).
* ``h100``: NVIDIA H100 80GB HBM3 (SXM5, GH100, 132 SMs). The same die as the H200, and the
  same bits: its own sweeps (``docs/h100.md``, ``simulator/data/device/h100/``, 2026-12-07:
  every conversion and MUFU form over all 2^32 inputs, the float32 ops, warpgroup probes,
  wgmma / mma.sync and reduce-add probes) gave 0 mismatches against the H200's tables and
  parameters, and its re-measured MUFU tables have the shipped checksums.
* ``h100-pcie``: NVIDIA H100 PCIe (GH100, 114 SMs). The same die again, not measured here: it
  reads the GH100 tables, and differs from the SXM part in what reads the SM count.

A model of a chip that is not Hopper (an A100's MUFU or its tensor cores' accumulation width)
needs its own tables and parameter set; until they exist, no record names one.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_GPU", "GPU", "GPUS", "get_gpu", "gpu_keys", "mufu_model_name"]


@dataclass(frozen=True)
class GPU:
    """One GPU as the emulator's rules see it.

    Attributes:
        key: the name ``gpu=`` takes (``"h200"``).
        name: the device name CUDA reports (``cudaDeviceProp.name``, what recordings store).
        compute_capability: (major, minor): (9, 0) for Hopper's sm_90.
        sm_count: streaming multiprocessors (``cudaDevAttrMultiProcessorCount``), what the
            split heuristics and the deterministic backward's grid read.
        mufu_tables: the calibrated MUFU table set this chip's ex2 / rcp / lg2 / tanh read
            (``simulator/data/mufu/<mufu_tables>.{npz,json}``).
        tensor_cores: the fused dot-add parameter set of its wgmma / mma.sync
            (:data:`simulator.mma.instructions.PARAMETER_SETS`).
        evidence: where the measurements that back this record are (repository files).
    """

    key: str
    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    mufu_tables: str
    tensor_cores: str
    evidence: str

    @property
    def sm_arch(self) -> str:
        """The CUDA target name of the chip (``"sm_90"``)."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"


_GH100_MUFU = "sm90"      # simulator/data/mufu/sm90.*: measured on the H200 (mufu_report.json)
_HOPPER_MMA = "hopper"    # simulator/mma/instructions.py: fitted on the H200 (mma_report.json)

GPUS: dict[str, GPU] = {g.key: g for g in (
    GPU("h200", "NVIDIA H200", (9, 0), 132, _GH100_MUFU, _HOPPER_MMA,
        "simulator/data/device/*_report.json (H200, driver 580.159.04, CUDA 13)"),
    GPU("h100", "NVIDIA H100 80GB HBM3", (9, 0), 132, _GH100_MUFU, _HOPPER_MMA,
        "docs/h100.md, simulator/data/device/h100/"),
    GPU("h100-pcie", "NVIDIA H100 PCIe", (9, 0), 114, _GH100_MUFU, _HOPPER_MMA,
        "not measured: the GH100 tables of the H200 and the H100 SXM (docs/h100.md)"),
)}

#: the GPU every entry point assumes unless told (where the calibration was made)
DEFAULT_GPU = "h200"

#: the MUFU model name of correctly rounded results (no GPU's approximation)
IDEAL = "ideal"


def gpu_keys() -> list[str]:
    """The keys ``gpu=`` accepts."""
    return list(GPUS)


def get_gpu(gpu=DEFAULT_GPU, argument: str = "gpu") -> GPU:
    """The :class:`GPU` record of ``gpu`` (a key of :data:`GPUS`, or a record, returned as is).

    Raises:
        ValueError: not a string or record, or an unknown key; the message names
            ``argument`` and lists the known keys.
    """
    if isinstance(gpu, GPU):
        return gpu
    if not isinstance(gpu, str):
        raise ValueError(f"{argument}: expected a GPU key, one of {gpu_keys()}, or a "
                         f"simulator.gpus.GPU, got {gpu!r}")
    try:
        return GPUS[gpu]
    except KeyError:
        raise ValueError(f"{argument}: unknown GPU {gpu!r}; known: {gpu_keys()} (a chip without "
                         "a record has no calibrated tables here)") from None


def mufu_model_name(gpu=DEFAULT_GPU, mufu=None) -> str:
    """The MUFU model a launch on ``gpu`` uses: the GPU's key (its calibrated tables), or
    ``"ideal"`` (correctly rounded) when ``mufu == "ideal"``.

    Args:
        gpu: a key of :data:`GPUS` or a :class:`GPU`.
        mufu: None or ``"calibrated"`` (the GPU's measured MUFU), or ``"ideal"``.
    Raises:
        ValueError: an unknown ``gpu`` or ``mufu``, naming the argument.
    """
    record = get_gpu(gpu)
    if mufu is None or mufu == "calibrated":
        return record.key
    if mufu == IDEAL:
        return IDEAL
    raise ValueError(f"mufu: expected None, 'calibrated' (the GPU's measured MUFU) or 'ideal' "
                     f"(correctly rounded), got {mufu!r}")
