"""docs/from-kafka.md's option tables agree with the option validator (issue 12).

Every Kafka option in the source and sink tables is refused by the jetstream
side with the jetstream names the table gives, or, for a row whose jetstream
cell is "—", as having no counterpart. Names that are the same on both sides
must be accepted.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from oncestream import ConfigError
from oncestream.spark._sink_options import SinkOptions
from oncestream.spark._source_options import SourceOptions

DOC = Path(__file__).resolve().parents[2] / "docs" / "from-kafka.md"
BASE = {"servers": "nats://127.0.0.1:4222", "stream": "S"}


def _rows(side: str) -> list[tuple[str, list[str]]]:
    text = DOC.read_text()
    table = text.split(f"<!-- kafka-table: {side} -->", 1)[1].split("\n\n", 1)[0]
    rows: list[tuple[str, list[str]]] = []
    for line in table.strip().splitlines()[2:]:
        kafka_cell, jet_cell = (cell.strip() for cell in line.strip("|").split("|")[:2])
        if not kafka_cell.startswith("`"):
            continue  # "—" (jetstream-only) or a broker setting, not a Spark option
        jet = re.findall(r"`([^`]+)`", jet_cell)
        rows.extend((name, jet) for name in re.findall(r"`([^`]+)`", kafka_cell))
    return rows


CASES = [("source", *row) for row in _rows("source")] + [("sink", *row) for row in _rows("sink")]


def test_tables_are_found() -> None:
    names = {name for _, name, _ in CASES}
    assert {"maxOffsetsPerTrigger", "subscribe", "kafka.bootstrap.servers", "topic"} <= names


@pytest.mark.parametrize(
    ("side", "kafka", "jetstream"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES]
)
def test_kafka_option_gets_the_documented_answer(
    side: str, kafka: str, jetstream: list[str]
) -> None:
    parse = SourceOptions.from_spark_options if side == "source" else SinkOptions.from_spark_options
    if jetstream == [kafka]:
        return  # same name on both sides (values checked in the source tests)
    with pytest.raises(ConfigError) as err:
        parse({**BASE, kafka: "1"})
    message = str(err.value).split(". Known options", 1)[0]
    assert f"'{kafka}'" in message
    if not jetstream:
        assert "no jetstream counterpart" in message, message
    else:
        for name in jetstream:
            assert f"'{name}'" in message, message
