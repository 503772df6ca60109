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


#: The Connect cases of the query-scope tests below run in make test's thin-client stage
#: (a 4.2 Connect server: foreachBatch runs in the server's Python worker, whatever the
#: client); the main suite keeps their classic cases, the crash and restart under Connect
#: (test_streaming_query_crash_after_commit) and every sink's replay under Connect
#: (test_sink_replay.py). ``make test-main`` deselects the marker ``connect_stage``.
SCOPE_JOBS = pytest.mark.parametrize(
    "spark_job",
    ["classic", pytest.param("connect", marks=pytest.mark.connect_stage)],
    indirect=True,
)


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


def test_a_reused_query_name_is_refused_not_skipped(spark, target: str) -> None:  # type: ignore[no-untyped-def]
    """A new checkpoint under an old query_name restarts at batch 0: refused, never skipped."""
    old = transactional(target, table="orders", query_name="q1")
    for batch_id in range(3):
        old(spark.createDataFrame([(f"o{batch_id}",)], "order_id string"), batch_id)
    new = transactional(target, table="orders", query_name="q1")
    with pytest.raises(ConfigError, match=r"already holds batch 2 of query 'q1'.*new query_name"):
        new(spark.createDataFrame([("n0",)], "order_id string"), 0)
    assert sorted(_rows(target, "SELECT order_id FROM orders")) == [("o0",), ("o1",), ("o2",)]
    assert _rows(target, "SELECT max(batch_id), count(*) FROM oncestream_batches") == [(2, 3)]
    # The last batch again is Spark's replay (skipped), the next one is written.
    new(spark.createDataFrame([("o2",)], "order_id string"), 2)
    new(spark.createDataFrame([("o3",)], "order_id string"), 3)
    assert new.skipped == [2]
    assert len(_rows(target, "SELECT order_id FROM orders")) == 4


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


def _orders(folder: Path, prefix: str, files: int = 3, rows: int = 100) -> str:
    """``files`` JSON files of ``rows`` orders each, ids ``<prefix><file>-<row>``."""
    folder.mkdir()
    for n in range(files):
        lines = [
            json.dumps({"order_id": f"{prefix}{n}-{i}", "amount": float(i)}) for i in range(rows)
        ]
        (folder / f"part-{n}.json").write_text("\n".join(lines))
    return str(folder)


def test_streaming_query_crash_after_commit(spark_job, target: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The query dies after the DB commit, before Spark's; the restart replays, writes nothing.

    On a classic session and through Spark Connect (batch ids scoped by the query id
    read from ``checkpoint_location`` there).
    """
    source = _orders(tmp_path / "in", "o")
    result = spark_job(
        "transactional_crash_after_commit", target=target, source=source, work=str(tmp_path)
    )
    assert "planted crash" in result["first"]
    assert result["second"] is None
    calls = result["calls"]
    # Batch 1 ran twice: the replay found its id committed and wrote nothing.
    assert [c["batch"] for c in calls] == [0, 1, 1, 2]
    assert calls[2]["skipped"] == [1]
    count, distinct = _rows(target, "SELECT count(*), count(DISTINCT order_id) FROM orders")[0]
    assert (count, distinct) == (300, 300)
    batches = _rows(target, "SELECT batch_id FROM oncestream_batches ORDER BY 1")
    assert batches == [(0,), (1,), (2,)]


@SCOPE_JOBS
def test_two_writers_of_one_query_into_one_table_fail(spark_job, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Two writers, configured otherwise, into one table in one query: a ConfigError.

    Their batch ids share the query's scope, so the second writer found each batch
    recorded by the first and skipped it: before the claim check, every upsert was
    skipped (amounts not doubled) and the query ended without error. A writer
    re-created identically every batch is one writer: its replay is still skipped.
    """
    source, target = _orders(tmp_path / "in", "o"), str(tmp_path / "out.db")
    result = spark_job("transactional_two_writers", target=target, source=source,
                       work=str(tmp_path))  # fmt: skip
    error = result["error"] or ""
    assert "ConfigError" in error and "two writers write table events in one query" in error
    assert "(union them), or give each writer its own batches_table" in error
    assert result["amounts"] == [float(i) for i in range(100)]  # only ins wrote: refused
    assert "planted crash" in result["first"] and result["second"] is None
    calls = result["calls"]
    assert [c["batch"] for c in calls] == [0, 1, 1, 2]
    assert calls[2]["skipped"] == [1]  # the re-created writer skipped the replay
    count, distinct = _rows(target, "SELECT count(*), count(DISTINCT order_id) FROM orders")[0]
    assert (count, distinct) == (300, 300)


@SCOPE_JOBS
def test_two_queries_write_one_table(spark_job, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Two queries, each with its own checkpoint, into one table: every row of both.

    Classic Spark tells the batch function its query's id. Spark Connect does not:
    there ``transactional`` without ``query_name`` or ``checkpoint_location`` is refused
    at once, naming both, and with ``checkpoint_location`` both queries' rows arrive.
    Before, under Connect, every query shared the table name as its scope and the
    second query's 15 rows were skipped as "already committed" (exit 0).
    """
    target = str(tmp_path / "out.db")
    sources = [_orders(tmp_path / f"in-{q}", f"q{q}-", rows=5) for q in (1, 2)]
    default = spark_job("transactional_two_queries", target=target, sources=sources,
                        work=str(tmp_path / "default"), scope="default")  # fmt: skip
    if spark_job.mode == "classic":
        assert default == {"errors": [None, None]}
    else:
        rows = _rows(target, "SELECT count(*) FROM sqlite_master WHERE name = 't'")
        if rows == [(1,)]:
            rows = _rows(target, "SELECT count(*) FROM t")
        assert "refused" in default, f"not refused: {default}, rows in t: {rows}"
        refused = default["refused"]
        assert refused.startswith("ConfigError") and "under Spark Connect" in refused, default
        assert "query_name" in refused and "checkpoint_location" in refused
        assert _rows(target, "SELECT count(*) FROM sqlite_master WHERE name = 't'") == [(0,)]
        result = spark_job("transactional_two_queries", target=target, sources=sources,
                           work=str(tmp_path / "checkpoint"), scope="checkpoint")  # fmt: skip
        assert result == {"errors": [None, None]}
    ids = sorted(r[0] for r in _rows(target, "SELECT order_id FROM t"))
    assert ids == sorted(f"q{q}-{n}-{i}" for q in (1, 2) for n in range(3) for i in range(5))


@SCOPE_JOBS
def test_new_checkpoint_is_a_new_query(spark_job, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A checkpoint deleted and the query started again on new input: its rows arrive.

    A new checkpoint is a new query (Spark writes a new query id there), whose batch
    ids start at 0 again; scoped by the table name, as under Connect before, they
    were all skipped as the deleted query's.
    """
    target = str(tmp_path / "out.db")
    sources = [_orders(tmp_path / f"in-{q}", f"r{q}-", rows=5) for q in (1, 2)]
    result = spark_job("transactional_new_checkpoint", target=target, sources=sources,
                       work=str(tmp_path))  # fmt: skip
    assert result == {"errors": [None, None]}
    assert _rows(target, "SELECT count(*), count(DISTINCT order_id) FROM t") == [(30, 30)]


@SCOPE_JOBS
def test_a_new_checkpoint_under_an_old_query_name_is_a_new_query(spark_job, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """One-batch queries reusing query_name: the second's rows arrive; a copied checkpoint fails.

    Before, the scope was the name alone: the second query's batch 0 equalled the
    first's last batch and was skipped as committed (5 of 10 rows, exit 0), and a
    query handed another query's checkpoint_location lost all its rows the same way.
    """
    sources = [_orders(tmp_path / f"in-{q}", f"r{q}-", files=1, rows=5) for q in (1, 2, 3)]
    cases = [True] if spark_job.mode == "connect" else [True, False]
    for with_location in cases:
        target = str(tmp_path / f"out-{with_location}.db")
        result = spark_job("transactional_reused_name", target=target, sources=sources,
                           work=str(tmp_path / f"w-{with_location}"),
                           with_location=with_location)  # fmt: skip
        errors = result["errors"]
        assert errors[:2] == [None, None], errors
        ids = sorted(r[0] for r in _rows(target, "SELECT order_id FROM t"))
        if not with_location:
            assert ids == sorted(f"r{q}-0-{i}" for q in (1, 2) for i in range(5)), ids
        elif spark_job.mode == "classic":  # Spark names the query: the copied location is unused
            assert errors[2] is None
            assert ids == sorted(f"r{q}-0-{i}" for q in (1, 2, 3) for i in range(5)), ids
        else:  # the copied checkpoint holds a commit of batch 0: refused, not skipped
            assert "not this query's checkpointLocation" in (errors[2] or ""), errors[2]
            assert ids == sorted(f"r{q}-0-{i}" for q in (1, 2) for i in range(5)), ids


def test_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="table"):
        transactional("x.db", table="drop table")
    with pytest.raises(ConfigError, match="key_columns"):
        transactional("x.db", table="t", mode="upsert")
    with pytest.raises(ConfigError, match="query_name must be a non-empty string"):
        transactional("x.db", table="t", query_name=" ")
    with pytest.raises(ConfigError, match="checkpoint_location must be"):
        transactional("x.db", table="t", checkpoint_location="")


def test_a_batch_without_a_query_to_scope_it_is_refused(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Outside a streaming query, without query_name: no scope is guessed, nothing written."""
    target = str(tmp_path / "out.db")
    write = transactional(target, table="t")
    with pytest.raises(ConfigError, match="not part of a streaming query") as err:
        write(spark.createDataFrame([("a",)], "k string"), 0)
    assert "checkpoint_location=" in str(err.value) and "query_name=" in str(err.value)
    assert _rows(target, "SELECT count(*) FROM sqlite_master") == [(0,)]
    missing = transactional(target, table="t", checkpoint_location=str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match="cannot read the query id"):
        missing(spark.createDataFrame([("a",)], "k string"), 0)
