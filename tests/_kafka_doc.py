"""The option tables of docs/from-kafka.md, parsed for the tests that check them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "from-kafka.md"
GROUPS = ("source-same", "source-differs", "sink")


class Row(NamedTuple):
    """One table row: the Kafka option (none for a jetstream-only row), ours, the tests."""

    table: str
    kafka: list[str]
    jetstream: list[str]
    tests: list[str]


def table(name: str) -> list[Row]:
    """The rows of the table after ``<!-- kafka-table: name -->``."""
    text = DOC.read_text()
    assert f"<!-- kafka-table: {name} -->" in text, name
    body = text.split(f"<!-- kafka-table: {name} -->", 1)[1].split("\n\n", 1)[0]
    rows: list[Row] = []
    for line in body.strip().splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        tests = re.findall(r"`([^`]+)`", cells[3]) if len(cells) > 3 else []
        # "—" (jetstream-only) or a broker setting: not a Spark option
        kafka = re.findall(r"`([^`]+)`", cells[0]) if cells[0].startswith("`") else []
        rows.append(Row(name, kafka, re.findall(r"`([^`]+)`", cells[1]), tests))
    return rows


ROWS = {name: table(name) for name in GROUPS}
