"""Read a ledger without creating or changing anything (for ``oncestream status``)."""

from __future__ import annotations

import os
import sqlite3
from typing import Any
from urllib.parse import quote

from .._dsn import parse_dsn
from .._errors import ConfigError, LedgerError
from .._private import redact_url, scrub
from ._base import HORIZONS, Horizon
from ._sqlite import OLD_TABLE, RUNS, write_problem

__all__ = ["check_ledger_target", "read_applied_count", "read_horizons", "read_rows"]

#: The stream's own rows and its replayed dead letters' (their keys are
#: ``<stream>.replay.<consumer>...``: no stream's name has a dot, so no other stream's).
_OF_STREAM = "(stream = {p} OR substr(stream, 1, {p}) = {p})"
_COUNT = "SELECT count(*) FROM oncestream_applied WHERE " + _OF_STREAM.format(p="%s")
#: SQLite: the runs, plus the rows of a ledger no newer oncestream has opened yet.
_SQLITE_COUNT = (
    "SELECT (SELECT coalesce(sum(last_seq - first_seq + 1), 0) FROM "
    + RUNS
    + " WHERE "
    + _OF_STREAM.format(p="?")
    + f") + (SELECT count(*) FROM {OLD_TABLE} WHERE stream = ?)"
)


def _of_stream(stream: str) -> tuple[str, int, str]:
    """The parameters of :data:`_OF_STREAM` for ``stream``."""
    prefix = f"{stream}.replay."
    return stream, len(prefix), prefix


def read_applied_count(url: str, stream: str) -> int:
    """Messages the ledger at ``url`` records as settled from ``stream``: applied or
    dead-lettered, replayed dead letters' copies included; opened read-only.

    Raises:
        ConfigError: no ledger there (no such file, or no ledger table), or a bad URL.
        LedgerError: the database could not be reached or read.
    """
    dsn = parse_dsn(url, "--ledger")
    shown = redact_url(url.strip())
    if dsn.kind == "sqlite":
        assert dsn.path is not None
        if not os.path.isfile(dsn.path):
            what = "a directory" if os.path.isdir(dsn.path) else "no such file"
            raise ConfigError(
                f"no ledger at {dsn.path} (--ledger {shown}: {what}); give the URL "
                "`oncestream process --ledger` used, e.g. sqlite:///billing.db"
            )
        try:
            con = sqlite3.connect(f"file:{quote(os.path.abspath(dsn.path))}?mode=ro", uri=True)
            try:
                tables = {
                    name
                    for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")
                }
                if RUNS in tables:
                    row = con.execute(_SQLITE_COUNT, (*_of_stream(stream), stream)).fetchone()
                else:  # written by an oncestream before runs (or not a ledger: raises)
                    old = "SELECT count(*) FROM oncestream_applied WHERE stream = ?"
                    row = con.execute(old, (stream,)).fetchone()
            finally:
                con.close()
        except sqlite3.DatabaseError as exc:
            if "no such table" in str(exc) or "not a database" in str(exc):
                raise ConfigError(
                    f"{dsn.path} (--ledger {shown}) is not an oncestream ledger: {exc}"
                ) from None
            raise LedgerError(f"cannot read the ledger {dsn.path}: {exc}") from exc
        return int(row[0])
    try:
        import psycopg
    except ImportError:  # pragma: no cover - postgres extra not installed
        raise ConfigError(
            "--ledger postgresql:// needs `pip install oncestream[postgres]`"
        ) from None
    try:
        with psycopg.connect(dsn.url, autocommit=True, connect_timeout=5) as pg:
            pg.execute("SET default_transaction_read_only = on")
            row = pg.execute(_COUNT, _of_stream(stream)).fetchone()
    except psycopg.errors.UndefinedTable:
        raise ConfigError(f"no ledger in {shown} (no oncestream_applied table)") from None
    except psycopg.Error as exc:
        reason = scrub(" ".join(str(exc).split()), dsn.secrets())
        raise LedgerError(f"cannot read the ledger {shown}: {reason}") from None
    assert row is not None
    return int(row[0])


def read_horizons(url: str, stream: str, consumer: str) -> list[Horizon]:
    """The prune horizons the ledger at ``url`` records for ``consumer`` (read-only).

    A ledger written before horizons existed has none.

    Raises:
        ConfigError: no ledger there (no such file, or not a ledger), or a bad URL.
        LedgerError: the database could not be reached or read.
    """
    query = (
        f"SELECT first_seq, last_seq, filters FROM {HORIZONS}"
        " WHERE stream = {p} AND consumer = {p}"
    )
    rows = read_rows(url, stream, query, (stream, consumer))
    return [Horizon(int(first), int(last), tuple(filters.split())) for first, last, filters in rows]


def read_rows(
    url: str, stream: str, query: str, params: tuple[object, ...]
) -> list[tuple[Any, ...]]:
    """The rows of ``query`` (``{p}`` for each placeholder) on the ledger at ``url``,
    opened read-only once :func:`read_applied_count` found a ledger of ``stream`` there;
    none when the query's table does not exist (a ledger written before it).

    Raises:
        ConfigError: no ledger there (no such file, or not a ledger), or a bad URL.
        LedgerError: the database could not be reached or read.
    """
    read_applied_count(url, stream)  # the same checks: a ledger, readable, at that URL
    dsn = parse_dsn(url, "--ledger")
    if dsn.kind == "sqlite":
        assert dsn.path is not None
        try:
            con = sqlite3.connect(f"file:{quote(os.path.abspath(dsn.path))}?mode=ro", uri=True)
            try:
                return list(con.execute(query.format(p="?"), params).fetchall())
            finally:
                con.close()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise LedgerError(f"cannot read the ledger {dsn.path}: {exc}") from exc
    import psycopg

    try:
        with psycopg.connect(dsn.url, autocommit=True, connect_timeout=5) as pg:
            pg.execute("SET default_transaction_read_only = on")
            return list(pg.execute(query.format(p="%s"), params).fetchall())
    except psycopg.errors.UndefinedTable:
        return []
    except psycopg.Error as exc:
        reason = scrub(" ".join(str(exc).split()), dsn.secrets())
        raise LedgerError(f"cannot read the ledger {redact_url(url.strip())}: {reason}") from None


def check_ledger_target(url: str) -> None:
    """Before processing: an SQLite ledger path must be creatable, or an SQLite file.

    Raises:
        ConfigError: the directory is missing or not a directory, the path is a
            directory, an existing file is not an SQLite database, or the file or its
            directory cannot be written (a read-only file system, no write permission).
    """
    dsn = parse_dsn(url, "--ledger")
    if dsn.kind != "sqlite":
        return
    assert dsn.path is not None
    path = os.path.abspath(dsn.path)
    parent = os.path.dirname(path)
    shown = redact_url(url.strip())
    if not os.path.isdir(parent):
        raise ConfigError(f"--ledger {shown}: directory {parent} does not exist")
    if os.path.isdir(path):
        raise ConfigError(f"--ledger {shown}: {path} is a directory, not an SQLite file")
    if os.path.isfile(path) and os.path.getsize(path) > 0:
        with open(path, "rb") as handle:
            if handle.read(16) != b"SQLite format 3\x00":
                raise ConfigError(f"--ledger {shown}: {path} is not an SQLite database")
    problem = write_problem(path)
    if problem is not None:
        raise ConfigError(
            f"--ledger {shown}: the SQLite ledger {path} cannot be written: {problem}"
        )
