"""References a reader can follow: docs, notebooks and the package cite files of this repository,
FA3's source or the PTX ISA, never a file outside the repository; titles and test names carry
no tracker labels."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tracked(*patterns: str) -> list[Path]:
    return sorted({p for pattern in patterns for p in ROOT.glob(pattern) if p.is_file()})


READ_BY_USERS = [p for p in _tracked("README.md", "docs/*.md", "notebooks/src/*.py", "notebooks/*.ipynb",
                                     "simulator/**/*.py", "kernels/**/*.cu", "scripts/*",
                                     "tests/*.py", "benchmarks/*.py", ".ci/*")
                 if p.resolve() != Path(__file__).resolve()]
# a path into a folder outside the repository, or a numbered section of a document it does not hold
OUTSIDE = re.compile(r"shared/|\.\./shared|seed/|\bthe seed\b|seed document|seed file|§")


@pytest.mark.parametrize("path", READ_BY_USERS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_reference_outside_the_repository(path):
    hits = [f"{n}: {line.strip()[:100]}" for n, line in
            enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if OUTSIDE.search(line)]
    assert not hits, f"{path.relative_to(ROOT)} cites what a user cannot open:\n" + "\n".join(hits)


def test_forward_md_holds_the_sections_the_notebooks_cite():
    """The notebooks cite docs/forward.md by section title; each title exists."""
    headings = {line.lstrip("#").strip() for line in
                (ROOT / "docs" / "forward.md").read_text(encoding="utf-8").splitlines()
                if line.startswith("## ")}
    cited = set()
    for path in _tracked("notebooks/src/*.py", "docs/notebooks.md"):
        text = path.read_text(encoding="utf-8").replace("\n# ", " ")
        cited |= set(re.findall(r'forward\.md,? "([^"]+)"', text))
    assert cited, "no docs/forward.md section cited by title"
    for title in cited:
        assert any(h.startswith(title.replace("`", "").strip()) or h.replace("`", "").startswith(
            title.replace("`", "").strip()) for h in headings), (title, sorted(headings))


def test_doc_titles_carry_no_tracker_labels():
    bad = [f"{p.relative_to(ROOT)}: {line}" for p in _tracked("README.md", "docs/*.md")
           for line in p.read_text(encoding="utf-8").splitlines()
           if line.startswith("#") and re.search(r"(?i)\((issue|review|pr)\s*#?\s*\d+\)", line)]
    assert not bad, bad


def test_tests_and_benchmarks_name_no_reviews_or_issues():
    # "issue" as a verb (a kernel issues an instruction) is fine; a tracker item or a review is not
    label = re.compile(r"(?i)\b(the|this|that|an?|adversarial|code)\s+(issue|review)s?\b"
                       r"|\b(issue|review)s?\s*#?\d|def test_\w*(issue|review)")
    me = Path(__file__).resolve()
    bad = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
           for p in _tracked("tests/*.py", "benchmarks/*.py") if p.resolve() != me
           for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if label.search(line)]
    assert not bad, "\n".join(bad)
