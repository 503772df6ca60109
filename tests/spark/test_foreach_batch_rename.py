"""A restart from the same checkpoint under another ``query_name`` is the same query.

The query dies after the database commit of batch 1, before Spark's; it is
restarted from the same checkpoint, its ``query_name`` changed (or first given).
Spark replays batch 1: the scope is the query id alone, so the replay is found
and skipped. (With the scope written ``name@<query id>``, found by a breaker,
the replayed rows were written a second time: 400 rows for 300 ids, exit 0.)
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.spark._jobs import CrashOnce, _json_files, _run


def _orders(folder: Path) -> str:
    folder.mkdir()
    for n in range(3):
        lines = [json.dumps({"order_id": f"o{n}-{i}", "amount": float(i)}) for i in range(100)]
        (folder / f"part-{n}.json").write_text("\n".join(lines))
    return str(folder)


@pytest.mark.parametrize(("before", "after"), [("orders", "orders_v2"), (None, "orders")])
def test_restart_under_another_query_name(  # type: ignore[no-untyped-def]
    spark, tmp_path: Path, before: str | None, after: str
) -> None:
    from oncestream.spark import transactional

    source, checkpoint, target = (
        _orders(tmp_path / "in"),
        str(tmp_path / "chk"),
        str(tmp_path / "o.db"),
    )
    first = CrashOnce(
        transactional(target, table="orders", query_name=before),
        1,
        str(tmp_path / "crashed"),
        str(tmp_path / "calls.jsonl"),
    )
    assert "planted crash" in (_run(_json_files(spark, source), first, checkpoint) or "")
    second = transactional(target, table="orders", query_name=after)
    error = _run(_json_files(spark, source), second, checkpoint)
    with sqlite3.connect(target) as db:
        count, distinct = db.execute(
            "SELECT count(*), count(DISTINCT order_id) FROM orders"
        ).fetchone()
    assert error is None
    assert (count, distinct) == (300, 300)


def test_one_writer_called_twice_for_one_batch_is_refused(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Two DataFrames into one table through one writer in one batch: a ConfigError.

    Spark calls the batch function once per batch in a run, so the second call is
    not a replay; on the code before, its rows were skipped as one (found by a
    review: 150 of 300 rows, the query ended without error).
    """
    from oncestream.spark import transactional

    source, target = _orders(tmp_path / "in"), str(tmp_path / "o.db")
    writer = transactional(target, table="orders")

    def twice(df, batch_id):  # type: ignore[no-untyped-def]
        writer(df.where("amount % 2 = 0"), batch_id)
        writer(df.where("amount % 2 = 1"), batch_id)

    error = _run(_json_files(spark, source), twice, str(tmp_path / "chk"))
    assert error is not None and "ConfigError" in error, error
    assert "or one writer twice" in error
