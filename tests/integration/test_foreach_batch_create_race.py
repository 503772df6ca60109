"""Two streaming queries starting at once into a new PostgreSQL table (breaker F3).

Each ``transactional`` writer creates the table and the batches table in its
first batch's transaction. PostgreSQL's ``CREATE TABLE IF NOT EXISTS`` run by two
transactions at once fails one with ``duplicate key value violates unique
constraint "pg_type_typname_nsp_index"``; the writers now serialise their DDL with
an advisory lock. The writers' transaction path is called directly, without Spark
(the race is in the SQL, not in Spark).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from oncestream.spark import transactional
from oncestream.spark._foreach_batch import _Claim

pytestmark = pytest.mark.postgres

_SCHEMA = StructType([StructField("id", LongType()), StructField("name", StringType())])
_ROUNDS = 8


def _write(writer: Any, i: int, start: threading.Barrier, errors: list[BaseException]) -> None:
    rows = [(i * 10 + k, f"n{k}") for k in range(3)]
    start.wait(10)
    try:
        claim = _Claim(query=f"q{i}", batch_id=0, token=f"w{i}", run=None, in_query=False)
        writer._write(_SCHEMA, ["id", "name"], rows, claim)
    except BaseException as exc:  # reported by the test, with the round
        errors.append(exc)


def test_two_writers_creating_one_new_table_at_once_both_commit(postgres_url: str) -> None:
    import psycopg

    for n in range(_ROUNDS):  # a fresh table and batches table each round: a new race
        table, batches = f"orders_{n}", f"batches_{n}"
        writers: list[Any] = [
            transactional(postgres_url, table=table, batches_table=batches, query_name=f"q{i}")
            for i in range(2)
        ]
        start = threading.Barrier(2)
        errors: list[BaseException] = []

        threads = [
            threading.Thread(target=_write, args=(writers[i], i, start, errors)) for i in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
        assert not errors, f"round {n}: {errors}"
        with psycopg.connect(postgres_url) as db:
            ids = sorted(r[0] for r in db.execute(f"SELECT id FROM {table}"))
            marks = db.execute(f"SELECT count(*) FROM {batches}").fetchone()
        assert ids == [0, 1, 2, 10, 11, 12]
        assert marks is not None and marks[0] == 2
