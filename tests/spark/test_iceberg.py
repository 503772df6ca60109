"""oncestream.spark.iceberg: micro-batches into an Iceberg table with pyiceberg, exactly once.

The batch id travels in the same Iceberg commit as the rows (a table property,
the mark, and the snapshot's summary); the tests read the table back with
pyiceberg, as any reader would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from oncestream import ConfigError
from oncestream.spark import iceberg
from oncestream.spark._iceberg import MARK_PREFIX, IcebergWriteError, committed_batch

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]


def _table(writer: Any) -> Any:
    return writer._catalog().load_table(writer.table)


def _rows(writer: Any) -> list[dict[str, Any]]:
    return list(_table(writer).scan().to_arrow().to_pylist())


def test_replayed_batch_writes_nothing(spark: Any, tmp_path: Path) -> None:
    write = iceberg("lake.orders", warehouse=str(tmp_path), query_name="q1")
    first = spark.createDataFrame([("a", 1.5), ("b", 2.0)], "order_id string, amount double")
    second = spark.createDataFrame([("c", 3.0)], "order_id string, amount double")
    write(first, 0)
    write(first, 0)  # Spark's replay of batch 0 after a crash between the two commits
    write(second, 1)
    assert write.skipped == [0]
    assert sorted((r["order_id"], r["amount"]) for r in _rows(write)) == [
        ("a", 1.5), ("b", 2.0), ("c", 3.0),
    ]  # fmt: skip
    table = _table(write)
    assert table.properties[MARK_PREFIX + "q1"] == "1"
    summaries = [(s.summary["oncestream.query"], s.summary["oncestream.batch-id"])
                 for s in table.metadata.snapshots]  # fmt: skip
    assert summaries == [("q1", "0"), ("q1", "1")]  # the replay committed nothing
    # Another query writing the same table has batch ids of its own.
    other = iceberg("lake.orders", warehouse=str(tmp_path), query_name="q2")
    other(second, 0)
    assert other.skipped is None and len(_rows(write)) == 4
    # An older batch of a query (a checkpoint restored from an older copy): refused.
    with pytest.raises(IcebergWriteError, match=r"batch 1 of query 'q1'.*new query_name"):
        iceberg("lake.orders", warehouse=str(tmp_path), query_name="q1")(first, 0)


def test_the_mark_outlives_snapshot_expiry(spark: Any, tmp_path: Path) -> None:
    """Expired history cannot hide a committed batch: the mark is a table property.

    Without the mark (removed by hand) and with the history expired, a batch past
    the first is refused, naming the property that records it.
    """
    write = iceberg("lake.t", warehouse=str(tmp_path), query_name="q")
    df = spark.createDataFrame([(1,)], "n long")
    for batch in range(3):
        write(df, batch)
    table = _table(write)
    current = table.metadata.current_snapshot_id
    old = [s.snapshot_id for s in table.metadata.snapshots if s.snapshot_id != current]
    table.maintenance.expire_snapshots().by_ids(old).commit()
    table = _table(write)
    assert len(table.metadata.snapshots) == 1
    write(df, 2)  # the replay of the last batch: still found
    assert write.skipped == [2] and len(_rows(write)) == 3
    with table.transaction() as tx:
        tx.remove_properties(MARK_PREFIX + "q")
    assert committed_batch(_table(write), "q") == 2  # the retained snapshot still says
    write(df, 3)
    with _table(write).transaction() as tx:  # the mark gone and only a foreign snapshot left
        tx.remove_properties(MARK_PREFIX + "q")
        tx.append(pa.table({"n": pa.array([9], pa.int64())}))
    table = _table(write)
    keep = table.metadata.current_snapshot_id
    table.maintenance.expire_snapshots().by_ids(
        [s.snapshot_id for s in table.metadata.snapshots if s.snapshot_id != keep]
    ).commit()
    with pytest.raises(IcebergWriteError, match=r"history was expired.*SET TBLPROPERTIES"):
        write(df, 4)
    assert len(_rows(write)) == 5
    with _table(write).transaction() as tx:  # what the message tells the user to do
        tx.set_properties({MARK_PREFIX + "q": "3"})
    write(df, 4)
    assert len(_rows(write)) == 6


def test_overwrite_and_upsert(spark: Any, tmp_path: Path) -> None:
    complete = iceberg("lake.totals", warehouse=str(tmp_path), query_name="c", mode="overwrite")
    complete(spark.createDataFrame([("eu", 1)], "region string, n long"), 0)
    complete(spark.createDataFrame([("eu", 2), ("us", 1)], "region string, n long"), 1)
    complete(spark.createDataFrame([("eu", 1)], "region string, n long"), 1)  # replay
    assert sorted((r["region"], r["n"]) for r in _rows(complete)) == [("eu", 2), ("us", 1)]
    keyed = iceberg(
        "lake.latest", warehouse=str(tmp_path), query_name="u", mode="upsert",
        key_columns=["id"],
    )  # fmt: skip
    keyed(spark.createDataFrame([(1, "a"), (2, "b")], "id long, v string"), 0)
    keyed(spark.createDataFrame([(2, "B"), (3, "c")], "id long, v string"), 1)
    keyed(spark.createDataFrame([(2, "x")], "id long, v string"), 1)  # replay: skipped
    assert sorted((r["id"], r["v"]) for r in _rows(keyed)) == [(1, "a"), (2, "B"), (3, "c")]
    assert keyed.skipped == [1]


def test_two_processes_write_one_table(tmp_path: Path) -> None:
    """Four processes commit into one table at once: two queries, each run by two processes.

    The two processes of one query race for each of its batches (a zombie driver
    and its successor); commits of the other query conflict with both and are
    retried onto its snapshots. Every batch is in the table once.
    """
    go = tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join((str(ROOT / "src"), str(ROOT))))
    batches, rows = 12, 50
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.spark._iceberg_writer_proc",
                str(tmp_path),
                query,
                str(first),
                str(batches),
                str(rows),
                str(go),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for query, first in (("qa", 0), ("qa", 0), ("qb", 10_000), ("qb", 10_000))
    ]
    go.touch()
    skipped = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
        skipped.append(out.split("SKIPPED", 1)[1].split())
    # Each batch of each query was committed by one of its two processes, skipped by the other.
    for pair in (skipped[:2], skipped[2:]):
        assert sorted(map(int, pair[0] + pair[1])) == list(range(batches)), skipped
    writer = iceberg("lake.orders", warehouse=str(tmp_path), query_name="qa")
    ids = [r["id"] for r in _rows(writer)]
    expected = [*range(batches * rows), *range(10_000, 10_000 + batches * rows)]
    assert (len(ids), sorted(ids)) == (len(expected), expected)
    table = _table(writer)
    assert (committed_batch(table, "qa"), committed_batch(table, "qb")) == (11, 11)


def test_bad_arguments(tmp_path: Path) -> None:
    lake = str(tmp_path)
    for table in ("orders", "", ".t", "db..t", " db.t", 7):
        with pytest.raises(ConfigError, match="table must"):
            iceberg(table, warehouse=lake)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs warehouse="):
        iceberg("db.t")
    with pytest.raises(ConfigError, match="mode must be"):
        iceberg("db.t", warehouse=lake, mode="merge")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs key_columns"):
        iceberg("db.t", warehouse=lake, mode="upsert")
    with pytest.raises(ConfigError, match="key_columns are the key of mode='upsert'"):
        iceberg("db.t", warehouse=lake, key_columns=["id"])
    with pytest.raises(ConfigError, match=r"catalog type must be 'sql'.*'rest'"):
        iceberg("db.t", catalog={"type": "rest", "uri": "http://127.0.0.1:1"}, warehouse=lake)
    with pytest.raises(ConfigError, match="catalog_name"):
        iceberg("db.t", warehouse=lake, catalog_name="a b")
    with pytest.raises(ConfigError, match="unsupported scheme 'mysql'"):
        iceberg("db.t", catalog="mysql://x/y", warehouse=lake)
    with pytest.raises(ConfigError, match="object-store warehouse"):
        iceberg("db.t", warehouse="s3://bucket/lake")
    with pytest.raises(ConfigError, match="query_name"):
        iceberg("db.t", warehouse=lake, query_name="")
    with pytest.raises(ConfigError, match="key_columns must be a list of column names"):
        iceberg("db.t", warehouse=lake, mode="upsert", key_columns=5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="key_columns must name each column once"):
        iceberg("db.t", warehouse=lake, mode="upsert", key_columns=["id", "id"])
    # A file: URI with a host is not a local folder (it landed under the working directory).
    with pytest.raises(ConfigError, match="names the host 'otherhost'"):
        iceberg("db.t", warehouse="file://otherhost/lake")
    with pytest.raises(ConfigError, match="has scheme 'https'; allowed"):
        iceberg("db.t", catalog=f"{tmp_path}/c.db", warehouse="https://example.com/lake")
    # file://localhost/p and file:/p are the local folder p, as a plain path is.
    local = [
        iceberg("db.t", warehouse=w)._table_key()  # type: ignore[attr-defined]
        for w in (lake, f"file://localhost{lake}", f"file:{lake}", f"file://{lake}")
    ]
    assert len(set(local)) == 1, local
    secret = iceberg(
        "db.t", catalog="postgresql://app:hunter2@127.0.0.1/cat", warehouse="s3://b/lake"
    )
    assert "hunter2" not in repr(secret)
    props = iceberg("db.t", catalog={"uri": "/x/c.db", "s3.secret-access-key": "k3y-s3cret"},
                    warehouse=lake)  # fmt: skip
    assert "k3y-s3cret" not in repr(props)
    # One database spelled two ways is one catalog.
    a = iceberg("db.t", catalog=f"sqlite:///{tmp_path}/c.db", warehouse=lake)
    b = iceberg("db.t", catalog=f"{tmp_path}/./c.db", warehouse=lake)
    assert a._table_key() == b._table_key()  # type: ignore[attr-defined]


def test_shared_catalog_on_postgres(spark: Any, postgres_url: str, tmp_path: Path) -> None:
    """The SQL catalog on PostgreSQL: the catalog a deployment shares; a replay skipped there."""
    write = iceberg("lake.orders", catalog=postgres_url, warehouse=str(tmp_path / "wh"),
                    query_name="q")  # fmt: skip
    df = spark.createDataFrame([("a", 1)], "k string, n long")
    write(df, 0)
    write(df, 0)
    again = iceberg("lake.orders", catalog=postgres_url.replace("postgresql://", "postgres://"),
                    warehouse=str(tmp_path / "wh"), query_name="q")  # fmt: skip
    again(df, 0)
    assert write.skipped == again.skipped == [0]
    assert [r["k"] for r in _rows(write)] == ["a"]
    assert "postgresql+psycopg://" in write.catalog.uri  # type: ignore[attr-defined]


def test_two_queries_write_one_table(spark: Any, tmp_path: Path) -> None:
    """Two streaming queries at once, each its own checkpoint, into one table: each row once."""
    import json

    queries = []
    for name in ("a", "b"):
        source = tmp_path / f"in-{name}"
        source.mkdir()
        for n in range(4):
            lines = [json.dumps({"order_id": f"{name}{n}-{i}", "amount": 1.0}) for i in range(25)]
            (source / f"part-{n}.json").write_text("\n".join(lines))
        df = (
            spark.readStream.schema("order_id string, amount double")
            .option("maxFilesPerTrigger", 1)
            .json(str(source))
        )
        queries.append(
            df.writeStream.foreachBatch(iceberg("lake.both", warehouse=str(tmp_path / "lake")))
            .option("checkpointLocation", str(tmp_path / f"chk-{name}"))
            .trigger(availableNow=True)
            .start()
        )
    for query in queries:
        query.awaitTermination(120)
        assert query.exception() is None, query.exception()
    writer = iceberg("lake.both", warehouse=str(tmp_path / "lake"), query_name="x")
    ids = [r["order_id"] for r in _rows(writer)]
    assert len(ids) == len(set(ids)) == 200
    table = _table(writer)
    assert sorted(committed_batch(table, str(q.id)) for q in queries) == [3, 3]
