"""Typed config blocks for multi-server topologies: clusters, leaf nodes, accounts, auth, TLS.

Each block renders to plain dicts through ``to_dict()`` and is attached to a
:class:`~oncestream.server.ServerConfig` through its ``blocks`` field, so the
one renderer in ``_config.py`` writes them. Secrets (passwords, tokens, seeds)
are kept out of ``repr()``, and rendered configs hold bcrypt hashes of passwords
and tokens, never the plaintext (nats-server accepts ``$2a$`` bcrypt hashes; it
warns "Plaintext passwords detected" otherwise). Leaf remotes authenticate
with an nkey seed; the config files holding them are written 0600 (see
``oncestream._private``).

Example::

    accounts = AccountsConfig(
        accounts=(Account(name="ACC", users=(User(user="acc", password="s3cret"),),
                          jetstream=True),),
    )
    config = ServerConfig(server_name="hub", blocks=(accounts, LeafNodeConfig(port=7422)))
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from .._errors import ConfigError
from .._private import redacted_repr

__all__ = [
    "Account",
    "AccountsConfig",
    "Authorization",
    "ClusterConfig",
    "Export",
    "Import",
    "LeafNodeConfig",
    "LeafRemote",
    "OperatorConfig",
    "ServerTLS",
    "TLSConfig",
    "User",
]

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")


def _check_name(what: str, value: str) -> None:
    if not _NAME_RE.match(value):
        raise ConfigError(f"{what} must contain only letters, digits, '-' and '_', got {value!r}")


#: bcrypt cost of the hashes written into server configs (the server pays it per login).
BCRYPT_COST = 10


def is_bcrypt(secret: str) -> bool:
    """True when ``secret`` already is a bcrypt hash (``$2a$``, ``$2b$``...)."""
    return re.match(r"^\$2[abxy]?\$\d\d\$", secret) is not None


@functools.lru_cache(maxsize=256)
def bcrypt_hash(secret: str) -> str:
    """The ``$2a$`` bcrypt hash nats-server accepts for ``secret`` (unchanged if hashed already).

    Cached per process, so rendering a config again does not change the file.
    """
    if is_bcrypt(secret):
        return secret
    import bcrypt

    salt = bcrypt.gensalt(rounds=BCRYPT_COST, prefix=b"2a")
    return bcrypt.hashpw(secret.encode(), salt).decode()


def _check_port(what: str, port: int) -> None:
    if port != -1 and not 0 < port < 65536:
        raise ConfigError(f"{what} must be -1 (random) or 1..65535, got {port!r}")


@dataclass(frozen=True, kw_only=True)
class TLSConfig:
    """A ``tls {}`` block (client, cluster or leaf listener, or a leaf remote).

    Args:
        cert_file, key_file: this side's certificate and key (PEM).
        ca_file: CA used to verify the peer.
        verify: require and verify a client certificate (mutual TLS).
        timeout: TLS handshake timeout in seconds.
    """

    cert_file: Path | str | None = None
    key_file: Path | str | None = None
    ca_file: Path | str | None = None
    verify: bool = False
    timeout: float = 2.0

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigError("TLSConfig: cert_file and key_file must be given together")
        if self.verify and self.ca_file is None:
            raise ConfigError("TLSConfig: verify=True needs ca_file to check client certificates")

    def to_dict(self) -> dict[str, Any]:
        return {
            "cert_file": None if self.cert_file is None else str(self.cert_file),
            "key_file": None if self.key_file is None else str(self.key_file),
            "ca_file": None if self.ca_file is None else str(self.ca_file),
            "verify": self.verify or None,
            "timeout": self.timeout,
        }


@dataclass(frozen=True, kw_only=True)
class ServerTLS:
    """The top-level ``tls {}`` block securing client connections."""

    tls: TLSConfig

    def to_dict(self) -> dict[str, Any]:
        return {"tls": self.tls.to_dict()}


@dataclass(frozen=True, kw_only=True)
class User:
    """A user in an account or ``authorization`` block.

    Give ``user`` and ``password``, or ``nkey`` (a public user nkey, ``U...``).

    Args:
        user, password: user/password login.
        nkey: public nkey of the user (the client holds the seed).
        permissions: raw ``permissions`` block, e.g. ``{"publish": ["a.>"]}``.
    """

    user: str | None = None
    password: str | None = field(default=None, repr=False)
    nkey: str | None = None
    permissions: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.nkey is not None:
            if self.user is not None or self.password is not None:
                raise ConfigError("User: give user/password or nkey, not both")
            if not self.nkey.startswith("U"):
                raise ConfigError(f"User: nkey must be a public user key (U...), got {self.nkey!r}")
        elif self.user is None or self.password is None:
            raise ConfigError("User: needs user and password, or an nkey")

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = (
            {"nkey": self.nkey}
            if self.nkey is not None
            else {"user": self.user, "password": bcrypt_hash(str(self.password))}
        )
        if self.permissions is not None:
            result["permissions"] = dict(self.permissions)
        return result


@dataclass(frozen=True, kw_only=True)
class Authorization:
    """The top-level ``authorization {}`` block (single-account servers).

    Exactly one of: ``user``/``password``, ``token``, or ``users`` (list of
    :class:`User`, e.g. nkey users).
    """

    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    users: tuple[User, ...] = ()
    timeout: float = 2.0

    def __post_init__(self) -> None:
        kinds = sum(
            (
                self.user is not None or self.password is not None,
                self.token is not None,
                bool(self.users),
            )
        )
        if kinds != 1:
            raise ConfigError("Authorization: give exactly one of user/password, token or users")
        if (self.user is None) != (self.password is None):
            raise ConfigError("Authorization: user and password must be given together")

    def to_dict(self) -> dict[str, Any]:
        block: dict[str, Any] = {
            "user": self.user,
            "password": None if self.password is None else bcrypt_hash(self.password),
            "token": None if self.token is None else bcrypt_hash(self.token),
            "timeout": self.timeout,
        }
        if self.users:
            block["users"] = [u.to_dict() for u in self.users]
        return {"authorization": block}


@dataclass(frozen=True, kw_only=True)
class Export:
    """A subject an account offers to others.

    Args:
        subject: exported subject (wildcards allowed).
        kind: ``"service"`` (request/reply) or ``"stream"`` (messages flow out).
        response_type: for services, ``"stream"`` when one request gets many replies
            (JetStream ``MSG.NEXT``), ``"singleton"`` (default) otherwise.
        accounts: restrict the export to these accounts (public when empty).
    """

    subject: str
    kind: Literal["service", "stream"] = "service"
    response_type: Literal["singleton", "stream", "chunked"] | None = None
    accounts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in ("service", "stream"):
            raise ConfigError(f"Export.kind must be 'service' or 'stream', got {self.kind!r}")
        if self.response_type is not None and self.kind != "service":
            raise ConfigError("Export.response_type only applies to service exports")

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {self.kind: self.subject, "response_type": self.response_type}
        if self.accounts:
            result["accounts"] = list(self.accounts)
        return result


@dataclass(frozen=True, kw_only=True)
class Import:
    """A subject imported from another account, optionally renamed with ``to``.

    Example: ``Import(account="ACC", subject="$JS.hub.API.CONSUMER.MSG.NEXT.agg.dur",
    to="JS.acc@hub.API.CONSUMER.MSG.NEXT.agg.dur")``.
    """

    account: str
    subject: str
    kind: Literal["service", "stream"] = "service"
    to: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("service", "stream"):
            raise ConfigError(f"Import.kind must be 'service' or 'stream', got {self.kind!r}")

    def to_dict(self) -> dict[str, Any]:
        return {self.kind: {"account": self.account, "subject": self.subject}, "to": self.to}


@dataclass(frozen=True, kw_only=True)
class Account:
    """One account: its users, JetStream, exports and imports."""

    name: str
    users: tuple[User, ...] = ()
    jetstream: bool = False
    exports: tuple[Export, ...] = ()
    imports: tuple[Import, ...] = ()

    def __post_init__(self) -> None:
        _check_name("Account.name", self.name)

    def user(self, name: str) -> User:
        """The user called ``name``.

        Raises:
            ConfigError: if the account has no such user.
        """
        for candidate in self.users:
            if candidate.user == name:
                return candidate
        raise ConfigError(f"account {self.name!r} has no user {name!r}")

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {"users": [u.to_dict() for u in self.users]}
        if self.jetstream:
            result["jetstream"] = "enabled"
        if self.exports:
            result["exports"] = [e.to_dict() for e in self.exports]
        if self.imports:
            result["imports"] = [i.to_dict() for i in self.imports]
        return result


@dataclass(frozen=True, kw_only=True)
class AccountsConfig:
    """The ``accounts {}`` block and the ``system_account``."""

    accounts: tuple[Account, ...]
    system_account: str | None = None

    def __post_init__(self) -> None:
        names = [a.name for a in self.accounts]
        if len(set(names)) != len(names):
            raise ConfigError(f"AccountsConfig: duplicate account names in {names}")
        if self.system_account is not None and self.system_account not in names:
            raise ConfigError(
                f"AccountsConfig: system_account {self.system_account!r} is not one of {names}"
            )

    def __getitem__(self, name: str) -> Account:
        for account in self.accounts:
            if account.name == name:
                return account
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "accounts": {a.name: a.to_dict() for a in self.accounts},
            "system_account": self.system_account,
        }


@dataclass(frozen=True, kw_only=True)
class ClusterConfig:
    """The ``cluster {}`` block: route listener and the routes to the other nodes.

    Args:
        name: cluster name (same on every node).
        port: route listener port on ``host``.
        routes: route URLs of the other nodes, e.g. ``nats-route://127.0.0.1:6223``.
    """

    name: str
    port: int
    host: str = "127.0.0.1"
    routes: tuple[str, ...] = ()
    tls: TLSConfig | None = None

    def __post_init__(self) -> None:
        _check_name("ClusterConfig.name", self.name)
        _check_port("ClusterConfig.port", self.port)

    def __repr__(self) -> str:
        return redacted_repr(self)

    def to_dict(self) -> dict[str, Any]:
        return {
            "cluster": {
                "name": self.name,
                "listen": f"{self.host}:{self.port}",
                "routes": list(self.routes),
                # Local clusters restart nodes on purpose; reconnect quickly.
                "connect_retries": 120,
                "tls": None if self.tls is None else self.tls.to_dict(),
            }
        }


@dataclass(frozen=True, kw_only=True)
class LeafRemote:
    """One outgoing leaf connection, binding a local account to the hub.

    Args:
        url: the hub's leaf listener, e.g. ``nats-leaf://127.0.0.1:7422``.
        account: local account whose traffic goes over this connection.
        user, password: credentials of a hub user in the matching hub account
            (rendered into the URL: prefer ``nkey_seed``).
        nkey_seed: seed (``SU...``) of an nkey user of the matching hub account.
        credentials: path to a ``.creds`` file (operator mode), instead of user/password.
        tls: TLS settings for this connection.
    """

    url: str
    account: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    nkey_seed: str | None = field(default=None, repr=False)
    credentials: Path | str | None = None
    tls: TLSConfig | None = None

    def __post_init__(self) -> None:
        if (self.user is None) != (self.password is None):
            raise ConfigError("LeafRemote: user and password must be given together")
        given = [self.user is not None, self.nkey_seed is not None, self.credentials is not None]
        if sum(given) > 1:
            raise ConfigError("LeafRemote: give one of user/password, nkey_seed or credentials")
        if self.nkey_seed is not None and not self.nkey_seed.startswith("SU"):
            raise ConfigError("LeafRemote: nkey_seed must be a user seed (SU...)")

    def __repr__(self) -> str:
        return redacted_repr(self)

    def to_dict(self) -> dict[str, Any]:
        url = self.url
        if self.user is not None and self.password is not None:
            scheme, rest = url.split("://", 1)
            userinfo = f"{quote(self.user, safe='')}:{quote(self.password, safe='')}"
            url = f"{scheme}://{userinfo}@{rest}"
        return {
            "urls": [url],
            "account": self.account,
            "nkey": self.nkey_seed,
            "credentials": None if self.credentials is None else str(self.credentials),
            "tls": None if self.tls is None else self.tls.to_dict(),
        }


@dataclass(frozen=True, kw_only=True)
class LeafNodeConfig:
    """The ``leafnodes {}`` block: a listener (hub side) and/or remotes (leaf side).

    Args:
        port: leaf listener port on ``host`` (hub side), or None for no listener.
        remotes: outgoing connections (leaf side).
        reconnect: seconds between attempts to re-establish a remote.
    """

    port: int | None = None
    host: str = "127.0.0.1"
    remotes: tuple[LeafRemote, ...] = ()
    reconnect: float = 0.25
    tls: TLSConfig | None = None

    def __post_init__(self) -> None:
        if self.port is None and not self.remotes:
            raise ConfigError("LeafNodeConfig needs a listener port, remotes, or both")
        if self.port is not None:
            _check_port("LeafNodeConfig.port", self.port)

    def to_dict(self) -> dict[str, Any]:
        block: dict[str, Any] = {}
        if self.port is not None:
            block["listen"] = f"{self.host}:{self.port}"
            block["tls"] = None if self.tls is None else self.tls.to_dict()
        if self.remotes:
            block["remotes"] = [r.to_dict() for r in self.remotes]
            block["reconnect"] = f"{int(self.reconnect * 1000)}ms"
        return {"leafnodes": block}


@dataclass(frozen=True, kw_only=True)
class OperatorConfig:
    """Operator (JWT) mode with a memory resolver preloaded with account JWTs.

    Build the JWTs with :mod:`oncestream.server._jwt` (see :class:`OperatorSetup`).
    """

    operator_jwt: str = field(repr=False)
    system_account: str
    account_jwts: Mapping[str, str] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "operator": self.operator_jwt,
            "system_account": self.system_account,
            "resolver": "MEMORY",
            "resolver_preload": dict(self.account_jwts),
        }
