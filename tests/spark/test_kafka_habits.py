"""Kafka-habit options give what Spark's Kafka source gives (issue 26, item 3).

For every option docs/from-kafka.md says "works as in Kafka", the scenarios of
harness/_kafka_habits.py run on the jetstream source here and are compared
with what Spark's Kafka source returned for the same queries on a real Kafka
broker, recorded in tests/spark/kafka_habits.json by ``make bench-peers``
(bench/peers/habits.py, which also compares both live). Recorded, not live: a
clean clone runs this without Kafka's jars, a broker or Maven Central, and it is
never skipped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from harness import NOT_COMPARED, RUNNERS, SCENARIOS, JetStreamSide
from oncestream.server import NatsServer

ROOT = Path(__file__).resolve().parents[2]
RECORD = json.loads((Path(__file__).with_name("kafka_habits.json")).read_text())
pytestmark = pytest.mark.timeout(300)


def same_as_kafka_options() -> list[str]:
    """The first column of the doc's "works as in Kafka" source table."""
    text = (ROOT / "docs" / "from-kafka.md").read_text()
    table = text.split("<!-- kafka-table: source-same -->", 1)[1].strip().split("\n\n", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    return [m.group(1) for line in rows if (m := re.match(r"\| `([^`]+)`", line))]


def test_every_claimed_option_is_compared_or_says_why() -> None:
    covered = {opt for opts in SCENARIOS.values() for opt in opts}
    claimed = same_as_kafka_options()
    assert claimed, "docs/from-kafka.md lost its source-same table"
    missing = [o for o in claimed if o not in covered and o not in NOT_COMPARED]
    assert not missing, f"claimed to work as in Kafka, compared with Kafka nowhere: {missing}"
    assert set(RECORD["results"]) == set(RUNNERS), "re-record: make bench-peers"


@pytest.fixture(scope="module")
def jetstream_results(spark: Any, module_nats_server: NatsServer) -> dict[str, Any]:
    side = JetStreamSide(spark, module_nats_server.url)
    return {name: run(side) for name, run in RUNNERS.items()}


@pytest.mark.parametrize("scenario", sorted(RUNNERS))
def test_same_rows_and_batches_as_kafka(scenario: str, jetstream_results: dict[str, Any]) -> None:
    kafka = RECORD["results"][scenario]
    assert jetstream_results[scenario] == kafka, (
        f"{scenario} ({', '.join(SCENARIOS[scenario])}) differs from Spark's Kafka source "
        f"(Kafka {RECORD['kafka']}, spark-sql-kafka {RECORD['spark_sql_kafka']})"
    )
