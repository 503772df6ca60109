"""The options layer: connection options and the value parsers every component shares.

One parser per kind of value, used by the Python API, the CLI and the Spark
options alike: :func:`parse_duration`, :func:`parse_int`, :func:`parse_positive_int`,
:func:`parse_rate`, :func:`parse_bool`, :func:`parse_time`, :func:`parse_epoch_millis`
here; stream, consumer and subject names in
:mod:`oncestream._names`; database URLs in :mod:`oncestream._dsn`. Spark
option *names* live only under :mod:`oncestream.spark`.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import unquote

from ._credentials import check_creds_file, check_nkey_seed, check_tls_files
from ._errors import ConfigError
from ._private import redact_url, redacted_repr, split_url

__all__ = [
    "DEFAULT_SERVER",
    "INT64_MAX",
    "MAX_DURATION",
    "MAX_RATE",
    "MIN_RATE",
    "ConnectOptions",
    "parse_bool",
    "parse_duration",
    "parse_epoch_millis",
    "parse_int",
    "parse_positive_int",
    "parse_rate",
    "parse_time",
    "rfc3339",
    "seconds_to_ns",
]

#: Where every component connects when no server is given.
DEFAULT_SERVER = "nats://127.0.0.1:4222"

_DOMAIN_RE = re.compile(r"^[A-Za-z0-9_-]+$")
_DURATION_AGO = re.compile(r"^\d+(\.\d+)?(ms|s|m|h)$")
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_URL_SCHEMES = ("nats", "tls", "ws", "wss")
_TLS_SCHEMES = ("tls", "wss")

#: The largest integer the JetStream API takes (Go's int64: sequences, counts, limits).
INT64_MAX = 2**63 - 1
#: The longest duration the JetStream API takes: Go's ``time.Duration`` is int64
#: nanoseconds (about 292 years). Python's timeouts and ``timedelta`` hold it too.
MAX_DURATION = INT64_MAX // 1_000_000_000
#: The slowest and fastest ``rate`` (per second): slower than one every 1,000 s is
#: a typo (``1e-9`` would wait 31 years before the second record), not a pace.
MIN_RATE = 0.001
MAX_RATE = 1e9


def parse_duration(name: str, value: str | float | int) -> float:
    """The one duration parser: a number of seconds, or ``"500ms"``, ``"2s"``, ``"1.5m"``, ``"1h"``.

    Every option that takes a time (timeouts, waits, windows, backoffs, in
    Python, on the CLI and as Spark options) goes through this function, so
    all of them accept the same forms. A string without a unit is seconds.

    Raises:
        ConfigError: naming ``name`` when the value is not a finite, non-negative duration.

    Example::

        parse_duration("ack_timeout", "250ms")  # -> 0.25
    """
    allowed = "a number of seconds or a string like '500ms', '2s', '1.5m' or '1h'"
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be a duration ({allowed}), got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION_RE.match(value)):
        number, unit = float(match.group(1)), match.group(2) or "s"
        seconds = number * _UNITS[unit]
    else:
        raise ConfigError(f"{name} must be a duration ({allowed}), got {value!r}")
    if not math.isfinite(seconds):
        raise ConfigError(f"{name} must be a finite duration ({allowed}), got {value!r}")
    if seconds < 0:
        raise ConfigError(f"{name} must not be negative, got {value!r}")
    if seconds > MAX_DURATION:
        raise ConfigError(
            f"{name} must be at most {MAX_DURATION}s (about 292 years: the longest duration "
            f"the JetStream API takes, int64 nanoseconds), got {value!r}"
        )
    return seconds


def seconds_to_ns(seconds: float) -> int:
    """Seconds as the integer nanoseconds the JetStream API takes."""
    return round(seconds * 1_000_000_000)


def parse_int(
    name: str, value: str | int, *, minimum: int | None = None, maximum: int = INT64_MAX
) -> int:
    """The one integer parser: an integer from ``minimum`` to ``maximum`` (int64 by default).

    Every integer that reaches the JetStream API (sequences, counts, limits) is a
    Go int64 there; a larger one fails to encode or is refused by the server, so
    it is refused here, naming the value.

    Raises:
        ConfigError: naming ``name``, the bad value and the range allowed.

    Example::

        parse_int("--max-deliver", "-1", minimum=-1)  # -> -1
    """
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    try:
        number = value if isinstance(value, int) else int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {value!r}") from None
    low = -INT64_MAX - 1 if minimum is None else minimum
    if not low <= number <= maximum:
        if number > maximum and maximum == INT64_MAX:
            allowed = f"at most {INT64_MAX} (a 64-bit integer, what the JetStream API takes)"
        elif minimum is None:
            allowed = f"at most {maximum}"
        elif number < low:
            allowed = f">= {low}"
        else:
            allowed = f"from {low} to {maximum}"
        raise ConfigError(f"{name} must be an integer {allowed}, got {value!r}")
    return number


def parse_positive_int(
    name: str, value: str | int, *, allow_zero: bool = False, maximum: int = INT64_MAX
) -> int:
    """Parse a strictly positive (or, with ``allow_zero``, non-negative) integer.

    At most ``maximum`` (int64 by default), see :func:`parse_int`.

    Raises:
        ConfigError: naming ``name`` and the bad value.
    """
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    number = parse_int(name, value, maximum=maximum)
    if number < 0 or (number == 0 and not allow_zero):
        allowed = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{name} must be an integer {allowed}, got {value!r}")
    return number


def parse_rate(name: str, value: str | float, *, allow_zero: bool = False) -> float:
    """A pace per second, from :data:`MIN_RATE` to :data:`MAX_RATE` (``allow_zero``: 0 = none).

    Raises:
        ConfigError: naming ``name``, the bad value and the range allowed.
    """
    allowed = f"a number per second from {MIN_RATE:g} (one every 1,000 s) to {MAX_RATE:,.0f}"
    if allow_zero:
        allowed += ", or 0 for no limit"
    try:
        rate = float(value) if not isinstance(value, bool) else math.nan
    except ValueError:
        rate = math.nan
    if rate == 0 and allow_zero:
        return 0.0
    if not MIN_RATE <= rate <= MAX_RATE:  # also refuses nan
        raise ConfigError(f"{name} must be {allowed}, got {value!r}")
    return rate


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
    server URLs) are kept out of ``repr()``/``str()`` and error messages. The
    ``creds``, ``nkey_seed`` and ``tls_*`` files are checked here (a ``.creds``
    file needs a user JWT and seed, a seed its checksum, TLS files must load).

    Args:
        servers: one or more ``nats://host:port`` URLs (a bare ``host:port`` is accepted),
            as a tuple, or as one comma-separated string (a ``,`` in a password is
            then ``%2C``).
            Credentials may be given in the URLs (``nats://user:password@host``,
            ``nats://token@host``), percent-encoded, the same for every server;
            they are then the authentication method.
        user, password: user/password authentication (both or neither).
        token: token authentication.
        nkey_seed: an nkey seed (``SU...``) or a path to a file holding one.
        creds: path to a JWT ``.creds`` file (operator mode).
        tls_ca_file: CA bundle (PEM) used to verify the server; requires TLS.
        tls_cert_file, tls_key_file: client certificate and key (both or neither); require TLS.
        domain: JetStream domain; the API becomes ``$JS.<domain>.API``.
        api_prefix: explicit JetStream API prefix (e.g. ``JS.acc@hub.API``);
            mutually exclusive with ``domain``.
        connect_timeout: time allowed to establish the connection (seconds or
            a duration string like ``"2s"``, see :func:`parse_duration`).
        request_timeout: time allowed for a JetStream API request.
        max_reconnect_attempts: reconnect attempts before giving up (-1 = forever).
        reconnect_wait: time between reconnect attempts.
        name: client name shown in server monitoring.

    TLS is required (see :attr:`tls_required`) when a server URL is ``tls://``
    or ``wss://`` or a ``tls_*`` file is given: then every server of the
    connection, on every connect and reconnect, must do TLS, and a server that
    does not is refused before any credential is sent (:class:`TlsNotOffered`).

    Raises:
        ConfigError: on any invalid combination, naming the bad value.

    Example::

        opts = ConnectOptions(servers=("nats://127.0.0.1:4222",), domain="hub")
    """

    servers: tuple[str, ...] = (DEFAULT_SERVER,)
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
        listed = False
        if isinstance(servers, str):
            listed = "," in servers and "@" in servers
            servers = tuple(s.strip() for s in servers.split(",") if s.strip())
        normalised = tuple(
            self._normalise_url(url, entry=i + 1 if listed else 0) for i, url in enumerate(servers)
        )
        if not normalised:
            raise ConfigError("servers must name at least one NATS URL, got none")
        object.__setattr__(self, "servers", normalised)
        if (self.user is None) != (self.password is None):
            raise ConfigError("user and password must be given together")
        in_urls = {self._url_credentials(url) for url in normalised}
        if len(in_urls) > 1:
            raise ConfigError(
                "servers carry different credentials; give the same credentials in every URL, "
                "or none in the URLs and user/password or token once"
            )
        methods = [
            name
            for name, value in (
                ("credentials in the server URL", in_urls.pop() != (None, None, None)),
                ("user/password", self.user),
                ("token", self.token),
                ("nkey_seed", self.nkey_seed),
                ("creds", self.creds),
            )
            if value not in (None, False)
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
        check_tls_files(self.tls_ca_file, self.tls_cert_file, self.tls_key_file)
        if self.creds is not None:
            check_creds_file(self.creds)
        if self.nkey_seed is not None:
            check_nkey_seed(self.nkey_seed)
        plain_ws = [url for url in normalised if url.lower().startswith("ws://")]
        if plain_ws and self.tls_required:
            raise ConfigError(
                f"servers entry {redact_url(plain_ws[0])!r} is plain WebSocket (ws://) but TLS "
                "was asked for (a tls:// or wss:// URL, or a TLS file option); use wss://"
            )
        for name in ("connect_timeout", "request_timeout", "reconnect_wait"):
            value = parse_duration(name, getattr(self, name))
            if value <= 0:
                raise ConfigError(f"{name} must be a duration > 0, got {getattr(self, name)!r}")
            object.__setattr__(self, name, value)
        if self.max_reconnect_attempts < -1:
            raise ConfigError(
                f"max_reconnect_attempts must be -1 (forever) or >= 0, "
                f"got {self.max_reconnect_attempts!r}"
            )

    def __repr__(self) -> str:
        return redacted_repr(self)

    @staticmethod
    def _normalise_url(url: str, *, entry: int = 0) -> str:
        candidate = url.strip()
        if "://" not in candidate:
            candidate = f"nats://{candidate}"
        parts = split_url(candidate)
        label = f"servers entry {redact_url(candidate)!r}"
        if entry:
            # A piece of a comma-separated list holding credentials may be part of a
            # password that contained a ',': never print it.
            label = (
                f"servers entry #{entry} (not shown: the comma-separated list holds credentials)"
            )
        if (
            parts is None
            or parts.scheme.lower() not in _URL_SCHEMES
            or parts.slashes != "//"
            or not parts.hostname
        ):
            raise ConfigError(
                f"{label} is not a NATS URL; "
                f"expected e.g. {DEFAULT_SERVER!r} (schemes: {', '.join(_URL_SCHEMES)})"
            )
        port = parts.port
        if port and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
            raise ConfigError(f"{label} has an invalid port (1..65535)")
        return candidate

    @staticmethod
    def _url_credentials(url: str) -> tuple[str | None, str | None, str | None]:
        """``(user, password, token)`` given in ``url``, percent-decoded."""
        parts = split_url(url)
        if parts is None or parts.user is None:
            return None, None, None
        if parts.token is not None:
            return None, None, unquote(parts.token)
        if parts.password is None:
            return unquote(parts.user), None, None
        return unquote(parts.user), unquote(parts.password), None

    @property
    def safe_servers(self) -> tuple[str, ...]:
        """Server URLs with any embedded credentials redacted."""
        return tuple(redact_url(url) for url in self.servers)

    @property
    def tls_required(self) -> bool:
        """Whether TLS was asked for: a ``tls://``/``wss://`` URL or a ``tls_*`` file option."""
        schemes = {url.partition(":")[0].lower() for url in self.servers}
        return (
            bool(schemes & set(_TLS_SCHEMES))
            or self.tls_ca_file is not None
            or self.tls_cert_file is not None
        )

    def client_settings(self) -> tuple[list[str], dict[str, str | None]]:
        """What nats-py gets: the server URLs without credentials, and the credentials.

        Credentials in the URLs move to nats-py's ``user``/``password``/``token``
        arguments, percent-decoded, so no URL nats-py parses (or echoes in an
        error) holds a secret, and a password with ``/ # ? @ :`` works.
        """
        urls = []
        for url in self.servers:
            parts = split_url(url)
            assert parts is not None  # validated in __post_init__
            urls.append(parts.join(userinfo=""))
        user, password, token = self._url_credentials(self.servers[0])
        return urls, {
            "user": self.user if self.user is not None else user,
            "password": self.password if self.password is not None else password,
            "token": self.token if self.token is not None else token,
        }

    def secrets(self) -> tuple[str, ...]:
        """Every secret of these options (to scrub third-party messages; never shown)."""
        found = [self.password, self.token, self.nkey_seed]
        for url in self.servers:
            parts = split_url(url)
            if parts is not None:
                found += parts.secrets()
        return tuple(s for s in found if s)

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


def parse_time(
    name: str,
    value: str | datetime,
    *,
    now: datetime | None = None,
    ago: bool = True,
    also: str = "",
    hint: str = "",
) -> datetime:
    """A time a user gave, as an aware datetime: the one parser of such times (the CLI's
    flags, the Spark source's options and the Python API all call it).

    The rule (docs/operations.md, "Times"): ISO 8601 with a time zone
    (``2026-11-22T15:00:00Z``, ``2026-11-22T17:00:00+02:00``) or an aware ``datetime``;
    with ``ago``, also a duration ago (``10m``, ``2h``). A time without a zone is
    refused, never guessed: read as UTC or as the machine's local time, a consumer
    reset or a start position would be off by hours, skipping or repeating messages.

    Args:
        name: the flag, option or argument, named in errors.
        value: what the user gave.
        now: the moment a duration ago counts from (default: now).
        ago: accept a duration ago.
        also: other forms the caller accepts (named in the error; it parses them itself).
        hint: appended to the error of a value in no accepted form.

    Raises:
        ConfigError: naming ``name`` and the value: in no accepted form, without a zone
            (a naive ``datetime`` too), or a duration ago before year 1.

    Example::

        parse_time("--to-time", "2026-11-22T15:00:00Z")  # 2026-11-22 15:00:00+00:00
        parse_time("--from", "10m")                      # ten minutes ago
    """
    if isinstance(value, datetime):
        if value.utcoffset() is None:
            raise ConfigError(
                f"{name} needs a time zone, got the naive datetime {value!r}: give it one "
                "(tzinfo=datetime.UTC, or an offset)"
            )
        return _in_range(name, value, value)
    forms = ["an ISO 8601 time with a zone (2026-11-22T15:00:00Z)"]
    if ago:
        forms.append("a duration ago (10m, 2h)")
    if also:
        forms.append(also)
    text = value.strip() if isinstance(value, str) else ""
    if ago and _DURATION_AGO.match(text):
        seconds = parse_duration(name, text)
        try:
            return (now or datetime.now(UTC)) - timedelta(seconds=seconds)
        except OverflowError:
            raise ConfigError(f"{name}: {value!r} ago is before year 1") from None
    try:
        # RFC 3339 allows a lowercase z; fromisoformat reads only Z.
        parsed = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in "zZ" else text)
    except ValueError:
        raise ConfigError(
            f"{name} must be {' or '.join(forms)}, got {value!r}" + (f" ({hint})" if hint else "")
        ) from None
    if not _TIME_OF_DAY.search(text):
        # fromisoformat reads a date alone as midnight and drops an offset after it.
        raise ConfigError(
            f"{name} needs a time of day and a zone, got the date {value!r}: give both "
            "(2026-11-22T00:00:00Z for midnight UTC)"
        )
    if parsed.utcoffset() is None:
        raise ConfigError(
            f"{name} needs a time zone, got {value!r}: add one (a trailing Z for UTC, or an "
            f"offset like +02:00); a time without one could be UTC or local time"
        )
    return _in_range(name, parsed, value)


#: A date followed by a time of day (what ISO 8601 separates with T, or RFC 3339 a space).
_TIME_OF_DAY = re.compile(r"\d[Tt ]\d")


def _in_range(name: str, moment: datetime, value: object) -> datetime:
    """``moment`` when it is a time in UTC too (year 1 to 9999 there); else ConfigError."""
    try:
        moment.astimezone(UTC)
    except OverflowError:
        raise ConfigError(
            f"{name}: {value!r} is outside the times that can be given "
            "(0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z in UTC)"
        ) from None
    return moment


def parse_epoch_millis(name: str, value: str | int) -> datetime:
    """Milliseconds since the epoch (Kafka's timestamps) as an aware UTC datetime.

    Raises:
        ConfigError: naming ``name`` when the value is not an integer from 0 to
            253402300799999 (9999-12-31T23:59:59.999Z, the last time a datetime holds).
    """
    millis = parse_int(name, value, minimum=0, maximum=_LAST_MILLIS)
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=millis)


#: 9999-12-31T23:59:59.999Z in milliseconds since the epoch.
_LAST_MILLIS = 253_402_300_799_999


def server_time(text: str) -> datetime:
    """A time the server wrote (RFC 3339, nanoseconds cut to microseconds), as aware UTC.

    The reverse of :func:`rfc3339`: what ``STREAM.MSG.GET`` answers, ``Nats-Time-Stamp``
    and the ``time`` of a stored message carry.

    Example::

        server_time("2026-01-01T00:00:00.250000001Z")  # 2026-01-01 00:00:00.250000+00:00
    """
    main, _, rest = text.partition(".")
    frac = "".join(c for c in rest if c.isdigit())[:6]
    moment = datetime.strptime(main.rstrip("Z"), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    return moment.replace(microsecond=int(frac.ljust(6, "0")) if frac else 0)


def rfc3339(moment: datetime) -> str:
    """The time as the JetStream API wants it (UTC, nanosecond-free RFC 3339)."""
    # %Y is not zero-padded on every platform (year 1 -> "1"); RFC 3339 needs 4 digits.
    utc = moment.astimezone(UTC)
    return f"{utc.year:04d}" + utc.strftime("-%m-%dT%H:%M:%S.%fZ")
