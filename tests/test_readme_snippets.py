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
