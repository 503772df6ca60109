"""Every results file README.md and docs/ cite is committed.

A figure in the docs names the results file it came from
(``bench/results/scale-20261126-210123.md``, ``torture/results/...``), or names the
run alone (``scale-20261126-210123``, ``peers-20261127-175909.json``); a file that
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
#: A run named without its folder: ``<kind>-<yyyymmdd>-<hhmmss>``, an extension or not.
_RUN_NAME = re.compile(r"(?<![\w/.-])([a-z][a-z-]*-\d{8}-\d{6})((?:\.[a-z]+)*)(?![\w-])")
#: Folders a bare run name may live in.
RESULTS = ("bench/results/", "torture/results/")
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
    for stem, ext in _RUN_NAME.findall(_REFERENCE.sub("", markdown)):
        name = stem + ext.rstrip(".")
        names = {path.rsplit("/", 1)[-1] for path in tracked if path.startswith(RESULTS)}
        found = (
            name in names
            if ext.rstrip(".")
            else any(n == stem or n.startswith(stem + ".") for n in names)
        )
        if not found:
            bad.append(f"{name}: no committed results file of that name")
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
        "Runs scale-20261126-170130 and peers-20261127-080343.json (bench-20261126-115248,\n"
        "scale-20261122-213943.md) and scale-20261129-054547.\n"
    )
    assert missing(
        page,
        tracked
        | {
            "bench/results/bench-20261126-115248.json",
            "bench/results/scale-20261122-213943.md",
            "bench/results/scale-20261129-054547.json",
        },
    ) == [
        "bench/results/peers-2.json: not committed",
        "torture/results/run-3/summary.json: not committed",
        "scale-20261126-170130: no committed results file of that name",
        "peers-20261127-080343.json: no committed results file of that name",
    ]
