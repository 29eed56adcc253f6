"""Every Python block of README.md runs as written, in a fresh namespace (a block that needs
names it does not define, or whose API changed, fails here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_python_blocks():
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_python_block_runs(index, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # anything a block writes lands here
    exec(compile(BLOCKS[index], f"README.md python block {index + 1}", "exec"), {"__name__": "__main__"})
    capsys.readouterr()


def _run_commands() -> list[str]:
    """Every ``python -m simulator run ...`` the README and docs/ show, comments cut, the
    placeholders (B,H,M, N) given values; the bracketed synopsis and --help left out."""
    docs = [README, *sorted((README.parent / "docs").glob("*.md"))]
    found = {m.split("#")[0].strip() for path in docs
             for m in re.findall(r"python -m simulator run[^`\n]*", path.read_text(encoding="utf-8"))}
    return sorted(c.replace("B,H,M", "0,1,2").replace("--workers N", "--workers 1") for c in found
                  if "[" not in c and "--help" not in c)


@pytest.mark.parametrize("command", _run_commands())
def test_every_run_command_shown_parses(command):
    """A command a reader copies (``run --explain B,H,M``, not a bare ``--explain``) is one the
    parser takes: no usage error."""
    from simulator.run.command import build_parser

    build_parser().parse_args(command.split()[4:])
