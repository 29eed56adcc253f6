"""The package layering of docs/architecture.md: no import cycles, modules of a readable size.

Every ``import`` / ``from ... import`` statement of ``simulator/`` counts, function-local ones
included (a cycle held together by imports inside functions is still a cycle). Every module of
the package is held to both rules.
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "simulator"
MAX_LINES = 600
#: packages and modules held to the rules (a cycle touching one fails; so does a long module)
CHECKED = ("simulator",)


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The ``simulator`` modules that ``name`` imports anywhere in its body."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:  # ``from pkg import sub`` imports the submodule
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in modules else target)
    return {m for m in found if m in modules and m != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _checked(name: str) -> bool:
    return any(name == c or name.startswith(c + ".") for c in CHECKED)


def test_no_import_cycles():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    cycles = _cycles(graph)
    failing = [c for c in cycles if any(_checked(m) for m in c)]
    for c in cycles:
        if c not in failing:
            warnings.warn(f"import cycle (reported, not checked): {' <-> '.join(c)}", stacklevel=1)
    assert not failing, f"import cycles: {failing}"


def test_the_cycle_check_sees_function_local_imports(tmp_path):
    """A cycle made only by an import inside a function is found."""
    pkg = tmp_path / "simulator"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .a import x  # noqa\n")
    modules = {"simulator": pkg / "__init__.py", "simulator.a": pkg / "a.py", "simulator.b": pkg / "b.py"}
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert _cycles(graph) == [["simulator.a", "simulator.b"]]


def test_modules_are_at_most_600_lines():
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines())
             for name, path in _modules().items()}
    long = {name: n for name, n in sorted(sizes.items()) if n > MAX_LINES}
    for name, n in long.items():
        if not _checked(name):
            warnings.warn(f"{name}: {n} lines (over {MAX_LINES}; reported, not checked)", stacklevel=1)
    assert not {name: n for name, n in long.items() if _checked(name)}


def test_verify_replays_through_simulator_replay_only():
    """``verify`` reaches recordings through :mod:`simulator.replay`, never the GPU side."""
    modules = _modules()
    imported = _imports("simulator.verify", modules["simulator.verify"], modules)
    assert {m for m in imported if m.startswith("simulator.")} <= (
        {"simulator.errors", "simulator.replay"} | {m for m in imported if m.startswith("simulator.replay.")})


#: what each package (or top-level module) may import from the rest of ``simulator``, the layers
#: of docs/architecture.md from the bottom up; a package without a row fails the test below
_BASE = {"simulator.errors", "simulator.io"}
ALLOWED = {
    "simulator.errors": set(),
    "simulator.io": {"simulator.errors"},
    "simulator.gpus": set(),
    "simulator.numerics": _BASE | {"simulator.gpus"},
    "simulator.hw": {"simulator.numerics"},
    "simulator.engine": {"simulator.gpus", "simulator.numerics"},
    "simulator.mma": {"simulator.engine", "simulator.gpus", "simulator.hw", "simulator.numerics"},
    "simulator.trace": {"simulator.io", "simulator.numerics"},
    "simulator.flash": {"simulator.engine", "simulator.gpus", "simulator.hw", "simulator.mma",
                        "simulator.numerics", "simulator.trace"},
    "simulator.fa3": {"simulator.engine", "simulator.flash", "simulator.gpus", "simulator.hw",
                      "simulator.numerics", "simulator.trace"},
    "simulator.fa2": {"simulator.flash", "simulator.gpus", "simulator.hw", "simulator.numerics"},
    "simulator.sdpa": {"simulator.fa2", "simulator.flash", "simulator.gpus", "simulator.numerics"},
    "simulator.fa4": {"simulator.flash", "simulator.gpus", "simulator.numerics"},
    "simulator.cluster": {"simulator.engine", "simulator.flash"},
    "simulator.budget": {"simulator.flash"},
    "simulator.compare": {"simulator.hw", "simulator.numerics"},
    "simulator.strategies": {"simulator.fa3", "simulator.flash", "simulator.numerics"},
    "simulator.regressions": set(),
    "simulator.notebook": set(),
    "simulator.device": {"simulator.flash", "simulator.gpus", "simulator.trace", "simulator.io",
                         "simulator.errors"},
    "simulator.replay": {"simulator.device", "simulator.errors", "simulator.fa2", "simulator.fa3",
                         "simulator.fa4", "simulator.flash",
                         "simulator.gpus", "simulator.hw", "simulator.io", "simulator.mma",
                         "simulator.numerics", "simulator.sdpa", "simulator.trace"},
    "simulator.verify": {"simulator.errors", "simulator.replay"},
    "simulator.run": {"simulator.budget", "simulator.compare", "simulator.device",
                      "simulator.errors", "simulator.fa2", "simulator.fa3", "simulator.fa4",
                      "simulator.flash",
                      "simulator.gpus", "simulator.hw", "simulator.io", "simulator.numerics",
                      "simulator.sdpa", "simulator.trace"},
    "simulator.exercises": {"simulator.compare", "simulator.device", "simulator.errors",
                            "simulator.fa3", "simulator.flash", "simulator.hw", "simulator.io",
                            "simulator.mma", "simulator.numerics", "simulator.replay",
                            "simulator.trace"},
    "simulator.measure": {"simulator.compare", "simulator.device", "simulator.errors",
                          "simulator.flash", "simulator.gpus", "simulator.hw", "simulator.io",
                          "simulator.mma", "simulator.numerics", "simulator.regressions",
                          "simulator.replay", "simulator.strategies"},
    "simulator.cli": {"simulator", "simulator.device", "simulator.engine", "simulator.errors",
                      "simulator.measure", "simulator.run", "simulator.verify"},
    "simulator.__main__": {"simulator.cli"},
    "simulator": set(),  # the package's __init__ imports its own subpackages only
}


def _package(name: str) -> str:
    return ".".join(name.split(".")[:2])


def test_packages_import_only_what_the_architecture_allows():
    modules = _modules()
    wrong = {}
    missing = sorted({_package(name) for name in modules} - set(ALLOWED))
    assert not missing, f"packages without a row in ALLOWED (docs/architecture.md): {missing}"
    for name, path in modules.items():
        pkg = _package(name)
        bad = {_package(m) for m in _imports(name, path, modules)} - ALLOWED[pkg] - {pkg}
        if pkg == "simulator":  # the package's __init__: its own subpackages are below it
            bad = set()
        if bad:
            wrong[name] = sorted(bad)
    assert not wrong, f"imports that docs/architecture.md does not allow: {wrong}"


def test_the_layers_have_no_back_arrow():
    """Read as a graph, ALLOWED itself has no cycle: the layers only point down."""
    graph = {pkg: {d for d in deps if d != "simulator"} for pkg, deps in ALLOWED.items()}
    assert _cycles(graph) == []


#: the engine's decisions: which engine runs a call, or a launch. Below the evaluator seam
#: nothing takes them (docs/architecture.md, "The evaluator seam")
ENGINE_DECISIONS = {"carry", "get_engine", "launch_compiled", "launching", "numba_dot_add",
                    "numba_softmax", "task_threads", "wants_numba"}
#: the one module of ``flash`` that reads the engine setting: it picks a launch's evaluator
SEAM = "simulator.flash.evaluator"
#: below the seam: the launch and its mainloops, and the layers under them
BELOW_SEAM = ("simulator.flash", "simulator.hw", "simulator.numerics", "simulator.gpus",
              "simulator.trace")
#: the tensor cores' public entry points (``mma.gemm``, ``wgmma``, ``fused_dot_add``) keep the
#: engine's per-call choice for a caller outside a launch (``compiled=None``); a launch's
#: evaluator passes ``compiled`` explicitly
MMA_DISPATCH = {"simulator.mma", "simulator.mma.fused"}


def _engine_decisions(name: str, path: Path) -> set[str]:
    """The engine decisions (:data:`ENGINE_DECISIONS`) module ``name`` takes: ``engine.X``
    through a name bound to ``simulator.engine``, or ``X`` imported from it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    aliases, found = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - (node.level - 1)] if node.level \
                else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                if f"{target}.{alias.name}" == "simulator.engine":
                    aliases.add(alias.asname or alias.name)
                elif target == "simulator.engine" and alias.name in ENGINE_DECISIONS:
                    found.add(alias.name)
        elif isinstance(node, ast.Import):
            aliases |= {a.asname for a in node.names if a.name == "simulator.engine" and a.asname}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases and node.attr in ENGINE_DECISIONS):
            found.add(node.attr)
    return found


def _below_seam(name: str) -> bool:
    return name != SEAM and any(name == p or name.startswith(p + ".") for p in BELOW_SEAM)


def test_nothing_below_the_evaluator_seam_asks_which_engine_runs():
    """A launch picks its evaluator once (``flash.evaluator.pick``) and passes it to its
    mainloops: no other module of ``flash`` imports the engine, nothing below the seam takes an
    engine decision, and ``mma`` only in its public entry points' per-call dispatch."""
    modules = _modules()
    importers = sorted(name for name, path in modules.items() if _below_seam(name) and any(
        m == "simulator.engine" or m.startswith("simulator.engine.")
        for m in _imports(name, path, modules)))
    assert importers == [], f"modules below the evaluator seam importing simulator.engine: {importers}"
    deciders = {name: sorted(found) for name, path in modules.items()
                if (found := _engine_decisions(name, path)) and not name.startswith("simulator.engine")}
    below = {n: d for n, d in deciders.items() if _below_seam(n) or
             (n.startswith("simulator.mma") and n not in MMA_DISPATCH)}
    assert below == {}, f"engine decisions below the evaluator seam: {below}"
    assert SEAM in deciders  # the seam itself reads the setting (the check sees it)


def test_the_decision_check_sees_every_spelling(tmp_path):
    """``engine.X`` through any alias, and ``X`` imported from the engine, are both found."""
    pkg = tmp_path / "simulator" / "flash"
    pkg.mkdir(parents=True)
    (pkg / "a.py").write_text("from .. import engine as e\ndef f():\n    return e.wants_numba('x', 0)\n")
    (pkg / "b.py").write_text("from ..engine import numba_softmax  # noqa\n")
    (pkg / "c.py").write_text("from .. import engine\nengine.dot_add_decoded\n")
    assert _engine_decisions("simulator.flash.a", pkg / "a.py") == {"wants_numba"}
    assert _engine_decisions("simulator.flash.b", pkg / "b.py") == {"numba_softmax"}
    assert _engine_decisions("simulator.flash.c", pkg / "c.py") == set()
