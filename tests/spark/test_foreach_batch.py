"""The transactional foreachBatch helper: rows and batch id commit together, replays are skipped."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from oncestream import ConfigError
from oncestream.spark import transactional


def _rows(target: str, sql: str) -> list[tuple[Any, ...]]:
    if target.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(target) as pg:
            return [tuple(r) for r in pg.execute(sql).fetchall()]
    with sqlite3.connect(target) as db:
        return db.execute(sql).fetchall()


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "out.db")
    return str(request.getfixturevalue("postgres_url"))


def test_replayed_batch_is_skipped(spark, target: str) -> None:  # type: ignore[no-untyped-def]
    write = transactional(target, table="orders", key_columns=["order_id"], query_name="q1")
    first = spark.createDataFrame([("a", 1.5), ("b", 2.0)], "order_id string, amount double")
    second = spark.createDataFrame([("c", 3.0)], "order_id string, amount double")
    write(first, 0)
    write(first, 0)  # Spark's replay of batch 0 after a failure before its commit
    write(second, 1)
    assert write.skipped == [0]
    rows = _rows(target, "SELECT order_id, amount FROM orders ORDER BY order_id")
    assert rows == [("a", 1.5), ("b", 2.0), ("c", 3.0)]
    batches = _rows(target, "SELECT batch_id, rows_written FROM oncestream_batches ORDER BY 1")
    assert batches == [(0, 2), (1, 1)]


def test_failed_transaction_leaves_nothing(spark, target: str) -> None:  # type: ignore[no-untyped-def]
    write = transactional(target, table="orders", key_columns=["order_id"], query_name="q1")
    write(spark.createDataFrame([("a",)], "order_id string"), 0)
    clash = spark.createDataFrame([("b",), ("a",)], "order_id string")  # 'a' violates the key
    with pytest.raises(Exception, match="batch 1"):
        write(clash, 1)
    assert _rows(target, "SELECT order_id FROM orders") == [("a",)]
    assert _rows(target, "SELECT batch_id FROM oncestream_batches") == [(0,)]
    upsert = transactional(
        target, table="orders", key_columns=["order_id"], mode="upsert", query_name="q1"
    )
    upsert(clash, 1)
    assert sorted(_rows(target, "SELECT order_id FROM orders")) == [("a",), ("b",)]


def test_streaming_query_crash_after_commit(spark, target: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The query dies after the DB commit, before Spark's; the restart replays, writes nothing."""
    source = tmp_path / "in"
    source.mkdir()
    for n in range(3):
        lines = [json.dumps({"order_id": f"o{n}-{i}", "amount": float(i)}) for i in range(100)]
        (source / f"part-{n}.json").write_text("\n".join(lines))
    write = transactional(target, table="orders", key_columns=["order_id"])
    crashed: list[int] = []

    def crash_once(df, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        write(df, batch_id)
        if batch_id == 1 and not crashed:
            crashed.append(batch_id)
            raise RuntimeError("planted crash between the DB commit and Spark's commit")

    def run() -> Any:
        stream = (
            spark.readStream.schema("order_id string, amount double")
            .option("maxFilesPerTrigger", 1)
            .json(str(source))
        )
        return (
            stream.writeStream.foreachBatch(crash_once)
            .option("checkpointLocation", str(tmp_path / "chk"))
            .trigger(availableNow=True)
            .start()
        )

    first = run()
    with pytest.raises(Exception, match="planted crash"):
        first.awaitTermination(120)
    second = run()
    assert second.awaitTermination(120) is not False
    assert second.exception() is None
    assert write.skipped == [1]
    count, distinct = _rows(target, "SELECT count(*), count(DISTINCT order_id) FROM orders")[0]
    assert (count, distinct) == (300, 300)
    batches = _rows(target, "SELECT batch_id FROM oncestream_batches ORDER BY 1")
    assert batches == [(0,), (1,), (2,)]


def test_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="table"):
        transactional("x.db", table="drop table")
    with pytest.raises(ConfigError, match="key_columns"):
        transactional("x.db", table="t", mode="upsert")
