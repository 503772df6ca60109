"""Which Iceberg catalog :func:`~oncestream.spark.iceberg` writes through, and how it is opened.

pyiceberg's SQL catalog keeps each table's current metadata file in a database
row and commits by swapping it (``UPDATE ... WHERE metadata_location = <old>``):
on SQLite it is the embedded default (a file beside the warehouse, nothing to
run), on PostgreSQL it is a catalog many writers and readers share (Iceberg's
Java ``JdbcCatalog`` reads the same tables, so Spark with Iceberg's runtime sees
them). Only SQL catalogs are accepted: the writer's batch-id check travels as a
commit requirement that pyiceberg validates against the catalog's current
metadata inside the commit (:mod:`._iceberg`), which a REST catalog would have
to understand on the server side.

The spec holds what is needed to open the catalog again anywhere (it is pickled
with the writer to Spark Connect's Python worker), never an open catalog.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from .._dsn import Dsn, parse_dsn
from .._errors import ConfigError
from .._private import redact_url

__all__ = ["CatalogSpec", "catalog_spec"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: What the embedded catalog's file is called inside the warehouse.
EMBEDDED_FILE = "catalog.db"


@dataclass(frozen=True, kw_only=True)
class CatalogSpec:
    """An SQL catalog to open: its name, database URL and warehouse.

    Attributes:
        name: the catalog's name (its rows in the database are keyed by it; Spark's
            ``spark.sql.catalog.<name>`` must use the same one to see its tables).
        uri: the SQLAlchemy URL pyiceberg opens (secrets inside: never shown).
        warehouse: where new tables put their files (a ``file://`` URI or an
            object-store URI).
        dsn: the parsed database URL (its ``str`` is redacted).
        properties: further pyiceberg catalog properties (credentials, FileIO).
    """

    name: str
    uri: str = field(repr=False)
    warehouse: str
    dsn: Dsn
    properties: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def __str__(self) -> str:
        return f"SQL catalog {self.name!r} on {self.dsn}"

    @property
    def identity(self) -> tuple[str, ...]:
        """What names this catalog across spellings: its database and its name.

        Two specs with one identity see the same tables (``sqlite:////x/c.db`` and
        ``/x/c.db`` are one database).
        """
        if self.dsn.kind == "sqlite":
            where = os.path.realpath(self.dsn.path or "")
        else:
            parts = urlsplit(self.dsn.url)
            where = f"{parts.hostname}:{parts.port or 5432}{parts.path}"
        return ("sql", self.dsn.kind, where, self.name)

    def secrets(self) -> tuple[str, ...]:
        """Values that must never be printed (the database password, credential properties)."""
        hidden = [v for k, v in self.properties if _secret_key(k)]
        return (*self.dsn.secrets(), *hidden)

    def load(self) -> Any:
        """Open the catalog (pyiceberg's ``SqlCatalog``); creates its tables if missing.

        Raises:
            ConfigError: pyiceberg (or, for PostgreSQL, psycopg) is not installed.
        """
        try:
            from pyiceberg.catalog.sql import SqlCatalog
        except ImportError as exc:
            raise ConfigError(
                "oncestream.spark.iceberg needs pyiceberg: pip install 'oncestream[iceberg]'"
            ) from exc
        if self.dsn.kind == "postgresql":
            try:
                import psycopg  # noqa: F401
            except ImportError as exc:
                raise ConfigError(
                    "an Iceberg catalog on PostgreSQL needs psycopg: "
                    "pip install 'oncestream[iceberg,postgres]'"
                ) from exc
        if self.dsn.kind == "sqlite":  # SQLite creates the file, not its folder
            os.makedirs(os.path.dirname(os.path.abspath(self.dsn.path or "")), exist_ok=True)
        props = dict(self.properties)
        props.update(uri=self.uri, warehouse=self.warehouse)
        try:
            return SqlCatalog(self.name, **props)
        except Exception as exc:
            # Two writers opening a new catalog at once both create its tables (SQLAlchemy's
            # create_all checks, then creates): the second fails; its tables exist now.
            if "already exists" not in str(exc):
                raise
            return SqlCatalog(self.name, **props)


def _secret_key(key: str) -> bool:
    lowered = key.lower()
    return any(w in lowered for w in ("secret", "password", "token", "credential", "key"))


#: Warehouse URI schemes pyiceberg's file IO (pyarrow, fsspec) opens.
_WAREHOUSE_SCHEMES = (
    "file", "s3", "s3a", "s3n", "gs", "gcs", "abfs", "abfss", "wasb", "wasbs", "hdfs",
    "viewfs", "oss",
)  # fmt: skip


def _warehouse_uri(warehouse: str) -> str:
    """``warehouse`` as pyiceberg opens it: a local folder as an absolute ``file://`` URI.

    Raises:
        ConfigError: a ``file:`` URI naming another host, or a scheme pyiceberg cannot
            open (each would put the files elsewhere than meant, or fail at the first batch).
    """
    local = _local_folder(warehouse)
    if local is not None:
        return "file://" + local
    scheme = warehouse.split("://", 1)[0].lower()
    if scheme not in _WAREHOUSE_SCHEMES:
        raise ConfigError(
            f"warehouse {warehouse!r} has scheme {scheme!r}; allowed: a local folder or a URI "
            f"of {', '.join(s + '://' for s in _WAREHOUSE_SCHEMES)}"
        )
    return warehouse


def _local_folder(warehouse: str) -> str | None:
    """The absolute local folder ``warehouse`` names (a path, ``file:/p``, ``file:///p``,
    ``file://localhost/p``), or None for another scheme."""
    parts = urlsplit(warehouse)
    if not parts.scheme:
        return os.path.abspath(warehouse)
    if parts.scheme.lower() != "file":
        return None
    if parts.netloc not in ("", "localhost"):
        raise ConfigError(
            f"warehouse {warehouse!r} names the host {parts.netloc!r}: a file: URI names a "
            "folder of this machine (file:///path or file://localhost/path)"
        )
    return os.path.abspath(unquote(parts.path))


def catalog_spec(
    catalog: str | Mapping[str, str] | None,
    warehouse: str | None,
    name: str,
) -> CatalogSpec:
    """The catalog :func:`~oncestream.spark.iceberg`'s arguments name, validated.

    Args:
        catalog: None (the embedded default: an SQLite file ``catalog.db`` in
            ``warehouse``), a database URL (``sqlite:////abs/catalog.db``, a plain
            SQLite file path, or ``postgresql://user@host/db``), or pyiceberg catalog
            properties (``type`` ``sql`` only; ``uri`` the database URL).
        warehouse: where tables' files go: a local path or a URI (``s3://...``).
        name: the catalog's name.

    Raises:
        ConfigError: naming the bad value and what is allowed.
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(
            f"catalog_name must be a plain name ([A-Za-z_][A-Za-z0-9_]*), got {name!r}"
        )
    if warehouse is not None and (not isinstance(warehouse, str) or not warehouse.strip()):
        raise ConfigError(f"warehouse must be a path or URI, got {warehouse!r}")
    extra: dict[str, str] = {}
    if catalog is None:
        if warehouse is None:
            raise ConfigError(
                "iceberg() needs warehouse= (a folder or URI for the tables' files) or "
                "catalog=: without a catalog, an embedded SQLite catalog is kept in "
                f"<warehouse>/{EMBEDDED_FILE}"
            )
        folder = _local_folder(warehouse)
        if folder is None:
            raise ConfigError(
                f"the embedded catalog keeps its SQLite file in the warehouse, which must "
                f"then be a local folder; got {warehouse!r}: pass catalog= (an SQL "
                "database URL) for an object-store warehouse"
            )
        text = os.path.join(folder, EMBEDDED_FILE)
    elif isinstance(catalog, str):
        text = catalog
    elif isinstance(catalog, Mapping):
        props = {str(k): str(v) for k, v in catalog.items()}
        kind = props.pop("type", "sql")
        if kind != "sql":
            raise ConfigError(
                f"catalog type must be 'sql' (an SQL catalog on SQLite or PostgreSQL), got "
                f"{kind!r}: the batch-id check is a commit requirement the SQL catalog "
                "validates inside its commit; other catalogs are not supported yet"
            )
        text = props.pop("uri", "")
        if not text:
            raise ConfigError("catalog properties need 'uri': the SQL catalog's database URL")
        if warehouse is None:
            warehouse = props.pop("warehouse", None)
        else:
            props.pop("warehouse", None)
        extra = props
    else:
        raise ConfigError(
            "catalog must be None (embedded SQLite), a database URL or a mapping of "
            f"catalog properties, got {type(catalog).__name__}"
        )
    if warehouse is None:
        raise ConfigError(
            f"iceberg() with catalog {redact_url(text)!r} needs warehouse= (where the "
            "tables' files go: a folder or a URI)"
        )
    if isinstance(text, str) and text.strip().lower().startswith("postgresql+psycopg://"):
        text = "postgresql://" + text.strip().split("://", 1)[1]  # SQLAlchemy's spelling
    dsn = parse_dsn(text, "catalog")
    if dsn.kind == "sqlite":
        uri = "sqlite:///" + os.path.abspath(dsn.path or "")
    else:
        # SQLAlchemy's psycopg 3 dialect (oncestream's PostgreSQL driver), not psycopg2.
        uri = "postgresql+psycopg://" + dsn.url.split("://", 1)[1]
    return CatalogSpec(
        name=name,
        uri=uri,
        warehouse=_warehouse_uri(warehouse),
        dsn=dsn,
        properties=tuple(sorted(extra.items())),
    )
