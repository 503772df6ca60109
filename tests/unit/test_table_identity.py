"""One identity per table whatever its spelling (spark/_table_identity.py), local and object store.

The PostgreSQL identity asks a server: tests/integration/test_table_identity_postgres.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oncestream import ConfigError
from oncestream._dsn import parse_dsn
from oncestream.spark._table_identity import (
    canonical_uri,
    location_identity,
    table_identity,
)


def _spellings(base: Path) -> list[str]:
    """Ways to write ``base / "lake" / "orders"`` (``base`` holds a ``link`` to ``lake``)."""
    p = str(base / "lake" / "orders")
    cwd_relative = os.path.relpath(p)
    return [
        p,
        p + "/",
        p + "//",
        "file://" + p,
        "file://" + p + "/",
        "file:" + p,
        "file://localhost" + p,
        str(base) + "//lake//orders",
        str(base) + "/./lake/./orders",
        str(base) + "/lake/../lake/orders",
        str(base) + "/lake/sub/../orders",  # sub does not exist: '..' is lexical there too
        str(base / "link" / "orders"),  # a symlink to lake
        "file://" + str(base / "link" / "orders"),
        cwd_relative,
        "./" + cwd_relative,
        "/" + p,  # a leading '//' is '/' on Linux
        "file:///" + p.lstrip("/").replace("orders", "%6Frders"),  # percent-encoded
    ]


@pytest.mark.parametrize("exists", [False, True], ids=["new", "existing"])
def test_every_spelling_of_a_local_table_is_one_table(tmp_path: Path, exists: bool) -> None:
    (tmp_path / "lake").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "lake")
    if exists:
        (tmp_path / "lake" / "orders").mkdir()
    spellings = _spellings(tmp_path)
    identities = {s: table_identity("delta", s) for s in spellings}
    assert len(set(identities.values())) == 1, identities
    # A hard link to an SQLite file, and another name on a case-insensitive file system,
    # are the same inode: one table once it exists.
    if exists:
        db = tmp_path / "lake" / "t1.db"
        db.write_bytes(b"")
        os.link(db, tmp_path / "t1-link.db")
        assert table_identity("sqlite", str(db)) == table_identity(
            "sqlite", str(tmp_path / "t1-link.db")
        )


def test_other_tables_are_other_identities(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    assert location_identity(str(tmp_path / "a")) != location_identity(str(tmp_path / "b"))
    assert location_identity(str(tmp_path / "b")) != location_identity(str(tmp_path / "B"))
    assert table_identity("delta", str(tmp_path / "a")) != table_identity(
        "iceberg", str(tmp_path / "a")
    )
    assert table_identity("sqlite", "x.db", table="t") != table_identity(
        "sqlite", "x.db", table="u"
    )


def test_sqlite_dsn_spellings_are_one_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    for exists in (False, True):
        if exists:
            (tmp_path / "t1.db").write_bytes(b"")
        spellings = [
            "t1.db",
            "./t1.db",
            "data/../t1.db",
            "sqlite:///t1.db",
            "sqlite:///./t1.db",
            "sqlite+pysqlite:///t1.db",
            "SQLite:///t1.db",
            f"sqlite:///{tmp_path}/t1.db",  # sqlite:////abs
            str(tmp_path / "t1.db"),
            str(tmp_path) + "//t1.db",
        ]
        found = {s: table_identity("sqlite", s, table="Orders") for s in spellings}
        assert len(set(found.values())) == 1, found
        assert table_identity("sqlite", "t1.db", table="orders") in found.values()
        # A parsed DSN is its file, also where the path would not parse as a DSN again.
        assert table_identity("sqlite", parse_dsn("t1.db"), table="orders") in found.values()
    colon = parse_dsn("sqlite:///data:2024.db")
    assert table_identity("sqlite", colon) == table_identity("sqlite", "./data:2024.db")


@pytest.mark.parametrize(
    ("spellings", "canonical"),
    [
        (
            [
                "s3://bucket/lake/orders",
                "s3://bucket/lake/orders/",
                "S3://Bucket/lake/orders",
                "s3a://bucket/lake/orders",
                "s3n://bucket//lake/./orders",
                "s3://bucket/lake/x/../orders",
                "s3://user@bucket/lake/orders",
                "s3://bucket:443/lake/orders",
                "opendal+s3://bucket/lake/orders",
                "s3://bucket/lake/%6Frders",
            ],
            "s3://bucket/lake/orders",
        ),
        (["gs://b/t", "gcs://B/t/", "GS://b//t"], "gs://b/t"),
        (
            [
                "az://container/t",
                "azure://container/t",
                "abfss://container@account.dfs.core.windows.net/t",
                "abfs://Container@Account.dfs.core.windows.net/t/",
                "adl://container/t",
            ],
            "az://container/t",
        ),
        (["hdfs://nn:8020/t", "hdfs://NN/t/", "hdfs://nn:9000//t"], "hdfs://nn/t"),
    ],
)
def test_object_store_spellings_are_one_uri(spellings: list[str], canonical: str) -> None:
    assert {canonical_uri(s) for s in spellings} == {canonical}
    assert len({table_identity("delta", s) for s in spellings}) == 1


def test_object_keys_keep_their_case() -> None:
    """S3, GCS and Azure keys are case-sensitive: ``Orders`` and ``orders`` are two tables."""
    assert canonical_uri("s3://b/Orders") != canonical_uri("s3://b/orders")
    assert canonical_uri("s3://b/t") != canonical_uri("s3://c/t")
    assert canonical_uri("s3://b/t") != canonical_uri("gs://b/t")


def test_bad_targets_are_refused() -> None:
    with pytest.raises(ConfigError, match="names host 'otherhost'"):
        location_identity("file://otherhost/lake/t")
    with pytest.raises(ConfigError, match="absolute path"):
        location_identity("file:lake/t")
    with pytest.raises(ConfigError, match="path or URI"):
        location_identity(" ")
    with pytest.raises(ConfigError, match="kind must be one of"):
        table_identity("parquet", "/t")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs execute="):
        table_identity("postgresql", "postgresql://db/x")
    with pytest.raises(ConfigError, match="needs an SQLite database"):
        table_identity("sqlite", "postgresql://db/x")
