"""Connection options shared by every oncestream component."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import urlsplit

from ._errors import ConfigError
from ._private import redact, redacted_repr

__all__ = ["ConnectOptions", "parse_bool", "parse_duration", "parse_positive_int"]

_DOMAIN_RE = re.compile(r"^[A-Za-z0-9_-]+$")
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_URL_SCHEMES = ("nats", "tls", "ws", "wss")


def parse_duration(name: str, value: str | float | int) -> float:
    """Parse ``"250ms"``, ``"2s"``, ``"1.5m"``, ``"1h"`` or a number of seconds.

    Raises:
        ConfigError: naming ``name`` when the value is not a non-negative duration.
    """
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be a duration like '2s' or '250ms', got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION_RE.match(value)
        if not match:
            raise ConfigError(
                f"{name} must be a duration like '2s', '250ms', '1.5m' or '1h', got {value!r}"
            )
        number, unit = float(match.group(1)), match.group(2) or "s"
        seconds = number * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[unit]
    if seconds < 0:
        raise ConfigError(f"{name} must not be negative, got {value!r}")
    return seconds


def parse_positive_int(name: str, value: str | int, *, allow_zero: bool = False) -> int:
    """Parse a strictly positive (or, with ``allow_zero``, non-negative) integer.

    Raises:
        ConfigError: naming ``name`` and the bad value.
    """
    try:
        number = int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {value!r}") from None
    if isinstance(value, bool) or number < 0 or (number == 0 and not allow_zero):
        allowed = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{name} must be an integer {allowed}, got {value!r}")
    return number


def parse_bool(name: str, value: str | bool) -> bool:
    """Parse ``true``/``false`` (case-insensitive) or a bool.

    Raises:
        ConfigError: naming ``name`` when the value is neither.
    """
    if isinstance(value, bool):
        return value
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ConfigError(f"{name} must be 'true' or 'false', got {value!r}")


def _check_readable(name: str, path: str | None) -> None:
    if path is not None and not os.path.isfile(path):
        raise ConfigError(f"{name} must name a readable file, got {path!r} (not found)")


@dataclass(frozen=True, kw_only=True)
class ConnectOptions:
    """How to reach NATS and which JetStream API to talk to.

    Secrets (``password``, ``token``, ``nkey_seed``, passwords and tokens in
    server URLs) are kept out of ``repr()``/``str()`` and error messages.

    Args:
        servers: one or more ``nats://host:port`` URLs (a bare ``host:port`` is accepted).
        user, password: user/password authentication (both or neither).
        token: token authentication.
        nkey_seed: an nkey seed (``SU...``) or a path to a file holding one.
        creds: path to a JWT ``.creds`` file (operator mode).
        tls_ca_file: CA bundle used to verify the server; enables TLS.
        tls_cert_file, tls_key_file: client certificate and key (both or neither).
        domain: JetStream domain; the API becomes ``$JS.<domain>.API``.
        api_prefix: explicit JetStream API prefix (e.g. ``JS.acc@hub.API``);
            mutually exclusive with ``domain``.
        connect_timeout: seconds allowed to establish the connection.
        request_timeout: seconds allowed for a JetStream API request.
        max_reconnect_attempts: reconnect attempts before giving up (-1 = forever).
        reconnect_wait: seconds between reconnect attempts.
        name: client name shown in server monitoring.

    Raises:
        ConfigError: on any invalid combination, naming the bad value.

    Example::

        opts = ConnectOptions(servers=("nats://127.0.0.1:4222",), domain="hub")
    """

    servers: tuple[str, ...] = ("nats://127.0.0.1:4222",)
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    nkey_seed: str | None = field(default=None, repr=False)
    creds: str | None = None
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    domain: str | None = None
    api_prefix: str | None = None
    connect_timeout: float = 5.0
    request_timeout: float = 5.0
    max_reconnect_attempts: int = 60
    reconnect_wait: float = 0.5
    name: str = "oncestream"

    def __post_init__(self) -> None:
        servers = self.servers
        if isinstance(servers, str):
            servers = tuple(s.strip() for s in servers.split(",") if s.strip())
        if not servers:
            raise ConfigError("servers must name at least one NATS URL, got none")
        normalised = tuple(self._normalise_url(url) for url in servers)
        object.__setattr__(self, "servers", normalised)
        if (self.user is None) != (self.password is None):
            raise ConfigError("user and password must be given together")
        methods = [
            name
            for name, value in (
                ("user/password", self.user),
                ("token", self.token),
                ("nkey_seed", self.nkey_seed),
                ("creds", self.creds),
            )
            if value is not None
        ]
        if len(methods) > 1:
            raise ConfigError(f"choose one authentication method, got {', '.join(methods)}")
        if self.domain is not None and self.api_prefix is not None:
            raise ConfigError("domain and api_prefix are mutually exclusive; give one")
        if self.domain is not None and not _DOMAIN_RE.match(self.domain):
            raise ConfigError(
                f"domain must contain only letters, digits, '-' and '_', got {self.domain!r}"
            )
        if self.api_prefix is not None and (
            not self.api_prefix or " " in self.api_prefix or self.api_prefix.endswith(".")
        ):
            raise ConfigError(
                "api_prefix must be a subject prefix like 'JS.acc@hub.API', "
                f"got {self.api_prefix!r}"
            )
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ConfigError("tls_cert_file and tls_key_file must be given together")
        for name in ("creds", "tls_ca_file", "tls_cert_file", "tls_key_file"):
            _check_readable(name, getattr(self, name))
        for name in ("connect_timeout", "request_timeout", "reconnect_wait"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
        if self.max_reconnect_attempts < -1:
            raise ConfigError(
                f"max_reconnect_attempts must be -1 (forever) or >= 0, "
                f"got {self.max_reconnect_attempts!r}"
            )

    def __repr__(self) -> str:
        return redacted_repr(self)

    @staticmethod
    def _normalise_url(url: str) -> str:
        candidate = url.strip()
        if "://" not in candidate:
            candidate = f"nats://{candidate}"
        parts = urlsplit(candidate)
        if parts.scheme not in _URL_SCHEMES or not parts.hostname:
            raise ConfigError(
                f"servers entry {ConnectOptions._redact(url)!r} is not a NATS URL; "
                f"expected e.g. 'nats://127.0.0.1:4222' (schemes: {', '.join(_URL_SCHEMES)})"
            )
        try:
            parts.port  # noqa: B018 - validates the port
        except ValueError:
            raise ConfigError(
                f"servers entry {ConnectOptions._redact(url)!r} has an invalid port"
            ) from None
        return candidate

    @staticmethod
    def _redact(url: str) -> str:
        """Return ``url`` with any password or token replaced, for messages and logs."""
        return redact(url)

    @property
    def safe_servers(self) -> tuple[str, ...]:
        """Server URLs with any embedded credentials redacted."""
        return tuple(self._redact(url) for url in self.servers)

    @property
    def js_prefix(self) -> str:
        """The JetStream API prefix requests go to (no trailing dot)."""
        if self.api_prefix:
            return self.api_prefix
        if self.domain:
            return f"$JS.{self.domain}.API"
        return "$JS.API"

    def replace(self, **changes: Any) -> ConnectOptions:
        """Return a copy with ``changes`` applied (validated again)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return ConnectOptions(**values)

    @classmethod
    def from_spark_options(cls, options: Mapping[str, str]) -> ConnectOptions:
        """Build options from Spark-style string options (case-insensitive keys).

        Recognised keys: ``servers``, ``user``, ``password``, ``token``,
        ``nkeySeed``, ``creds``, ``tlsCaFile``, ``tlsCertFile``, ``tlsKeyFile``,
        ``domain``, ``apiPrefix``, ``connectTimeout``, ``requestTimeout``.

        Raises:
            ConfigError: if ``servers`` is missing or a value is invalid.
        """
        lowered = {k.lower(): v for k, v in options.items()}
        if not lowered.get("servers"):
            raise ConfigError(
                "option 'servers' is required, e.g. .option('servers', 'nats://127.0.0.1:4222')"
            )
        mapping = {
            "user": "user",
            "password": "password",
            "token": "token",
            "nkeyseed": "nkey_seed",
            "creds": "creds",
            "tlscafile": "tls_ca_file",
            "tlscertfile": "tls_cert_file",
            "tlskeyfile": "tls_key_file",
            "domain": "domain",
            "apiprefix": "api_prefix",
        }
        kwargs: dict[str, Any] = {"servers": lowered["servers"]}
        for key, attr in mapping.items():
            if lowered.get(key):
                kwargs[attr] = lowered[key]
        for key, attr in (
            ("connectTimeout", "connect_timeout"),
            ("requestTimeout", "request_timeout"),
        ):
            if key.lower() in lowered:
                kwargs[attr] = parse_duration(key, lowered[key.lower()])
        return cls(**kwargs)
