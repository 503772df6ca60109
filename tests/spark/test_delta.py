"""oncestream.spark.delta: micro-batches into a Delta table with delta-rs, exactly once.

The batch id travels as a Delta application transaction in the same commit as
the rows; the tests read the table back with deltalake, as any reader would.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from harness import free_port, make_streams, publish_orders
from oncestream import ConfigError
from oncestream.server import NatsServer
from oncestream.spark import delta
from oncestream.spark._delta import DeltaWriteError
from oncestream.spark._query_scope import QueryScope
from oncestream.streams import StreamSpec

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]


def _rows(table: Path) -> list[dict[str, Any]]:
    return DeltaTable(str(table)).to_pyarrow_table().to_pylist()


def test_replayed_batch_writes_nothing(spark: Any, tmp_path: Path) -> None:
    table = tmp_path / "orders"
    write = delta(str(table), query_name="q1")
    first = spark.createDataFrame([("a", 1.5), ("b", 2.0)], "order_id string, amount double")
    second = spark.createDataFrame([("c", 3.0)], "order_id string, amount double")
    write(first, 0)
    write(first, 0)  # Spark's replay of batch 0 after a crash between the two commits
    write(second, 1)
    assert write.skipped == [0]
    rows = sorted((r["order_id"], r["amount"]) for r in _rows(table))
    assert rows == [("a", 1.5), ("b", 2.0), ("c", 3.0)]
    dt = DeltaTable(str(table))
    assert dt.transaction_version("q1") == 1
    assert dt.version() == 1  # two commits: the replay committed nothing
    # Another query writing the same table has batch ids of its own.
    other = delta(str(table), query_name="q2")
    other(second, 0)
    assert other.skipped is None and len(_rows(table)) == 4


def test_an_older_batch_of_the_query_is_refused(spark: Any, tmp_path: Path) -> None:
    """A new checkpoint reusing a query name restarts at batch 0: refused, not skipped."""
    table = tmp_path / "t"
    df = spark.createDataFrame([(1,)], "n long")
    delta(str(table), query_name="orders")(df, 4)
    with pytest.raises(DeltaWriteError, match=r"batch 4 of query 'orders'.*new query_name"):
        delta(str(table), query_name="orders")(df, 0)
    assert len(_rows(table)) == 1


def test_partitioned_overwrite_and_schema_merge(spark: Any, tmp_path: Path) -> None:
    table = tmp_path / "p"
    write = delta(str(table), query_name="q", partition_by=["day"])
    write(spark.createDataFrame([("d1", 1), ("d2", 2)], "day string, n long"), 0)
    assert DeltaTable(str(table)).metadata().partition_columns == ["day"]
    merge = delta(str(table), query_name="q", schema_mode="merge")
    merge(spark.createDataFrame([("d1", 3, "x")], "day string, n long, extra string"), 1)
    assert sorted(r["n"] for r in _rows(table)) == [1, 2, 3]
    complete = delta(str(table), query_name="q", mode="overwrite", schema_mode="merge")
    complete(spark.createDataFrame([("d3", 9, "y")], "day string, n long, extra string"), 2)
    assert [(r["day"], r["n"]) for r in _rows(table)] == [("d3", 9)]


class _ConnectLikeFrame:
    """A DataFrame whose session has no SparkContext, as in a Connect foreachBatch worker."""

    __module__ = "pyspark.sql.connect.dataframe"  # what tells a Connect DataFrame apart

    class sparkSession:
        @property
        def sparkContext(self) -> Any:
            raise RuntimeError("[JVM_ATTRIBUTE_NOT_SUPPORTED] sparkContext under Spark Connect")

    sparkSession = sparkSession()  # type: ignore[assignment]


def test_query_scope(spark: Any) -> None:
    # Under Connect a name alone cannot tell a restart from a new checkpoint: refused.
    for scope in (QueryScope(owner="w", query_name="mine"), QueryScope(owner="w")):
        with pytest.raises(ConfigError, match="needs checkpoint_location"):
            scope.resolve(_ConnectLikeFrame())  # type: ignore[arg-type]
    # Outside a streaming query a name is the caller's own scope.
    assert QueryScope(owner="w", query_name="mine").resolve(spark.range(1)) == "mine"
    # Outside a streaming query classic Spark has no query id either.
    with pytest.raises(ConfigError, match=r"checkpoint_location=.*query_name"):
        QueryScope(owner="w").resolve(spark.range(1))


def test_two_writers_of_one_query_into_one_table_fail(spark: Any, tmp_path: Path) -> None:
    """Two ``delta()`` writers into one table in one query: a ConfigError, not lost rows.

    Both record the query id as their app id, so the second found each batch
    recorded by the first and skipped its rows: before the claim check the query
    ended without error and the odd orders were missing. An identical writer
    re-created every batch is one writer.
    """
    import json

    from tests.spark._jobs import _json_files, _run

    source = tmp_path / "in"
    source.mkdir()
    for n in range(3):
        lines = [json.dumps({"order_id": f"o{n}-{i}", "amount": float(i)}) for i in range(10)]
        (source / f"part-{n}.json").write_text("\n".join(lines))
    table = str(tmp_path / "orders")

    def two_writers(df: Any, batch_id: int) -> None:
        delta(table, query_name="even")(df.where("amount % 2 = 0"), batch_id)
        delta(table, query_name="odd")(df.where("amount % 2 = 1"), batch_id)

    error = _run(_json_files(spark, str(source)), two_writers, str(tmp_path / "chk-two"))
    assert error is not None and "ConfigError" in error, error
    assert f"two writers write Delta table {table} in one query (batch 0)" in error
    assert "union them into one delta() writer" in error

    other = str(tmp_path / "other")

    def recreated(df: Any, batch_id: int) -> None:
        delta(other)(df, batch_id)

    assert _run(_json_files(spark, str(source)), recreated, str(tmp_path / "chk-one")) is None
    assert len({r["order_id"] for r in _rows(Path(other))}) == len(_rows(Path(other))) == 30

    # One writer called twice for one batch: its second DataFrame is not a replay.
    twice_table = str(tmp_path / "twice")
    writer = delta(twice_table)

    def twice(df: Any, batch_id: int) -> None:
        writer(df.where("amount % 2 = 0"), batch_id)
        writer(df.where("amount % 2 = 1"), batch_id)

    error = _run(_json_files(spark, str(source)), twice, str(tmp_path / "chk-twice"))
    assert error is not None and "or one writer twice" in error, error


def test_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="mode must be"):
        delta("/t", mode="upsert")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="schema_mode"):
        delta("/t", schema_mode="overwrite")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="uri"):
        delta(" ")
    with pytest.raises(ConfigError, match="partition_by"):
        delta("/t", partition_by=[""])
    with pytest.raises(ConfigError, match="query_name"):
        delta("/t", query_name="")
    secret = delta("s3://b/t", storage_options={"AWS_SECRET_ACCESS_KEY": "hunter2"})
    assert "hunter2" not in repr(secret)
    # A URI delta-rs cannot read a table from: refused when built, not at the first batch.
    for uri, fragment in (
        ("foo://bucket/t", "has scheme 'foo', which delta-rs does not read tables from"),
        ("https://acct.blob.core.windows.net/c/t", "has scheme 'https'"),
        ("file://otherhost/lake/t", "names host 'otherhost'"),
        ("file:lake/t", "not a file: URI of an absolute path"),
    ):
        with pytest.raises(ConfigError, match=re.escape(fragment)):
            delta(uri)
    for uri in ("S3A://Bucket/t", "opendal+s3://b/t", "abfss://c@a.dfs.core.windows.net/t",
                "memory:///t", "file:///lake/t", "C:/lake/t", "relative/t"):  # fmt: skip
        delta(uri)  # accepted


def test_delta_rs_errors_are_delta_write_errors(spark: Any, tmp_path: Path) -> None:
    """What delta-rs raises reading or writing the table fails the batch as DeltaWriteError.

    Before, a regular file at the table's path raised delta-rs's own ``DeltaError``
    ("Path does not exist") and an unreachable object store a bare ``OSError``.
    """
    df = spark.createDataFrame([(1,)], "n long")
    regular = tmp_path / "a-file"
    regular.write_text("not a table")
    with pytest.raises(DeltaWriteError, match=rf"Delta table {re.escape(str(regular))}") as got:
        delta(str(regular), query_name="q")(df, 0)
    assert type(got.value.__cause__).__module__.split(".")[0] in ("deltalake", "_internal")
    assert regular.read_text() == "not a table"
    closed = free_port()  # nothing listens there
    options = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{closed}",
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "oncestream-test",
        "AWS_SECRET_ACCESS_KEY": "never-shown-secret",
    }
    with pytest.raises(DeltaWriteError, match="Delta table s3://bucket/t") as got:
        delta("s3://bucket/t", query_name="q", storage_options=options)(df, 0)
    assert isinstance(got.value.__cause__, OSError)
    assert "never-shown-secret" not in str(got.value) and "\x1b[" not in str(got.value)


def run_job(
    url: str,
    table: Path,
    checkpoint: Path,
    sink: str,
    kill: str,
    out: list[str] | None = None,
    read_after: Path | None = None,
) -> int:
    """Run tests/spark/_delta_driver_job.py; its exit code (-9: killed at the planted point).

    ``out``: filled with the lines the job printed. ``read_after``: a run that ends
    prints the rows of TABLE and of this second table, read by its Spark session.
    """
    path = os.pathsep.join((str(ROOT / "src"), str(ROOT)))
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=path)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    args = (url, str(table), str(checkpoint), sink, kill)
    if read_after is not None:
        args = (*args, str(read_after))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.spark._delta_driver_job", *args],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        printed, err = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(err.decode(errors="replace")[-3000:])
    if out is not None:
        out.extend(printed.decode(errors="replace").splitlines())
    return proc.returncode


def batch_files(checkpoint: Path, log: str) -> list[int]:
    """Batch ids in the checkpoint's ``offsets`` or ``commits`` log."""
    return sorted(int(p.name) for p in (checkpoint / log).iterdir() if p.name.isdigit())


def assert_each_row_once(table: Path, total: int) -> None:
    sequences = [r["sequence"] for r in _rows(table)]
    duplicated = sorted({s for s in sequences if sequences.count(s) > 1})
    missing = sorted(set(range(1, total + 1)) - set(sequences))
    assert (len(sequences), duplicated[:5], missing[:5]) == (total, [], [])


def test_driver_killed_between_the_delta_commit_and_sparks(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    url = nats_server.url
    table, checkpoint = tmp_path / "table", tmp_path / "chk"
    make_streams(url, StreamSpec(name="IN", subjects=("in.>",)))
    publish_orders(url, "IN", "in.orders", 1000)
    assert run_job(url, table, checkpoint, "rs", "none") == 0
    publish_orders(url, "IN", "in.orders", 1000, start=1000)
    assert run_job(url, table, checkpoint, "rs", "first") == -signal.SIGKILL
    # The killed batch is in the table (its app transaction too), not in Spark's commit log.
    killed = batch_files(checkpoint, "offsets")[-1]
    assert killed not in batch_files(checkpoint, "commits")
    in_table = len(_rows(table))
    versions = _app_versions(table)
    assert run_job(url, table, checkpoint, "rs", "none") == 0
    assert_each_row_once(table, 2000)
    assert in_table == (2000 if killed == 1 else 1500)  # one batch, or 500 of 1000
    assert list(versions.values()) == [killed], versions


def _app_versions(table: Path) -> dict[str, int]:
    """Each application transaction's version in the table, from its log."""
    import json

    versions: dict[str, int] = {}
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            txn = json.loads(line).get("txn")
            if txn:
                versions[txn["appId"]] = int(txn["version"])
    return versions
