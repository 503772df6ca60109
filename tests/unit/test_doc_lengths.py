"""The pages a new reader opens first stay short: README.md and docs/benchmarks.md.

README.md is what it is, the two commands, a tour and links; benchmarks.md the
current tables, how to reproduce them and the method (history lives in the
committed results files and git).
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 300


@pytest.mark.parametrize("page", ["README.md", "docs/benchmarks.md"])
def test_page_stays_under_its_length(page: str) -> None:
    lines = (ROOT / page).read_text().count("\n")
    assert lines < MAX_LINES, f"{page} has {lines} lines (keep it under {MAX_LINES})"
