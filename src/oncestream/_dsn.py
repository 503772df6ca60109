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

from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import quote, unquote

from ._errors import ConfigError
from ._private import UrlParts, parse_conninfo, redact_url, split_url, url_secrets

__all__ = ["Dsn", "parse_dsn", "postgres_url"]

_SQLITE_SCHEMES = ("sqlite", "sqlite+pysqlite")
_PG_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg", "postgresql+psycopg2")
_LIBPQ_KEYS = frozenset(
    {
        "host",
        "hostaddr",
        "port",
        "dbname",
        "user",
        "password",
        "passfile",
        "service",
        "sslmode",
        "sslpassword",
        "options",
        "application_name",
        "connect_timeout",
    }
)
_ALLOWED = (
    "it must be sqlite:// or postgresql://: sqlite:///relative/path.db, "
    "sqlite:////absolute/path.db, postgresql://user@host/db, or a plain SQLite file path"
)


def postgres_url(url: str | UrlParts) -> str:
    """A ``postgresql://`` URL with its user and password percent-encoded exactly once.

    Characters such as ``/ # ? @ :`` in a password written unencoded (the
    user-info ends at the last ``@``) or already percent-encoded both end up
    encoded once, so libpq reads the same password and never a half URL it
    would echo in an error. The password is decoded first: write a literal
    ``%`` as ``%25``.

    Example::

        postgres_url("postgres://app:pa/ss@db/x")  # -> "postgresql://app:pa%2Fss@db/x"
    """
    parts = split_url(url) if isinstance(url, str) else url
    if parts is None:
        raise ConfigError(f"{redact_url(str(url))!r} is not a postgresql:// URL")
    info = ""
    if parts.user is not None:
        info = quote(unquote(parts.user), safe="")
        if parts.password is not None:
            info += ":" + quote(unquote(parts.password), safe="")
    return UrlParts("postgresql", "//", None, None, parts.host, parts.tail).join(userinfo=info)


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
        return redact_url(self.url) if self.kind == "postgresql" else f"sqlite file {self.path}"

    def __repr__(self) -> str:
        return f"Dsn({self.kind!r}, {redact_url(self.url)!r})"

    def secrets(self) -> tuple[str, ...]:
        """The password (and secret parameters) in :attr:`url`, to scrub driver messages."""
        return url_secrets(self.url) if self.kind == "postgresql" else ()


def _is_conninfo(value: str) -> bool:
    """libpq's ``host=db password=x`` form, or text that assigns a secret: never a file name."""
    pairs = parse_conninfo(value)
    return redact_url(value) != value or (
        pairs is not None and any(key.lower() in _LIBPQ_KEYS for key, _ in pairs)
    )


def parse_dsn(text: str, what: str = "database URL") -> Dsn:
    """Parse a ledger / audit / ``foreachBatch`` database URL (see the module docstring).

    Args:
        text: the URL or plain file path.
        what: how the caller names it, for messages (``"--ledger"``, ``"target"``).

    Raises:
        ConfigError: naming ``what``, the (redacted) value and the allowed forms; a
            libpq ``key=value`` string is refused without being shown.

    Example::

        parse_dsn("sqlite:////var/lib/x.db").path  # -> "/var/lib/x.db"
        parse_dsn("sqlite:///var/lib/x.db").path   # -> "var/lib/x.db"
    """
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{what} is empty; {_ALLOWED}")
    value = text.strip()
    parts = split_url(value)
    if parts is None or (len(parts.scheme) == 1 and value[2:3] in ("\\", "/")):
        if _is_conninfo(value):
            raise ConfigError(
                f"{what} looks like a libpq key=value connection string (not shown: it may "
                "hold a password); give a URL instead, e.g. postgresql://user@host:5432/db "
                "(the password percent-encoded in it, or in PGPASSWORD or ~/.pgpass)"
            )
        return Dsn(kind="sqlite", path=value, url=value)  # a plain path (or C:\ on Windows)
    shown = parts.redacted()
    scheme = parts.scheme.lower()
    if scheme in _PG_SCHEMES:
        if parts.slashes != "//":
            raise ConfigError(f"{what} {shown!r} is not a PostgreSQL URL; {_ALLOWED}")
        return Dsn(kind="postgresql", url=postgres_url(parts))
    if scheme not in _SQLITE_SCHEMES:
        raise ConfigError(f"{what} {shown!r} has unsupported scheme {scheme!r}; {_ALLOWED}")
    if parts.slashes != "//":
        raise ConfigError(
            f"{what} {shown!r} is not an SQLite URL (it needs '//' after 'sqlite:'); {_ALLOWED}"
        )
    if parts.user is not None or parts.host:
        where = f"a host part ({parts.host!r})" if parts.host else "a user part"
        raise ConfigError(
            f"{what} {shown!r} has {where}; SQLite URLs have none: "
            f"use sqlite:///{parts.host}{parts.tail} for a relative path or "
            f"sqlite:////abs/path.db for an absolute one"
        )
    database = parts.tail[1:]
    if "?" in database:
        raise ConfigError(f"{what} {shown!r}: query parameters are not supported; {_ALLOWED}")
    path = unquote(database)
    if not path or path == ":memory:":
        raise ConfigError(
            f"{what} {shown!r} names no file (an in-memory database would lose everything "
            f"at exit); {_ALLOWED}"
        )
    return Dsn(kind="sqlite", path=path, url=path)
