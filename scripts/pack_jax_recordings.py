"""Pack what ``scripts/device_fa2_jax_session.sh`` brought back (flash-attn-jax's FA2 and
dew-flash-attn's FA3, recorded on the GPU) into the compact recordings the package ships:
per-case digests of every output for ``verify`` and samples of full bits for CI.

    python scripts/pack_jax_recordings.py RESULTS_DIR [GQA_DIR]
    python scripts/pack_jax_recordings.py --drawn FA2_DRAWN_RESULTS DEW_DRAWN_RESULTS

RESULTS_DIR holds the session's npz files and ``logs.tar.gz`` (unpacked here). Writes
``simulator/data/device/fa2_jax/`` and ``simulator/data/device/dew_fa3/`` (each with its
MANIFEST.json):

* ``fa2_jax_report.json``: provenance; per forward / varlen case the digests the recorder
  took; per backward case the digests of the forward's out / LSE, of dQ / dK / dV (the kernel's
  per-query-head dK / dV) in each deterministic and default run, and of the glue's GQA sums;
  ``library_defect`` on the split-KV calls at head dims 160 / 224 (below);
* ``fa2_jax_sample.npz``: full bits of every varlen case (``v{i}_*``: the padded LSE rows
  past a sequence's length are not written by the kernel, so only full bits compare), of
  every ``FWD_EVERY``-th forward case (``c{i}_*``), of every backward case's forward and
  deterministic gradients (``b{i}_*_det``, run 0) where ``i % BWD_EVERY == 0``, and for every
  backward case the default runs' dQ where they differ from the deterministic run 0
  (``b{i}_dq_r{j}_idx`` / ``_val``: flat indices and uint16 bits);
* ``dew_fa3_report.json`` / ``dew_fa3_sample.npz``: likewise for dew's FA3 (its backward
  has only the default mode: three runs, digests of each; full bits of every
  ``DEW_EVERY``-th case and of dQ where runs differ). GQA_DIR, a second visit's
  ``dew_fa3_record --only-gqa`` results (``scripts/device_h100_libraries.sh``): for the cases
  with 3 or more query heads per KV head, whose dK / dV reduce-adds arrive in any order, its
  three runs' digests replace the first visit's and their bits are kept
  (``b{i}_{dk,dv}_runs``).

The split-KV forward of flash-attn-jax 0.6.2 at head dims 160 and 224 is marked, not
modelled: its glue allocates ``out_accum`` as ``[splits, batch, seqlen_q, heads,
round_multiple(d, 32)]`` while ``mha_fwd`` strides it by ``head_size_rounded`` (192 / 256),
so the kernel writes past the buffer.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.io import DEVICE_DATA_DIR, save_npz_atomic, write_json_atomic  # noqa: E402
from simulator.replay.common import digest  # noqa: E402
from simulator.replay.sdpa import gpu_of  # noqa: E402

FWD_EVERY, BWD_EVERY, DEW_EVERY = 8, 6, 10


def _hex(x) -> str:
    return digest(np.ascontiguousarray(x)).hex()


def _defect(case: dict, gpu: str) -> bool:
    """Whether flash-attn-jax ran ``case`` as a split-KV launch at head dim 160 / 224 on
    ``gpu`` (the recording's: the split count reads its SM count)."""
    from simulator.fa2 import plan_forward  # noqa: PLC0415

    if case["head_dim"] not in (160, 224):
        return False
    launch = plan_forward(case["batch"], case["seqlen_q"], case["seqlen_k"], case["heads"],
                          case["heads_kv"], case["head_dim"], causal=case["causal"],
                          window=case["window"], gpu=gpu)
    return launch.num_splits > 1


def pack_fa2(res: Path, out: Path) -> None:
    rep = json.loads((res / "fa2" / "fa2_jax_report.json").read_text())
    gpu = gpu_of(rep)
    fwd = dict(np.load(res / "fa2_jax_forward.npz"))
    fwd.update(np.load(res / "fa2_jax_drawn.npz"))
    bwd = dict(np.load(res / "fa2_jax_backward.npz"))
    sample = {}
    keep = ("index", "case", "inputs", "out", "lse", "repeat_identical", "first_seconds", "error")
    forward = []
    for r in rep["forward"]:
        rec = {k: r[k] for k in keep if k in r}
        if _defect(r["case"], gpu):
            rec["library_defect"] = "split-KV out_accum sized by round_multiple(d, 32)"
        i = r["index"]
        if i % FWD_EVERY == 0:
            sample[f"c{i}_out"], sample[f"c{i}_lse"] = fwd[f"c{i}_out"], fwd[f"c{i}_lse"]
        forward.append(rec)
    varlen = []
    for r in rep["varlen"]:
        i = r["index"]
        varlen.append({k: r[k] for k in keep if k in r})
        sample[f"v{i}_out"], sample[f"v{i}_lse"] = fwd[f"v{i}_out"], fwd[f"v{i}_lse"]
    backward = []
    for r in rep["backward"]:
        i = r["index"]
        rec = {k: r[k] for k in ("index", "case", "inputs", "error") if k in r}
        if "error" not in r:
            rec["out"], rec["lse"] = _hex(bwd[f"b{i}_out"]), _hex(bwd[f"b{i}_lse"].view(np.uint32))
            det0 = {}
            for mode in ("det", "default"):
                runs = []
                for name in ("dq", "dk", "dv"):
                    st = bwd[f"b{i}_{name}_{mode}"]
                    runs.append([st[0]] + [st[0] ^ x for x in st[1:]])
                rec[mode] = [{n: _hex(runs[j][k]) for j, n in enumerate(("dq", "dk", "dv"))}
                             for k in range(len(runs[0]))]
                if mode == "det":
                    det0 = {n: runs[j][0] for j, n in enumerate(("dq", "dk", "dv"))}
                else:
                    for k, run in enumerate(runs[0]):
                        idx = np.flatnonzero(run.ravel() != det0["dq"].ravel()).astype(np.int32)
                        sample[f"b{i}_dq_r{k}_idx"] = idx
                        sample[f"b{i}_dq_r{k}_val"] = run.ravel()[idx]
            if f"b{i}_dk_glue" in bwd:
                rec["glue"] = {n: _hex(bwd[f"b{i}_{n}_glue"]) for n in ("dk", "dv")}
            if _defect(r["case"], gpu):  # the backward ran on a forward the glue corrupted
                rec["library_defect"] = "its forward: split-KV out_accum sized by round_multiple(d, 32)"
            if i % BWD_EVERY == 0 or "library_defect" in rec:
                sample[f"b{i}_out"], sample[f"b{i}_lse"] = bwd[f"b{i}_out"], bwd[f"b{i}_lse"]
                for n, x in det0.items():
                    sample[f"b{i}_{n}_det"] = x
        backward.append(rec)
    report = {"provenance": rep["provenance"],
              "regenerate": "bash scripts/device_fa2_jax_session.sh, then python "
                            "scripts/pack_jax_recordings.py RESULTS_DIR",
              "forward": forward, "varlen": varlen, "backward": backward}
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "fa2_jax_report.json", report, compact=True)
    save_npz_atomic(out / "fa2_jax_sample.npz", **sample)


def _gqa_rerecorded(gqa_dir: Path | None) -> tuple[dict, dict]:
    """The second visit's GQA backward cases (``dew_fa3_record --only-gqa``): records by
    index, and their arrays."""
    if gqa_dir is None or not (gqa_dir / "dew_fa3_gqa.npz").exists():
        return {}, {}
    rep = json.loads((gqa_dir / "dew" / "dew_fa3_gqa_report.json").read_text())
    return {r["index"]: r for r in rep["backward"]}, dict(np.load(gqa_dir / "dew_fa3_gqa.npz"))


def pack_dew(res: Path, out: Path, gqa_dir: Path | None = None) -> None:
    rep = json.loads((res / "dew" / "dew_fa3_report.json").read_text())
    gqa, gqa_arrays = _gqa_rerecorded(gqa_dir)
    fwd = np.load(res / "dew_fa3_forward.npz")
    dq = np.load(res / "dew_fa3_dq.npz")
    dkdv = np.load(res / "dew_fa3_dkdv_sample.npz")
    sample = {}
    forward = []
    for r in rep["forward"]:
        i = r["index"]
        forward.append({k: r[k] for k in ("index", "case", "inputs", "out", "lse",
                                          "repeat_identical", "error") if k in r})
        if i % (DEW_EVERY // 2) == 0:
            sample[f"f{i}_out"], sample[f"f{i}_lse"] = fwd[f"f{i}_out"], fwd[f"f{i}_lse"]
    backward = []
    for r in rep["backward"]:
        i = r["index"]
        rec = {k: r[k] for k in ("index", "case", "inputs", "error", "dq_runs", "dk_runs",
                                 "dv_runs", "dq_agree", "dk_agree", "dv_agree") if k in r}
        again = gqa.get(i)
        if again is not None and r["case"]["heads"] // r["case"]["heads_kv"] >= 3 \
                and "error" not in again:
            # a group of 3 or more query heads reduce-adds dK / dV in any order: the second
            # visit kept every run's bits; its runs replace the first visit's digests
            for n in ("dk", "dv"):
                rec[f"{n}_runs"], rec[f"{n}_agree"] = again[f"{n}_runs"], again[f"{n}_agree"]
                sample[f"b{i}_{n}_runs"] = gqa_arrays[f"b{i}_{n}_runs"]
            rec["dk_dv_runs_from"] = gqa_provenance(gqa_dir)
        if "error" not in r:
            rec["out"] = _hex(dq[f"b{i}_out"])
            rec["lse"] = _hex(dq[f"b{i}_lse"].view(np.uint32))
            st = dq[f"b{i}_dq"]
            if i % DEW_EVERY == 0 or st[1:].any():
                sample[f"b{i}_dq"] = st
            if i % DEW_EVERY == 0:
                sample[f"b{i}_out"], sample[f"b{i}_lse"] = dq[f"b{i}_out"], dq[f"b{i}_lse"]
                sample[f"b{i}_dk"], sample[f"b{i}_dv"] = dkdv[f"b{i}_dk"], dkdv[f"b{i}_dv"]
        backward.append(rec)
    report = {"provenance": rep["provenance"],
              "regenerate": "bash scripts/device_fa2_jax_session.sh, then python "
                            "scripts/pack_jax_recordings.py RESULTS_DIR",
              "forward": forward, "backward": backward}
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "dew_fa3_report.json", report, compact=True)
    save_npz_atomic(out / "dew_fa3_sample.npz", **sample)


def pack_drawn(fa2_dir: Path, dew_dir: Path) -> None:
    """The drawn calls (``--drawn``): reports without the per-call extras, their npz as is
    (the default runs' dQ where it left the deterministic bits; dew's dQ / dK / dV stacks
    where runs differ or a group of 3+ query heads reduce-adds)."""
    keep = ("index", "case", "inputs", "out", "lse", "repeat_identical", "error", "det",
            "default", "glue", "dq_runs", "dk_runs", "dv_runs", "dq_agree", "dk_agree", "dv_agree")
    for src, rep_name, npz_name, dst in (
            (fa2_dir / "fa2", "fa2_jax_drawn_report.json", "fa2_jax_drawn_dq.npz", "fa2_jax"),
            (dew_dir / "dew", "dew_fa3_drawn_report.json", "dew_fa3_drawn.npz", "dew_fa3")):
        rep = json.loads((src / rep_name).read_text())
        slim = {"provenance": rep["provenance"], "drawn": rep["drawn"],
                "regenerate": "bash scripts/device_fa2_jax_session.sh with FA2_DRAWN / "
                              "DEW_DRAWN, then python scripts/pack_jax_recordings.py --drawn "
                              "FA2_RESULTS DEW_RESULTS"}
        for phase in ("forward", "backward"):
            if phase in rep:
                slim[phase] = [{k: r[k] for k in keep if k in r} for r in rep[phase]]
        write_json_atomic(DEVICE_DATA_DIR / dst / rep_name, slim, compact=True)
        save_npz_atomic(DEVICE_DATA_DIR / dst / npz_name.replace("_dq.npz", ".npz")
                        if dst == "fa2_jax" else DEVICE_DATA_DIR / dst / npz_name,
                        **dict(np.load(src.parent / npz_name)))


def gqa_provenance(gqa_dir: Path) -> str:
    prov = json.loads((gqa_dir / "dew" / "dew_fa3_gqa_report.json").read_text())["provenance"]
    return f"dew_fa3_record --only-gqa, {prov['gpu']}, {prov['date_utc']}"


def main() -> int:
    if sys.argv[1] == "--drawn":
        pack_drawn(Path(sys.argv[2]), Path(sys.argv[3]))
        for folder in ("fa2_jax", "dew_fa3"):
            subprocess.run([sys.executable, str(ROOT / "scripts" / "make_manifest.py"),
                            "--folder", str(DEVICE_DATA_DIR / folder)], check=True)
        return 0
    res = Path(sys.argv[1])
    gqa_dir = Path(sys.argv[2]) if len(sys.argv) > 2 else None
    if (res / "logs.tar.gz").exists() and not (res / "fa2").exists():
        subprocess.run(["tar", "-xzf", "logs.tar.gz"], cwd=res, check=True)
    pack_fa2(res, DEVICE_DATA_DIR / "fa2_jax")
    pack_dew(res, DEVICE_DATA_DIR / "dew_fa3", gqa_dir)
    for folder in ("fa2_jax", "dew_fa3"):
        subprocess.run([sys.executable, str(ROOT / "scripts" / "make_manifest.py"), "--folder",
                        str(DEVICE_DATA_DIR / folder)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
