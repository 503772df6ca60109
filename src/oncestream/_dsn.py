"""Database URLs (DSNs) for ledgers, ``audit`` SQL outputs and ``foreachBatch``, parsed once.

The meaning is SQLAlchemy's, so a URL copied from an SQLAlchemy application
names the same database here:

=================================  =============================================
``sqlite:///orders.db``            ``orders.db`` relative to the working directory
``sqlite:///data/orders.db``       ``data/orders.db`` (relative: three slashes)
``sqlite:////var/lib/orders.db``   ``/var/lib/orders.db`` (absolute: four slashes)
``orders.db``, ``/var/x.db``       a plain path is an SQLite file, as given
``postgresql://user:pw@host/db``   PostgreSQL (``postgres://`` and
                                   ``postgresql+psycopg://`` work too)
=================================  =============================================

``sqlite://`` and ``sqlite:///:memory:`` (in-memory databases) are refused:
nothing written there outlives the process. Passwords never appear in
``repr()``, ``str()`` or error messages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import unquote

from ._errors import ConfigError
from ._private import redact

__all__ = ["Dsn", "parse_dsn", "redact_dsn"]

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_SQLITE_SCHEMES = ("sqlite", "sqlite+pysqlite")
_PG_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg", "postgresql+psycopg2")
_ALLOWED = (
    "it must be sqlite:// or postgresql://: sqlite:///relative/path.db, "
    "sqlite:////absolute/path.db, postgresql://user@host/db, or a plain SQLite file path"
)


def redact_dsn(text: str) -> str:
    """``text`` with any password (user-info or ``password=`` parameter) replaced by ``***``.

    Example::

        redact_dsn("postgresql://app:s3cret@db/shop")  # -> "postgresql://app:***@db/shop"
    """
    return redact(text)


@dataclass(frozen=True)
class Dsn:
    """A parsed database URL.

    Attributes:
        kind: ``"sqlite"`` or ``"postgresql"``.
        path: the SQLite file (relative paths are relative to the working
            directory); None for PostgreSQL.
        url: what the driver connects with (the SQLite path, or a
            ``postgresql://`` URL for psycopg, password included: never print it).
    """

    kind: Literal["sqlite", "postgresql"]
    path: str | None = None
    url: str = field(default="", repr=False)

    def __str__(self) -> str:
        return redact_dsn(self.url) if self.kind == "postgresql" else f"sqlite file {self.path}"

    def __repr__(self) -> str:
        return f"Dsn({self.kind!r}, {redact_dsn(self.url)!r})"


def parse_dsn(text: str, what: str = "database URL") -> Dsn:
    """Parse a ledger / audit / ``foreachBatch`` database URL (see the module docstring).

    Args:
        text: the URL or plain file path.
        what: how the caller names it, for messages (``"--ledger"``, ``"target"``).

    Raises:
        ConfigError: naming ``what``, the (redacted) value and the allowed forms.

    Example::

        parse_dsn("sqlite:////var/lib/x.db").path  # -> "/var/lib/x.db"
        parse_dsn("sqlite:///var/lib/x.db").path   # -> "var/lib/x.db"
    """
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{what} is empty; {_ALLOWED}")
    value = text.strip()
    shown = redact_dsn(value)
    match = _SCHEME_RE.match(value)
    if match is None or (len(match.group(1)) == 1 and value[2:3] in ("\\", "/")):
        return Dsn(kind="sqlite", path=value, url=value)  # a plain path (or C:\ on Windows)
    scheme = match.group(1).lower()
    rest = value[match.end() :]
    if scheme in _PG_SCHEMES:
        if not rest.startswith("//"):
            raise ConfigError(f"{what} {shown!r} is not a PostgreSQL URL; {_ALLOWED}")
        return Dsn(kind="postgresql", url=f"postgresql:{rest}")
    if scheme not in _SQLITE_SCHEMES:
        raise ConfigError(f"{what} {shown!r} has unsupported scheme {scheme!r}; {_ALLOWED}")
    if not rest.startswith("//"):
        raise ConfigError(
            f"{what} {shown!r} is not an SQLite URL (it needs '//' after 'sqlite:'); {_ALLOWED}"
        )
    host, slash, database = rest[2:].partition("/")
    if host:
        raise ConfigError(
            f"{what} {shown!r} has a host part ({host!r}); SQLite URLs have none: "
            f"use sqlite:///{host}{slash}{database} for a relative path or "
            f"sqlite:////abs/path.db for an absolute one"
        )
    if "?" in database:
        raise ConfigError(f"{what} {shown!r}: query parameters are not supported; {_ALLOWED}")
    path = unquote(database)
    if not path or path == ":memory:":
        raise ConfigError(
            f"{what} {shown!r} names no file (an in-memory database would lose everything "
            f"at exit); {_ALLOWED}"
        )
    return Dsn(kind="sqlite", path=path, url=path)
