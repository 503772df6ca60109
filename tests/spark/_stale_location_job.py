"""A writer given a stale ``checkpoint_location`` under Spark Connect, in a subprocess:

    python -m tests.spark._stale_location_job REMOTE WORK

For each of ``transactional``, ``delta`` and ``by_reference`` (a ``transactional``
built when the worker imports tests/spark/_by_reference_writer.py, the function
pickled by name): run 1 (checkpoint chk1) dies after the
target's commit of batch 0, before Spark's. Run 2 starts over on a new checkpoint
chk2 with new input, its writer still given ``checkpoint_location=chk1`` (the old
one). Prints ``RESULT {"<writer>": {"first", "error", "b_rows"}}``: run 1's and
run 2's errors and how many of run 2's 100 rows reached the target.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

from tests.spark._jobs import CrashOnce, _json_files, _run


def _orders(folder: Path, prefix: str) -> str:
    folder.mkdir(parents=True)
    lines = [json.dumps({"order_id": f"{prefix}{i}", "amount": float(i)}) for i in range(100)]
    (folder / "part-0.json").write_text("\n".join(lines))
    return str(folder)


def _scenario(spark: Any, root: Path, writer: Any, count_b: Any) -> dict[str, Any]:
    chk1, chk2, log = str(root / "chk1"), str(root / "chk2"), str(root / "calls.jsonl")
    first = CrashOnce(writer(chk1), 0, str(root / "crashed"), log)
    first_error = _run(_json_files(spark, _orders(root / "in1", "a")), first, chk1)
    second = CrashOnce(writer(chk1), 99, str(root / "crashed2"), log)
    error = _run(_json_files(spark, _orders(root / "in2", "b")), second, chk2)
    return {"first": first_error, "error": error, "b_rows": count_b()}


def main(remote: str, work: str) -> None:
    from deltalake import DeltaTable
    from pyspark.sql import SparkSession

    from oncestream.spark import delta, transactional

    spark = SparkSession.builder.remote(remote).getOrCreate()
    root = Path(work)
    db, table = str(root / "out.db"), str(root / "orders")

    def db_rows() -> int:
        with sqlite3.connect(db) as conn:
            return int(
                conn.execute("SELECT count(*) FROM orders WHERE order_id LIKE 'b%'").fetchone()[0]
            )

    def delta_rows() -> int:
        rows = DeltaTable(table).to_pyarrow_table().column("order_id").to_pylist()
        return sum(1 for order_id in rows if order_id.startswith("b"))

    try:
        by_reference = root / "by_reference"
        spark.conf.set(
            "oncestream.test.byReference",
            json.dumps(
                {
                    "target": str(by_reference / "out.db"),
                    "checkpoint_location": str(by_reference / "chk1"),
                }
            ),
        )
        from tests.spark import _by_reference_writer

        def by_reference_rows() -> int:
            with sqlite3.connect(by_reference / "out.db") as conn:
                query = "SELECT count(*) FROM orders WHERE order_id LIKE 'b%'"
                return int(conn.execute(query).fetchone()[0])

        result = {
            # Pickled by name: the worker builds the writer by importing the module.
            "by_reference": _scenario(
                spark, by_reference, lambda chk: _by_reference_writer.write, by_reference_rows
            ),
            "transactional": _scenario(
                spark,
                root / "transactional",
                lambda chk: transactional(db, table="orders", checkpoint_location=chk),
                db_rows,
            ),
            "delta": _scenario(
                spark, root / "delta", lambda chk: delta(table, checkpoint_location=chk), delta_rows
            ),
        }
        print("RESULT " + json.dumps(result), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
