"""Which statements the PostgreSQL ledger's pipelined writes take, and how they are rewritten."""

from __future__ import annotations

import pytest

from oncestream.ledger._pg_pipeline import _merge_head, _merge_table, _merged_sql, _plan


@pytest.mark.parametrize(
    ("sql", "plan"),
    [
        ("INSERT INTO t (a, b) VALUES (%s, %s)", (b"INSERT INTO t (a, b) VALUES ($1, $2)", 2)),
        ("  update t set a = %s where b = %s", (b"  update t set a = $1 where b = $2", 2)),
        ("DELETE FROM t", (b"DELETE FROM t", 0)),
        ("MERGE INTO t USING s ON t.a = s.a WHEN MATCHED THEN DELETE", None),  # no params: ok
        ("UPDATE t SET p = 'a%%b' WHERE x = %s", (b"UPDATE t SET p = 'a%b' WHERE x = $1", 1)),
        ("UPDATE t SET p = 'a%%s' WHERE x = %s", (b"UPDATE t SET p = 'a%s' WHERE x = $1", 1)),
    ],
)
def test_writes_without_rows_are_taken_with_numbered_placeholders(
    sql: str, plan: tuple[bytes, int] | None
) -> None:
    if plan is None:
        plan = (sql.encode(), 0)
    assert _plan(sql) == plan


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM t WHERE a = %s",  # a read: its rows go through a psycopg cursor
        "INSERT INTO t (a) VALUES (%s) RETURNING id",
        "insert into t (a) values (%s) returning *",
        "INSERT INTO t (a) VALUES (%(a)s)",  # named placeholders: psycopg's job
        "INSERT INTO t (a) VALUES (%b)",  # binary placeholder
        "WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x",
        "-- a comment first\nINSERT INTO t (a) VALUES (%s)",
        "UPDATE t SET a = 1 WHERE b LIKE 'x%'",  # a lone percent sign: psycopg says what it is
        "COPY t FROM STDIN",
        "INSERTINTO t VALUES (1)",
    ],
)
def test_everything_else_goes_through_psycopg(sql: str) -> None:
    assert _plan(sql) is None


@pytest.mark.parametrize(
    ("sql", "head"),
    [
        ("INSERT INTO t (a, b) VALUES (%s, %s)", "INSERT INTO t (a, b) VALUES "),
        ("insert into s.t(a) values(%s);", "insert into s.t(a) values"),
        ('INSERT INTO "T" ("a") VALUES ( %s )', 'INSERT INTO "T" ("a") VALUES '),
    ],
)
def test_one_row_inserts_of_placeholders_can_be_merged(sql: str, head: str) -> None:
    assert _merge_head(sql) == head


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO t (a) VALUES (%s) ON CONFLICT DO NOTHING",  # rows could meet each other
        "INSERT INTO t (a) VALUES (%s), (%s)",
        "INSERT INTO t (a, b) VALUES (%s, now())",
        "INSERT INTO t VALUES (%s)",  # no column list
        "INSERT INTO t (a) SELECT %s",
        "UPDATE t SET a = %s",
    ],
)
def test_other_statements_are_never_merged(sql: str) -> None:
    assert _merge_head(sql) is None


def test_a_merged_insert_numbers_its_rows_placeholders_in_order() -> None:
    assert _merged_sql("INSERT INTO t (a, b) VALUES ", 2, 3) == (
        b"INSERT INTO t (a, b) VALUES ($1, $2), ($3, $4), ($5, $6)"
    )


@pytest.mark.parametrize(
    ("sql", "table"),
    [
        ("INSERT INTO effects (a) VALUES (%s)", "effects"),
        ("  insert into app.effects(a) values (%s)", "app.effects"),
        ('INSERT INTO "App" . "My Effects" ("a") VALUES (%s)', '"App" . "My Effects"'),
        ("INSERT INTO t$1 (a) VALUES (%s)", "t$1"),
        # Spellings that to_regclass may refuse (it would fail the batch): never merged.
        ("INSERT INTO t AS x (a) VALUES (%s)", None),
        ("INSERT INTO db.s.t (a) VALUES (%s)", None),
        ('INSERT INTO "a""b" (a) VALUES (%s)', None),
        ("INSERT INTO tâble (a) VALUES (%s)", None),
    ],
)
def test_auto_asks_about_the_table_as_written_when_it_is_a_plain_name(
    sql: str, table: str | None
) -> None:
    assert _merge_table(sql) == table


@pytest.mark.parametrize("bad", ["yes", "AUTO", 1, None])
def test_merge_inserts_takes_true_false_or_auto(bad: object) -> None:
    from oncestream import ConfigError, PostgresLedger

    assert PostgresLedger("postgresql://app@db/x").merge_inserts == "auto"
    with pytest.raises(ConfigError, match=r"merge_inserts must be True, False or 'auto', got "):
        PostgresLedger("postgresql://app@db/x", merge_inserts=bad)  # type: ignore[arg-type]
