"""A PostgreSQL table is identified by what the server reports, whatever the URL says.

``transactional()`` keys its two-writers claim by this identity
(spark/_table_identity.py); tests/spark/test_table_spellings.py has the writers.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from oncestream._dsn import parse_dsn
from oncestream.spark._table_identity import table_identity

pytestmark = pytest.mark.timeout(120)


def _identity(url: str, table: str = "oncestream_batches", **connect: Any) -> str:
    dsn = parse_dsn(url, "target")
    with psycopg.connect(dsn.url, autocommit=True, **connect) as con:
        return table_identity("postgresql", url, table=table, execute=con.execute)


def test_every_way_to_reach_one_database_is_one_identity(
    postgres_server: Any, postgres_url: str
) -> None:
    port, database = postgres_server.port, postgres_url.rsplit("/", 1)[1]
    socket_dir = str(postgres_server.dir)
    role = postgres_server.password_role("identity_role", "pw-identity")
    user = role.split("//", 1)[1].split("@", 1)[0]
    spellings = [
        postgres_url,
        f"postgresql://postgres@localhost:{port}/{database}",
        f"postgres://postgres@LOCALHOST:{port}/{database}",
        f"postgresql+psycopg://postgres@127.0.0.1:{port}/{database}?sslmode=disable&connect_timeout=5",
        f"postgresql://postgres@127.0.0.1:{port}/{database}?connect_timeout=5&sslmode=disable",
        f"postgresql:///{database}?host=127.0.0.1&port={port}&user=postgres",
        f"postgresql://postgres@/{database}?host={socket_dir}&port={port}",  # unix socket
        f"postgresql://postgres@127.0.0.1:{port}/{database}?options=-csearch_path%3Dpublic",
    ]
    found = {url: _identity(url) for url in spellings}
    # Another role (a password one) on the same database: the same table.
    found[role] = _identity(
        f"postgresql://{user}@127.0.0.1:{port}/{database}", password="pw-identity"
    )
    assert len(set(found.values())) == 1, found
    # Table names are SQL identifiers: unquoted, they ignore case.
    assert _identity(postgres_url, table="OnceStream_Batches") == found[postgres_url]


def test_other_databases_and_schemas_are_other_tables(
    postgres_server: Any, postgres_url: str
) -> None:
    base = postgres_url.rsplit("/", 1)[0]
    with psycopg.connect(postgres_url, autocommit=True) as con:
        con.execute("CREATE SCHEMA other")
    here = _identity(postgres_url)
    assert _identity(f"{base}/postgres") != here  # another database
    in_other = f"{postgres_url}?options=-csearch_path%3Dother"
    assert _identity(in_other) != here  # created in schema other
    assert _identity(postgres_url, table="another_batches") != here
    # An existing table is identified by the schema the search path finds it in.
    with psycopg.connect(postgres_url, autocommit=True) as con:
        con.execute("CREATE TABLE public.found_here (n int)")
    assert _identity(
        f"{postgres_url}?options=-csearch_path%3Dother,public", table="found_here"
    ) == (_identity(postgres_url, table="found_here"))
