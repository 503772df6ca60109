"""docs/from-kafka.md's option tables agree with the option validator (issues 12 and 23).

The source table is two groups. "Works as in Kafka": the Kafka name is a
source option. "Differs": the Kafka option is refused with the jetstream names
the row gives or, for a row whose jetstream cell is "—", as having no
counterpart (a row naming the Kafka option itself is accepted, with the
difference its row gives). Every source row names its tests, which must exist
in tests/spark; every Kafka option of the validator has a row. Sink rows are
refused like the "differs" group.
"""

from __future__ import annotations

import re

import pytest

from oncestream import ConfigError
from oncestream.spark._options import KAFKA_OPTIONS
from oncestream.spark._sink_options import SinkOptions
from oncestream.spark._source_options import SOURCE_OPTIONS, SourceOptions
from tests._kafka_doc import ROOT, ROWS

BASE = {"servers": "nats://127.0.0.1:4222", "stream": "S"}

CASES = [
    (row.table, kafka, row.jetstream)
    for name in ("source-differs", "sink")
    for row in ROWS[name]
    for kafka in row.kafka
]


def test_tables_are_found() -> None:
    same = {k for row in ROWS["source-same"] for k in row.kafka}
    differs = {k for row in ROWS["source-differs"] for k in row.kafka}
    sink = {k for row in ROWS["sink"] for k in row.kafka}
    assert {"maxOffsetsPerTrigger", "minOffsetsPerTrigger", "endingTimestamp"} <= same
    assert {"subscribe", "kafka.bootstrap.servers", "groupIdPrefix"} <= differs
    assert {"topic", "kafka.acks"} <= sink
    assert not same & differs


@pytest.mark.parametrize("name", ["source-same", "source-differs"])
def test_source_rows_are_one_option_each_and_name_existing_tests(name: str) -> None:
    sources = {p.name: p.read_text() for p in (ROOT / "tests" / "spark").glob("test_*.py")}
    for row in ROWS[name]:
        assert len(row.kafka) <= 1, f"one Kafka option per row: {row.kafka}"
        if not row.kafka:
            continue  # the jetstream-only row
        assert row.tests, f"{row.kafka[0]}: the row names no test"
        for test in row.tests:
            file, _, function = test.partition("::")
            assert file in sources, f"{row.kafka[0]}: no tests/spark/{file}"
            assert re.search(rf"def {re.escape(function)}\(", sources[file]), (
                f"{row.kafka[0]}: no test {function} in tests/spark/{file}"
            )


def test_works_as_in_kafka_rows_are_source_options() -> None:
    known = {n.lower() for n in SOURCE_OPTIONS}
    for row in ROWS["source-same"]:
        assert row.jetstream == row.kafka, row
        assert row.kafka[0].lower() in known, f"{row.kafka[0]} is not accepted by the source"


def test_every_kafka_option_of_the_validator_has_a_row() -> None:
    documented = {k for rows in ROWS.values() for row in rows for k in row.kafka}
    missing = set(KAFKA_OPTIONS) - documented
    assert not missing, f"Kafka options without a row in docs/from-kafka.md: {sorted(missing)}"


@pytest.mark.parametrize(
    ("table", "kafka", "jetstream"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES]
)
def test_kafka_option_gets_the_documented_answer(
    table: str, kafka: str, jetstream: list[str]
) -> None:
    parse = SinkOptions.from_spark_options if table == "sink" else SourceOptions.from_spark_options
    if jetstream == [kafka]:
        assert kafka in SOURCE_OPTIONS  # accepted, with the difference its row gives
        return
    with pytest.raises(ConfigError) as err:
        parse({**BASE, kafka: "1"})
    message = str(err.value).split(". Known options", 1)[0]
    assert f"'{kafka}'" in message
    if not jetstream:
        assert "no jetstream counterpart" in message, message
    else:
        for name in jetstream:
            assert f"'{name}'" in message, message
