"""Functions of a readable length in the API layer: every function (and method) of
``simulator/fa3/`` is at most 120 lines, signature and docstring included (docs/architecture.md:
arguments are checked once into a record at the boundary, then passed as that record, so no
entry point holds a whole launch)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "simulator"
MAX_FUNCTION_LINES = 120
#: the packages held to the rule, relative to ``simulator/``
PACKAGES = ("fa3",)


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """``{"module.py:qualified.name": lines}`` of the functions of ``path`` over ``limit``
    lines (from ``def`` to the last line of the body; nested functions count in their parent
    and on their own)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    lines = child.end_lineno - child.lineno + 1
                    if lines > limit:
                        found[f"{path.name}:{name}"] = lines
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def test_fa3_functions_are_at_most_120_lines():
    long = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            long.update(long_functions(path))
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_the_length_rule_sees_methods_and_nested_functions(tmp_path):
    """A long method, and a long function nested in a short-enough one, are both found."""
    body = "".join(f"    x{i} = {i}\n" for i in range(5))
    src = (f"class A:\n    def m(self):\n{body.replace('    ', '        ')}"
           f"def f():\n    def g():\n{body.replace('    ', '        ')}    return g\n")
    path = tmp_path / "mod.py"
    path.write_text(src)
    assert long_functions(path, limit=5) == {"mod.py:A.m": 6, "mod.py:f": 8, "mod.py:f.g": 6}
