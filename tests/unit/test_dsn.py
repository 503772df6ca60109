"""One database-URL parser with SQLAlchemy's meaning for ledgers, audit and foreachBatch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oncestream import ConfigError, OutputSpec, PostgresLedger, SQLiteLedger, ledger_from_url
from oncestream._dsn import parse_dsn
from oncestream._private import redact_url
from oncestream.spark._foreach_batch import BatchWriter, transactional

SQLITE_FORMS = [
    # (url, the file it names; relative paths are relative to the working directory)
    ("sqlite:///rel.db", "rel.db"),
    ("sqlite:///var/x.db", "var/x.db"),  # three slashes: relative, as in SQLAlchemy
    ("sqlite:////var/x.db", "/var/x.db"),  # four slashes: absolute
    ("sqlite:////tmp/a b/x.db", "/tmp/a b/x.db"),
    ("sqlite:////tmp/a%20b/x.db", "/tmp/a b/x.db"),  # percent-escapes decoded
    ("sqlite+pysqlite:///rel.db", "rel.db"),
    ("SQLITE:///rel.db", "rel.db"),
    ("rel.db", "rel.db"),  # a plain path is an SQLite file
    ("data/rel.db", "data/rel.db"),
    ("/abs/x.db", "/abs/x.db"),
    ("  sqlite:///rel.db  ", "rel.db"),
]

POSTGRES_FORMS = [
    ("postgresql://app@db/shop", "postgresql://app@db/shop"),
    ("postgres://app@db:5433/shop", "postgresql://app@db:5433/shop"),
    ("postgresql+psycopg://app:pw@db/shop", "postgresql://app:pw@db/shop"),
    ("postgresql://app@db/shop?sslmode=require", "postgresql://app@db/shop?sslmode=require"),
]

BAD = [
    ("", "is empty"),
    ("sqlite://", "names no file"),
    ("sqlite:///", "names no file"),
    ("sqlite:///:memory:", "names no file"),
    ("sqlite://rel.db", "has a host part"),  # SQLAlchemy: a host, not a file
    ("sqlite://host/x.db", "use sqlite:///host/x.db"),
    ("sqlite:rel.db", "needs '//'"),
    ("sqlite:///x.db?mode=ro", "query parameters"),
    ("mysql://u:pw@h/db", "unsupported scheme 'mysql'"),
    ("kafka://broker:9092", "unsupported scheme"),
    ("postgresql:db", "not a PostgreSQL URL"),
]


@pytest.mark.parametrize(("url", "path"), SQLITE_FORMS)
def test_sqlite_forms(url: str, path: str) -> None:
    dsn = parse_dsn(url)
    assert (dsn.kind, dsn.path) == ("sqlite", path)


@pytest.mark.parametrize(("url", "libpq"), POSTGRES_FORMS)
def test_postgres_forms(url: str, libpq: str) -> None:
    dsn = parse_dsn(url)
    assert (dsn.kind, dsn.path, dsn.url) == ("postgresql", None, libpq)


@pytest.mark.parametrize(("url", "fragment"), BAD)
def test_bad_urls_name_the_value_and_the_allowed_forms(url: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match="--ledger") as info:
        parse_dsn(url, "--ledger")
    message = str(info.value)
    assert fragment in message
    assert "sqlite:///relative/path.db" in message or "sqlite:////abs" in message
    assert "pw" not in message.replace("path", "")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:s3cret@db/shop", "postgresql://app:***@db/shop"),
        ("postgresql://app@db/shop", "postgresql://app@db/shop"),
        ("postgresql://db/shop?user=a&password=s3cret", "postgresql://db/shop?user=a&password=***"),
        ("mysql://u:s3cret@h/db", "mysql://u:***@h/db"),
        ("postgresql://:s3cret@db/x", "postgresql://:***@db/x"),
    ],
)
def test_passwords_never_shown(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    try:
        dsn = parse_dsn(url)
    except ConfigError as exc:  # mysql: refused, and the message is redacted too
        assert "s3cret" not in str(exc) and shown in str(exc)
    else:
        assert "s3cret" not in repr(dsn) and "s3cret" not in str(dsn)


def _resolved(url: str) -> dict[str, str]:
    """The file (or server) each of the three entry points would open for ``url``."""
    ledger = ledger_from_url(url)
    spec = OutputSpec.parse(f"sql:{url}#orders")
    writer = transactional(url, table="orders")
    assert isinstance(writer, BatchWriter)
    if isinstance(ledger, PostgresLedger):
        return {"ledger": ledger.url, "audit": spec.database.url, "foreach": writer.dsn.url}
    assert isinstance(ledger, SQLiteLedger)
    return {
        "ledger": os.path.abspath(ledger.path),
        "audit": os.path.abspath(spec.database.path or ""),
        "foreach": os.path.abspath(writer.dsn.path or ""),
    }


@pytest.mark.parametrize("url", [u for u, _ in SQLITE_FORMS + POSTGRES_FORMS])
def test_ledger_audit_and_foreach_batch_resolve_every_form_identically(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    resolved = _resolved(url)
    assert len(set(resolved.values())) == 1, resolved


@pytest.mark.parametrize(("url", "_fragment"), BAD[1:])
def test_ledger_audit_and_foreach_batch_refuse_the_same_forms(url: str, _fragment: str) -> None:
    for entry in (
        lambda: ledger_from_url(url),
        lambda: OutputSpec.parse(f"sql:{url}#orders"),
        lambda: transactional(url, table="orders"),
    ):
        with pytest.raises(ConfigError):
            entry()


def test_the_audited_file_is_the_ledger_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sqlite:///var/x.db`` is ``./var/x.db`` for both; ``sqlite:////...`` is absolute."""
    from oncestream.audit import KeySpec
    from oncestream.audit._outputs import sql_keys
    from oncestream.ledger import LedgerEntry

    monkeypatch.chdir(tmp_path)
    (tmp_path / "var").mkdir()
    for url in ("sqlite:///var/x.db", f"sqlite:///{tmp_path}/abs.db"):
        with ledger_from_url(url) as ledger:
            tx = ledger.begin()
            tx.claim([LedgerEntry("S", 1), LedgerEntry("S", 2)])
            tx.execute("CREATE TABLE out (stream TEXT)")
            tx.execute("INSERT INTO out VALUES ('S'), ('S')")
            tx.commit()
        spec = OutputSpec.parse(f"sql:{url}#out")
        keys = sql_keys(spec.database, "out", KeySpec.parse("field:stream"))
        assert keys == ["S", "S"]
    assert (tmp_path / "var" / "x.db").exists() and (tmp_path / "abs.db").exists()


def test_output_spec_repr_hides_the_password() -> None:
    spec = OutputSpec.parse("sql:postgresql://u:s3cret@h/db#orders")
    assert spec.target == "postgresql://u:s3cret@h/db"
    assert "s3cret" not in repr(spec) and "s3cret" not in str(spec)
    assert "s3cret" not in repr(transactional("postgresql://u:s3cret@h/db", table="t"))
