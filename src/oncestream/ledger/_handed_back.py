"""A Processor's record of the messages it handed back, read and edited from outside it
(``oncestream consumer reset --ledger``): only that table is touched, nothing created."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from urllib.parse import quote

from .._dsn import parse_dsn
from .._errors import LedgerError
from .._private import redact_url, scrub
from ._base import HANDED_BACK
from ._readonly import read_rows

__all__ = ["drop_handed_back", "read_handed_back"]


def read_handed_back(url: str, stream: str, consumer: str) -> list[int]:
    """The sequences the ledger at ``url`` records as handed back by ``consumer`` of
    ``stream``, of any of the consumer's lives (read-only; a ledger without the table
    has none).

    Raises:
        ConfigError: no ledger there (no such file, or not a ledger), or a bad URL.
        LedgerError: the database could not be reached or read.
    """
    query = f"SELECT seq FROM {HANDED_BACK} WHERE stream = {{p}} AND consumer = {{p}} ORDER BY seq"
    return [int(seq) for (seq,) in read_rows(url, stream, query, (stream, consumer))]


def drop_handed_back(url: str, stream: str, consumer: str, seqs: Sequence[int]) -> None:
    """Remove ``seqs`` from the record of what ``consumer`` of ``stream`` handed back, in
    the ledger at ``url`` (one DELETE; no table is created).

    Raises:
        LedgerError: the database could not be reached or refused the change (a role
            that may only read), naming the ledger without its secrets.
    """
    if not seqs:
        return
    dsn = parse_dsn(url, "--ledger")
    rows = [(stream, consumer, seq) for seq in seqs]
    delete = f"DELETE FROM {HANDED_BACK} WHERE stream = {{p}} AND consumer = {{p}} AND seq = {{p}}"
    if dsn.kind == "sqlite":
        assert dsn.path is not None
        try:
            con = sqlite3.connect(f"file:{quote(os.path.abspath(dsn.path))}?mode=rw", uri=True)
            try:
                with con:
                    con.executemany(delete.format(p="?"), rows)
            finally:
                con.close()
        except sqlite3.Error as exc:
            raise LedgerError(f"cannot change the ledger {dsn.path}: {exc}") from exc
        return
    import psycopg

    try:
        with psycopg.connect(dsn.url, connect_timeout=5) as pg, pg.cursor() as cursor:
            cursor.executemany(delete.format(p="%s"), rows)
    except psycopg.Error as exc:
        reason = scrub(" ".join(str(exc).split()), dsn.secrets())
        raise LedgerError(f"cannot change the ledger {redact_url(url.strip())}: {reason}") from None
