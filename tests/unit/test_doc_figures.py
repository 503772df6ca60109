"""Every results file README.md and docs/ cite is committed (issue 42).

A figure in the docs names the results file it came from
(``bench/results/scale-20261126-210123.md``, ``torture/results/...``); a file that
is not in the repository backs nothing, so its figures are withdrawn rather than
quoted. Results are git-ignored by default (``.gitignore``): one that backs a
figure is added on purpose (``git add -f``), and this test fails until it is.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
_REFERENCE = re.compile(r"(?<![\w/.-])((?:bench|torture)/results/[\w./*<>{}-]*)")
#: Where every run writes: named as the place to look, not as the source of a figure.
OUTPUTS = frozenset({"torture/results/latest.json"})


@cache
def committed(root: Path = ROOT) -> frozenset[str]:
    """The repository's tracked files (paths relative to ``root``)."""
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True, text=True
    ).stdout
    return frozenset(out.split("\0")) - {""}


def missing(markdown: str, tracked: frozenset[str]) -> list[str]:
    """The results files ``markdown`` cites that are not in ``tracked``.

    A pattern (``scale-*.md``, ``<timestamp>/``) names no file; a folder must hold
    a tracked file.
    """
    bad: list[str] = []
    for ref in _REFERENCE.findall(markdown):
        ref = ref.rstrip(".")
        if re.search(r"[*<>{}]", ref) or ref in OUTPUTS:
            continue
        if ref.endswith("/"):
            if not any(path.startswith(ref) for path in tracked):
                bad.append(f"{ref}: no committed file in it")
        elif ref not in tracked:
            bad.append(f"{ref}: not committed")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_cited_results_files_are_committed(page: Path) -> None:
    assert missing(page.read_text(), committed()) == []


def test_an_uncommitted_results_file_is_reported() -> None:
    tracked = frozenset({"bench/results/bench-1.json", "torture/results/.gitkeep"})
    page = (
        "From `bench/results/bench-1.json` and bench/results/peers-2.json.\n"
        "Runs write `torture/results/<timestamp>/`, `bench/results/scale-*.md` and\n"
        "torture/results/latest.json; see torture/results/ and bench/nothing/.\n"
        "Cited: torture/results/run-3/summary.json.\n"
    )
    assert missing(page, tracked) == [
        "bench/results/peers-2.json: not committed",
        "torture/results/run-3/summary.json: not committed",
    ]
