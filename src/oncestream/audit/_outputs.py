"""Reading the keys of file, table and SQL outputs for :mod:`oncestream.audit`.

Parquet files, Delta tables (deltalake), Iceberg tables (pyiceberg, through
their SQL catalog) and SQL tables.

Every failure becomes a one-line oncestream error naming the output: a bad
path, a file that is not Parquet, a missing table or column is a ConfigError
(exit 2); an unreachable database is an OncestreamError (exit 1).
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any
from urllib.parse import quote

import orjson

from .._dsn import Dsn
from .._errors import ConfigError, OncestreamError
from .._private import scrub
from ..streams import lineage_id
from ._keys import KeySpec

__all__ = ["delta_keys", "iceberg_keys", "parquet_keys", "sql_keys"]


def _spark_committed_files(path: str) -> list[str] | None:
    """Files a Spark file sink committed, from its ``_spark_metadata`` log (None if absent)."""
    meta = os.path.join(path, "_spark_metadata")
    if not os.path.isdir(meta):
        return None
    entries = []
    for name in os.listdir(meta):
        stem = name.removesuffix(".compact")
        if stem.isdigit():
            entries.append((int(stem), name))
    entries.sort()
    start = max((i for i, (_, n) in enumerate(entries) if n.endswith(".compact")), default=0)
    files: dict[str, bool] = {}
    for _, name in entries[start:]:
        with open(os.path.join(meta, name), "rb") as fh:
            for line in fh.read().splitlines()[1:]:
                if line.strip():
                    entry = orjson.loads(line)
                    files[entry["path"]] = entry.get("action", "add") == "add"
    return [p.removeprefix("file://") for p, keep in files.items() if keep]


def _one_line(exc: BaseException, secrets: tuple[str, ...] = ()) -> str:
    return scrub(" ".join(str(exc).split()), secrets)[:300] or type(exc).__name__


def parquet_keys(path: str, key: KeySpec) -> list[str]:
    import pyarrow as pa
    import pyarrow.dataset as ds

    if not os.path.exists(path):
        raise ConfigError(f"parquet output {path!r} does not exist")
    try:
        committed = _spark_committed_files(path)
        dataset = ds.dataset(committed if committed is not None else path, format="parquet")
        columns = _table_columns(key, set(dataset.schema.names), f"parquet:{path}")
        table = dataset.to_table(columns=columns)
    except (pa.ArrowException, OSError, orjson.JSONDecodeError, KeyError) as exc:
        raise ConfigError(
            f"parquet output {path!r} cannot be read as Parquet: {_one_line(exc)}"
        ) from None
    return _rows_to_keys(key, [table.column(c).to_pylist() for c in columns])


def delta_keys(path: str, key: KeySpec) -> list[str]:
    """The keys of the rows of the Delta table at ``path`` (its current version)."""
    try:
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError
    except ImportError:
        raise ConfigError(
            "a delta output needs deltalake: pip install 'oncestream[delta]'"
        ) from None
    try:
        table = DeltaTable(path)
    except TableNotFoundError:
        raise ConfigError(f"delta output {path!r}: no Delta table there") from None
    names = {f.name for f in table.schema().fields}
    columns = _table_columns(key, names, f"delta:{path}")
    rows = table.to_pyarrow_table(columns=columns)
    return _rows_to_keys(key, [rows.column(c).to_pylist() for c in columns])


def iceberg_keys(catalog: str, identifier: str, key: KeySpec) -> list[str]:
    """The keys of the rows of Iceberg table ``identifier`` (its current snapshot).

    ``catalog``: a warehouse folder (its embedded SQL catalog, ``catalog.db``
    there) or the SQL catalog's database URL; the catalog's name is oncestream's.
    """
    from ..tables._internal import EMBEDDED_FILE, catalog_spec

    local = catalog.removeprefix("file://")
    if os.path.isdir(local):
        spec = catalog_spec(None, local, "oncestream")
    else:
        spec = catalog_spec(catalog, os.getcwd(), "oncestream")  # reading: no new files
    if spec.dsn.kind == "sqlite" and not os.path.isfile(spec.dsn.path or ""):
        where = f"{catalog}/{EMBEDDED_FILE}" if os.path.isdir(local) else catalog
        raise ConfigError(f"iceberg output: no catalog at {where!r}")
    try:
        from pyiceberg.exceptions import NoSuchTableError
    except ImportError:
        raise ConfigError(
            "an iceberg output needs pyiceberg: pip install 'oncestream[iceberg]'"
        ) from None
    try:
        table = spec.load().load_table(identifier)
    except NoSuchTableError:
        raise ConfigError(f"iceberg output: no table {identifier!r} in {spec}") from None
    except Exception as exc:
        raise OncestreamError(
            f"cannot read iceberg output {identifier} ({spec}): {_one_line(exc, spec.secrets())}"
        ) from None
    names = {f.name for f in table.schema().fields}
    columns = _table_columns(key, names, f"iceberg table {identifier}")
    rows = table.scan(selected_fields=tuple(columns)).to_arrow()
    return _rows_to_keys(key, [rows.column(c).to_pylist() for c in columns])


def _table_columns(key: KeySpec, available: set[str], where: str) -> list[str]:
    if key.kind == "field":
        wanted = [key.name or ""]
    elif key.kind == "lineage" and "msg_id" not in available:
        wanted = ["stream", "sequence"]
    else:
        wanted = ["msg_id"]
    missing = [c for c in wanted if c not in available]
    if missing:
        raise ConfigError(
            f"{where} has no column {', '.join(missing)} for key {key} "
            f"(columns: {', '.join(sorted(available))})"
        )
    return wanted


def _rows_to_keys(key: KeySpec, columns: list[list[Any]]) -> list[str]:
    if len(columns) == 2:
        return [lineage_id(s, int(q)) for s, q in zip(columns[0], columns[1], strict=True)]
    return [str(v) for v in columns[0]]


def sql_keys(dsn: Dsn, table: str, key: KeySpec) -> list[str]:
    where = f"sql table {table}"
    if dsn.kind == "postgresql":
        import psycopg

        try:
            with psycopg.connect(dsn.url, connect_timeout=10) as pg:
                cur = pg.execute(f"SELECT * FROM {table} LIMIT 0")
                available = {d.name for d in cur.description or ()}
                columns = _table_columns(key, available, where)
                rows = pg.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall()
        except psycopg.errors.UndefinedTable:
            raise ConfigError(f"sql output {dsn}: no table {table!r}") from None
        except psycopg.OperationalError as exc:
            text = _one_line(exc, dsn.secrets())
            if "authentication failed" in text or "does not exist" in text:
                raise ConfigError(f"sql output {dsn}: {text}") from None
            raise OncestreamError(f"cannot read sql output {dsn}: {text}") from None
        except psycopg.Error as exc:
            text = _one_line(exc, dsn.secrets())
            raise ConfigError(f"sql output {dsn} table {table!r}: {text}") from None
    else:
        path = dsn.path or ""
        if not os.path.isfile(path):
            raise ConfigError(f"SQLite database {path!r} does not exist")
        try:
            with sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode=ro", uri=True) as db:
                probe = db.execute(f"SELECT * FROM {table} LIMIT 0")
                available = {d[0] for d in probe.description}
                columns = _table_columns(key, available, where)
                rows = db.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall()
        except sqlite3.DatabaseError as exc:
            if "no such table" in str(exc):
                raise ConfigError(f"sql output {path!r}: no table {table!r}") from None
            raise ConfigError(f"sql output {path!r}: {_one_line(exc)}") from None
    return _rows_to_keys(key, [list(c) for c in zip(*rows, strict=True)] or [[]] * len(columns))
