"""Two writers into one table spelled two ways: a ConfigError, never rows skipped as a replay.

Both writers of one query (or of one ``query_name``) record the same
``(query, batch_id)``; the claim that refuses a second writer keyed the table
by its name as written, so before spark/_table_identity.py ``delta(p)`` with
``delta("file://" + p)`` (or ``p`` holding ``//`` or ``/./``),
``transactional("t1.db")`` with ``transactional("./t1.db")``, and PostgreSQL at
``127.0.0.1`` and at ``localhost`` were taken for two tables: the second writer
found the batch recorded and skipped its rows, no error (half the rows lost).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from oncestream import ConfigError
from oncestream.spark import delta, transactional
from tests.spark._jobs import _json_files, _run

pytestmark = pytest.mark.timeout(300)

#: Ways to write the table ``<tmp>/lake/orders`` a second time (``<tmp>/link`` -> lake).
DELTA_SPELLINGS: dict[str, Callable[[Path], str]] = {
    "file-uri": lambda t: "file://" + str(t / "lake" / "orders"),
    "double-slash": lambda t: str(t) + "//lake//orders",
    "dot-segment": lambda t: str(t) + "/./lake/./orders",
    "dot-dot": lambda t: str(t) + "/lake/../lake/orders",
    "trailing-slash": lambda t: str(t / "lake" / "orders") + "//",
    "symlink": lambda t: str(t / "link" / "orders"),
    "symlink-file-uri": lambda t: "file://" + str(t / "link" / "orders") + "/",
    "percent-encoded": lambda t: "file://" + str(t / "lake" / "%6Frders"),
}


def _lake(tmp_path: Path) -> str:
    (tmp_path / "lake").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "lake")
    return str(tmp_path / "lake" / "orders")


def _frames(spark: Any) -> tuple[Any, Any]:
    def orders(first: int) -> Any:
        rows = [(f"o{i}", float(i)) for i in range(first, 20, 2)]
        return spark.createDataFrame(rows, "order_id string, amount double")

    return orders(0), orders(1)


def _two_writers_fail_or_write_all(
    first: Callable[[Any, int], None], second: Callable[[Any, int], None], spark: Any,
    count: Callable[[], int],
) -> str:  # fmt: skip
    """Batch 0 through ``first`` (even orders) then ``second`` (odd): the error, or ''."""
    even, odd = _frames(spark)
    first(even, 0)
    try:
        second(odd, 0)
    except ConfigError as exc:
        assert count() == 10  # refused before writing anything
        return str(exc)
    assert count() == 20, f"{count()} of 20 rows written, no error: the second writer skipped"
    return ""


@pytest.mark.parametrize("spelling", sorted(DELTA_SPELLINGS))
def test_delta_one_table_two_spellings(spark: Any, tmp_path: Path, spelling: str) -> None:
    path = _lake(tmp_path)
    other = DELTA_SPELLINGS[spelling](tmp_path)
    error = _two_writers_fail_or_write_all(
        delta(path, query_name="q"), delta(other, query_name="q"), spark,
        lambda: DeltaTable(path).to_pyarrow_table().num_rows,
    )  # fmt: skip
    assert f"two writers write Delta table {other} in one query (batch 0)" in error


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("t1.db", "./t1.db"),
        ("t1.db", "sqlite:///t1.db"),
        ("sqlite:///./t1.db", "{tmp}/t1.db"),
        ("sqlite:////{tmp}/t1.db", "{tmp}//sub/../t1.db"),
        ("{tmp}/link/t1.db", "t1.db"),  # link -> tmp
    ],
)
def test_sqlite_one_database_two_spellings(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: str, second: str
) -> None:
    monkeypatch.chdir(tmp_path)  # the writers run in this (the driver's) process
    (tmp_path / "sub").mkdir()
    (tmp_path / "link").symlink_to(tmp_path)
    first, second = (_tmp(s, tmp_path) for s in (first, second))

    def count() -> int:
        with sqlite3.connect(tmp_path / "t1.db") as db:
            return int(db.execute("SELECT count(*) FROM orders").fetchone()[0])

    error = _two_writers_fail_or_write_all(
        transactional(first, table="orders", query_name="q"),
        transactional(second, table="Orders", query_name="q"),
        spark, count,
    )  # fmt: skip
    assert "two writers write table Orders in one query (batch 0)" in error


def _tmp(spelling: str, tmp_path: Path) -> str:
    """``spelling`` with ``{tmp}`` replaced (without its leading ``/`` after ``sqlite:``)."""
    tmp = str(tmp_path)
    return spelling.replace("{tmp}", tmp.lstrip("/") if spelling.startswith("sqlite:") else tmp)


def test_postgres_one_database_reached_two_ways(
    spark: Any, postgres_server: Any, postgres_url: str
) -> None:
    import psycopg

    database, port = postgres_url.rsplit("/", 1)[1], postgres_server.port
    others = [
        f"postgresql://postgres@localhost:{port}/{database}",
        f"postgresql://postgres@/{database}?host={postgres_server.dir}&port={port}",  # socket
        f"postgres://postgres@127.0.0.1:{port}/{database}?sslmode=disable&connect_timeout=9",
    ]

    def count() -> int:
        with psycopg.connect(postgres_url) as pg:
            return int(pg.execute("SELECT count(*) FROM orders").fetchone()[0])

    for n, other in enumerate(others):
        name = f"q{n}"
        with psycopg.connect(postgres_url, autocommit=True) as pg:
            pg.execute("DROP TABLE IF EXISTS orders")
        error = _two_writers_fail_or_write_all(
            transactional(postgres_url, table="orders", query_name=name),
            transactional(other, table="orders", query_name=name),
            spark, count,
        )  # fmt: skip
        assert "two writers write table orders in one query (batch 0)" in error, other


def test_two_spellings_in_one_streaming_query(spark: Any, tmp_path: Path) -> None:
    """The measured case: one query, one table, two spellings, through Spark's foreachBatch."""
    source = tmp_path / "in"
    source.mkdir()
    for n in range(3):
        lines = [json.dumps({"order_id": f"o{n}-{i}", "amount": float(i)}) for i in range(10)]
        (source / f"part-{n}.json").write_text("\n".join(lines))
    path = _lake(tmp_path)
    db = str(tmp_path / "t1.db")
    relative_db = "./" + os.path.relpath(db)

    def two_deltas(df: Any, batch_id: int) -> None:
        delta(path)(df.where("amount % 2 = 0"), batch_id)
        delta("file://" + path)(df.where("amount % 2 = 1"), batch_id)

    def two_sqlites(df: Any, batch_id: int) -> None:
        transactional(db, table="orders")(df.where("amount % 2 = 0"), batch_id)
        transactional(relative_db, table="orders")(df.where("amount % 2 = 1"), batch_id)

    error = _run(_json_files(spark, str(source)), two_deltas, str(tmp_path / "chk-delta"))
    assert error is not None and "ConfigError" in error, error
    assert f"two writers write Delta table file://{path} in one query (batch 0)" in error
    assert DeltaTable(path).to_pyarrow_table().num_rows == 5  # the first writer's batch 0
    error = _run(_json_files(spark, str(source)), two_sqlites, str(tmp_path / "chk-sqlite"))
    assert error is not None and "ConfigError" in error, error
    assert "two writers write table orders in one query (batch 0)" in error
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT count(*) FROM orders").fetchone()[0] == 5


@pytest.mark.parametrize("kind", ["delta", "iceberg"])
def test_two_writers_at_once_in_one_streaming_query(spark: Any, tmp_path: Path, kind: str) -> None:
    """Two writers of one table (two spellings) running at the same time, each in a thread
    of the batch function: one is refused, never both let through. Before, each passed
    the two-writers check before either had claimed the batch (the claim came after the
    write), and the second's commit found the batch recorded and skipped its rows: the
    query ended without error with every odd order missing."""
    import threading

    from oncestream.spark import iceberg

    source = tmp_path / "in"
    source.mkdir()
    for n in range(3):
        lines = [json.dumps({"order_id": f"o{n}-{i}", "amount": float(i)}) for i in range(10)]
        (source / f"part-{n}.json").write_text("\n".join(lines))
    lake, chk = _lake(tmp_path), str(tmp_path / "chk")
    # In a thread of the batch function the query is known by its checkpoint only.
    if kind == "delta":
        writers = [
            delta(lake, checkpoint_location=chk),
            delta("file://" + lake + "/", checkpoint_location=chk),
        ]
    else:
        writers = [
            iceberg("lake.t", warehouse=lake, checkpoint_location=chk),
            iceberg("lake.t", warehouse="file://" + lake, checkpoint_location=chk),
        ]
    start = threading.Barrier(2, timeout=60)

    def at_once(df: Any, batch_id: int) -> None:
        errors: list[BaseException] = []

        def write(writer: Any, part: Any) -> None:
            start.wait()
            try:
                writer(part, batch_id)
            except BaseException as exc:
                errors.append(exc)

        parts = [df.where("amount % 2 = 0"), df.where("amount % 2 = 1")]
        threads = [
            threading.Thread(target=write, args=pair) for pair in zip(writers, parts, strict=True)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        if errors:
            raise errors[0]

    error = _run(_json_files(spark, str(source)), at_once, chk)
    assert error is not None and "ConfigError" in error, error
    assert "two writers write" in error and "in one query (batch 0)" in error, error
