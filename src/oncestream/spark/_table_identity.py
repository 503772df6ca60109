"""One identity per table, whatever its spelling: what the table helpers claim batch ids by.

Two writers of one streaming query into one table record the same
``(query, batch_id)``, so the second would skip its rows as a replay; the
helpers refuse that (:mod:`._batch_claims`), but only if both writers name the
table alike. A path written two ways (``/lake/t``, ``file:///lake/t``,
``/lake//t``, ``/lake/./t``, a symlink, ``t`` from another directory) or a
database reached two ways (``127.0.0.1`` and ``localhost``) must give one
identity, or the claim misses the second writer and rows are lost without an
error. So every table helper (``delta``, ``transactional``, ``iceberg``) keys
its claims by :func:`table_identity`.

Erring matters one way only: two spellings of one table taken for two loses
rows silently, two tables taken for one fails the batch with a ``ConfigError``
naming the table. Where a spelling is ambiguous, this module merges.

What is done per kind of target:

- **Local paths and ``file:`` URIs**: the URI's path percent-decoded (as delta-rs
  does; a plain path is taken as written), made absolute against the working
  directory of the writing process and resolved (symlinks, ``..``, ``.``,
  repeated and trailing slashes: :func:`os.path.realpath`). When the file or
  directory exists, its identity is its device and inode, so hard links, bind
  mounts and other spellings on a case-insensitive file system (macOS, Windows)
  are one table too. A table that does not exist yet has no rows to lose: the
  first writer creates it, under its spelling, before any second writer looks.
- **Object-store URIs**: scheme and bucket (host) lower-cased (bucket, container
  and account names are lower-case on S3, GCS and Azure, and host names ignore
  case), aliases merged (``s3a`` is ``s3``, ``gcs`` is ``gs``, ``opendal+s3`` is
  ``s3``; an Azure ``abfss://container@account.host/path`` is
  ``az://container/path``, the account dropped), user-info and port dropped,
  the path percent-decoded with empty and ``.`` segments dropped, ``..``
  applied and the trailing slash removed. Object keys keep their case: S3, GCS
  and Azure Blob/ADLS keys are case-sensitive, so ``Orders`` and ``orders`` are
  two tables there. Storage options (endpoints, regions) are not part of the
  identity: one bucket and path on two endpoints in one query is one table.
- **PostgreSQL**: what the server reports, never the URL (host names, IP
  addresses, unix sockets, parameter order and default ports all reach one
  server): its ``port`` setting, the database (``current_database()``) and the
  schema holding the table (or where ``CREATE TABLE`` puts it:
  ``current_schema()``). Two servers on one port with the same database and
  schema names are taken for one (see :func:`postgres_identity`).
- **SQLite**: the database file as a local path (``t1.db``, ``./t1.db``,
  ``sqlite:///t1.db`` and ``sqlite:////abs/t1.db`` are one), then the rules above.

Table names are case-folded (unquoted SQL identifiers ignore case).
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Callable
from typing import Any, Literal
from urllib.parse import unquote

from .._dsn import Dsn, parse_dsn
from .._errors import ConfigError
from .._private import split_url

__all__ = ["TableKind", "location_identity", "postgres_identity", "table_identity"]

TableKind = Literal["delta", "iceberg", "sqlite", "postgresql"]
_KINDS: tuple[str, ...] = ("delta", "iceberg", "sqlite", "postgresql")

#: Schemes naming one store under another name (the value is the name kept).
_ALIASES = {
    "s3a": "s3",
    "s3n": "s3",
    "gcs": "gs",
    "azure": "az",
    "adl": "az",
    "abfs": "az",
    "abfss": "az",
    "azdls": "az",
    "azblob": "az",
    "wasb": "az",
    "wasbs": "az",
    "fs": "file",
}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Azure schemes whose URL names ``container@account.host``.
_AZURE_AT = frozenset({"abfs", "abfss", "wasb", "wasbs"})


def table_identity(
    kind: TableKind,
    target: str | Dsn,
    *,
    table: str = "",
    execute: Callable[..., Any] | None = None,
) -> str:
    """One string per table, whatever its spelling: equal strings, one table.

    Args:
        kind: ``"delta"`` or ``"iceberg"`` (``target`` is the table's location: a
            local path, a ``file:`` URI or an object-store URI), ``"sqlite"``
            (``target`` is the database: a file path, an ``sqlite:`` URL or its
            parsed :class:`~oncestream._dsn.Dsn`) or
            ``"postgresql"`` (``target`` is the database URL, used only to name it
            in messages: the server is asked through ``execute``).
        target: see ``kind``.
        table: the table inside the database (``sqlite``, ``postgresql``), or a
            name inside the location (an Iceberg catalog's ``namespace.table``);
            compared without case.
        execute: PostgreSQL only: a function running one SQL statement with
            ``%s`` parameters and returning a cursor (``psycopg.Connection.execute``,
            a ledger transaction's ``execute``), on the connection the writer writes
            with. The schema identified is the one ``table`` resolves to there.

    Returns:
        An opaque string; compare it, do not show it (it may hold an inode number).

    Raises:
        ConfigError: an unknown ``kind``, a ``target`` that is not a location or
            database URL, a ``file:`` URI naming another host, ``postgresql``
            without ``execute``.

    Example::

        table_identity("delta", "/lake//orders/") == table_identity("delta", "file:///lake/orders")
        table_identity("sqlite", "t.db", table="T") == table_identity("sqlite", "./t.db", table="t")
    """
    name = table.lower()
    if kind in ("delta", "iceberg"):
        return f"{kind}|{location_identity(str(target))}|{name}"
    if kind == "sqlite":
        dsn = target if isinstance(target, Dsn) else parse_dsn(target, "target")
        if dsn.kind != "sqlite" or dsn.path is None:
            raise ConfigError(f"table_identity('sqlite', ...) needs an SQLite database, got {dsn}")
        return f"sqlite|{_local_identity(dsn.path)}|{name}"
    if kind == "postgresql":
        if execute is None:
            raise ConfigError(
                "table_identity('postgresql', ...) needs execute=: a PostgreSQL table is "
                "identified by what the server reports, not by its URL"
            )
        return f"postgresql|{postgres_identity(execute, table)}|{name}"
    raise ConfigError(f"kind must be one of {', '.join(_KINDS)}, got {kind!r}")


def location_identity(location: str) -> str:
    """The identity of a storage location: a local path, ``file:`` URI or object-store URI.

    See the module docstring for the rules. The local file system is asked
    (``realpath``, ``stat``) in this process: call it where the table is written.

    Raises:
        ConfigError: ``location`` is empty, or a ``file:`` URI naming a host other
            than ``localhost`` or holding a query or fragment.
    """
    if not isinstance(location, str) or not location.strip():
        raise ConfigError(f"a table location must be a path or URI, got {location!r}")
    parts = split_url(location)
    if parts is None or len(parts.scheme) == 1:  # a plain path (a drive letter on Windows)
        return _local_identity(location)
    scheme = parts.scheme.lower()
    if scheme.startswith("opendal+"):  # the same store through OpenDAL (delta-rs 1.x)
        scheme = scheme.partition("+")[2]
    if _ALIASES.get(scheme, scheme) == "file":
        return _local_identity(file_uri_path(location))
    return canonical_uri(location)


def file_uri_path(uri: str) -> str:
    """The local path a ``file:`` URI names (percent-decoded), as delta-rs reads it.

    Raises:
        ConfigError: another host than ``localhost``, a relative path, a query or fragment.
    """
    parts = split_url(uri)
    if parts is None:
        return uri
    host = parts.host.lower() if parts.slashes else ""
    path = unquote(parts.tail) if parts.slashes else unquote(uri[len(parts.scheme) + 1 :])
    if host not in ("", "localhost") or (parts.slashes and parts.user is not None):
        raise ConfigError(
            f"{uri!r} names host {parts.host!r}: a file: URI names a path on this machine, "
            "file:///absolute/path (use the store's own scheme for a remote table)"
        )
    if not path.startswith("/") or "?" in parts.tail or "#" in parts.tail:
        raise ConfigError(
            f"{uri!r} is not a file: URI of an absolute path; write file:///absolute/path "
            "(or the plain path)"
        )
    return path


def canonical_uri(uri: str) -> str:
    """An object-store URI in canonical form (see the module docstring), for comparison only."""
    parts = split_url(uri)
    if parts is None:
        raise ConfigError(f"{uri!r} is not a URI")
    scheme = parts.scheme.lower()
    if scheme.startswith("opendal+"):
        scheme = scheme.partition("+")[2]
    bucket = parts.hostname.lower()
    if scheme in _AZURE_AT and parts.user is not None:
        bucket = unquote(parts.user).lower()  # container@account.dfs.core.windows.net
    path, _, rest = parts.tail.partition("?")
    rest = rest.partition("#")[0]
    segments: list[str] = []
    for segment in unquote(path).split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if segments:
                segments.pop()
            continue
        segments.append(segment)
    query = f"?{rest}" if rest else ""
    return f"{_ALIASES.get(scheme, scheme)}://{bucket}/{'/'.join(segments)}{query}"


def _local_identity(path: str) -> str:
    """A local file or directory: its device and inode if it exists, else its real path."""
    resolved = os.path.realpath(path)
    if os.name == "posix" and resolved.startswith("//"):
        resolved = posixpath.normpath("/" + resolved.lstrip("/"))
    try:
        status = os.stat(resolved)
    except OSError:
        return f"path:{resolved}"
    return f"inode:{status.st_dev}:{status.st_ino}"


def postgres_identity(execute: Callable[..., Any], relation: str = "") -> str:
    """Which PostgreSQL server, database and schema the connection behind ``execute`` is on.

    Asks the server, so every way of reaching it (host name or address, a unix
    socket, a pooler, URL parameters in any order, the default port written or
    not) gives one identity: the server's ``port`` setting, ``current_database()``
    and the schema of ``relation`` as the connection's ``search_path`` resolves
    it, or ``current_schema()`` (where ``CREATE TABLE`` puts it) while it does not
    exist. The same for every role: ``pg_control_system()``'s
    ``system_identifier`` would tell two servers on one port apart, but a role
    may be refused it, and a writer whose identity depended on its role would
    split one table in two. So two servers with the same port, database and
    schema are taken for one (their writers fail with ``ConfigError``, never
    lose rows; give each its own batches table). Read-only; nothing fails, so an
    open transaction stays usable.

    Args:
        execute: runs one statement with ``%s`` parameters, returns a cursor.
        relation: a table name as written in SQL (unquoted: case-folded by the server).
    """
    # Only a plain identifier reaches to_regclass, which raises on bad syntax before 16.
    name = relation if _IDENT.match(relation) else ""
    row = execute(
        "SELECT pg_catalog.current_setting('port'), pg_catalog.current_database(),"
        " coalesce((SELECT n.nspname FROM pg_catalog.pg_class c"
        " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
        " WHERE %s <> '' AND c.oid = pg_catalog.to_regclass(%s)),"
        " pg_catalog.current_schema(), '')",
        (name, name or "pg_class"),
    ).fetchone()
    return f"port {row[0]}|{row[1]}|{row[2]}"
