"""A non-editable install: the wheel holds the CUDA kernels (the top-level ``kernels/``, installed
as ``simulator/kernels/``) and the recorded data, and the installed package finds them inside
itself, not in the repository.

The wheel is built offline (``pip wheel --no-deps --no-build-isolation --no-index``) from a copy
of the tree with the environment's own setuptools, which must read the project's metadata
(``license = "Apache-2.0"``: setuptools >= 77, as the build-system table and the ``test``
extra ask)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "simulator"
KERNELS = REPO / "kernels"


def _setuptools_version() -> tuple[int, ...]:
    try:
        text = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return (0,)
    return tuple(int(p) for p in text.split(".")[:2] if p.isdigit())


def _sources() -> list[str]:
    """Every CUDA source and resource file under kernels/, relative to it (``probes/mma.cu``)."""
    return sorted(p.relative_to(KERNELS).as_posix() for p in KERNELS.rglob("*")
                  if p.suffix in (".cu", ".json") and p.is_file())


def _shipped() -> set[str]:
    """What the wheel must hold: the kernel sources and their resource file, the probes (under
    simulator/kernels/), and every file under simulator/data/."""
    data = [p for p in (PACKAGE / "data").rglob("*") if "__pycache__" not in p.parts and p.is_file()]
    return ({f"simulator/kernels/{rel}" for rel in _sources()}
            | {p.relative_to(REPO).as_posix() for p in data})


def test_a_checkout_reads_the_top_level_kernels():
    from simulator.device import runtime

    assert runtime.KERNELS_DIR == KERNELS
    assert {"fa3_forward.cu", "fa3_backward.cu", "fa3_forward.resources.json",
            "probes/numerics.cu"} <= set(_sources())


def test_the_package_list_is_whole():
    """pyproject.toml lists the packages (a package mapped to another folder is not found by
    packages.find): every folder of simulator/ with an __init__.py is listed, and kernels/ is
    mapped to simulator.kernels."""
    from setuptools import find_packages

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert sorted(config["packages"]) == sorted([*find_packages(str(REPO), include=["simulator*"]),
                                                 "simulator.kernels"])
    assert config["package-dir"] == {"simulator.kernels": "kernels"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if _setuptools_version() < (77,):
        pytest.skip(f"the offline wheel build needs setuptools >= 77 in this environment, found "
                    f"{'.'.join(map(str, _setuptools_version()))} (pip install -e '.[test]' installs it)")
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(PACKAGE, src / "simulator", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copytree(KERNELS, src / "kernels")
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "--no-index", "-q", "-w", str(out), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    (whl,) = out.glob("*.whl")
    return whl


def test_the_wheel_holds_the_kernels_and_the_data(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    shipped = _shipped()
    assert {"simulator/kernels/fa3_forward.cu", "simulator/kernels/fa3_backward.cu",
            "simulator/kernels/fa3_forward.resources.json", "simulator/kernels/probes/numerics.cu",
            "simulator/data/device/MANIFEST.json", "simulator/data/inputs/minilm.npz"} <= shipped
    assert not shipped - names, sorted(shipped - names)[:10]
    assert not any(n.startswith("kernels/") for n in names), "kernels/ must install inside simulator/"


def test_the_installed_package_finds_its_kernels_and_data_in_itself(wheel, tmp_path):
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
                        "--target", str(target), str(wheel)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    probe = """
import json, sys, simulator
from simulator.device import backward, forward, runtime
from simulator.measure import softcap_sass
from simulator.run import workload
from simulator import io
print(json.dumps({"package": simulator.__file__, "kernels": str(runtime.KERNELS_DIR),
                  "softcap_probe": str(softcap_sass.PROBE),
                  "sha256": {rel: runtime.source_sha256(rel) for rel in sys.argv[1:]},
                  "launchers": [forward.KERNEL, backward.KERNEL],
                  "embedded": str(workload.EMBEDDED), "device_data": str(io.DEVICE_DATA_DIR),
                  "manifest": sorted(io.read_manifest(io.DEVICE_DATA_DIR))[:3]}))
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(target)
    r = subprocess.run([sys.executable, "-c", probe, *_sources()], capture_output=True, text=True,
                       cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    for key in ("package", "kernels", "softcap_probe", "embedded", "device_data"):
        assert Path(got[key]).resolve().is_relative_to(target.resolve()), (key, got[key])
        assert not Path(got[key]).resolve().is_relative_to(REPO), (key, got[key])
    from simulator.device import runtime

    assert Path(got["kernels"]) == target.resolve() / "simulator" / "kernels"
    assert set(got["launchers"]) <= set(got["sha256"])
    assert got["sha256"] == {rel: runtime.source_sha256(rel) for rel in _sources()}
    assert got["manifest"]


_ONLY_DEPENDENCIES = r"""
import importlib.abc
import sys

allowed = set(sys.argv[2].split(","))


class OnlyDependencies(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top in allowed or top.startswith("_"):
            return None
        raise ModuleNotFoundError(f"not a dependency of the main job: {name}", name=name)


sys.meta_path.insert(0, OnlyDependencies())
from simulator import cli

sys.exit(cli.main(["run", "--no-progress", "--out", sys.argv[1]]))
"""


def test_the_main_job_needs_only_the_declared_dependencies(tmp_path):
    """``pip install -e .`` then ``python -m simulator run``: the job runs with every installed
    package outside pyproject's dependencies (and numba's llvmlite) made unimportable, so the
    first command needs nothing of the extras (matplotlib, torch, tqdm, jupyter ...)."""
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {d.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip().replace("-", "_")
             for d in deps}
    assert names == {"numpy", "ml_dtypes", "numba"}, names
    allowed = ",".join(sorted(names | {"llvmlite", "simulator"}))
    r = subprocess.run([sys.executable, "-c", _ONLY_DEPENDENCIES, str(tmp_path / "o.npz"), allowed],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "o.npz").is_file()
