"""Secrets: files written private from the start, and secrets kept out of what is shown.

Every writer of a file that may hold a secret (server configs, the topology
state file, ``.creds`` and key files) goes through :func:`write_private`: the
file is created with mode 0600 by ``os.open`` (no window in which another user
could read it) inside a directory made 0700 by :func:`private_dir`.

Every ``repr``/``str``/error message that shows a URL or DSN shows it through
:func:`redact_url`, which parses it (:func:`split_url`, or libpq's ``key=value``
form) and rebuilds it without the password, token or secret query parameter;
never a pattern over the text, so a password holding ``/ # ? @ :`` or spaces
cannot end the match early. Text that oncestream did not build (a driver's or
nats-py's exception message) is passed through :func:`scrub` with the secrets
the caller knows before it is shown or logged.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus, unquote

__all__ = [
    "UrlParts",
    "private_dir",
    "redact_url",
    "redacted_repr",
    "scrub",
    "split_url",
    "url_secrets",
    "write_private",
]

#: Keys whose values are secrets, in URL query strings and libpq ``key=value`` strings.
SECRET_KEYS = frozenset(
    {
        "password",
        "passwd",
        "pass",
        "pwd",
        "token",
        "auth_token",
        "secret",
        "seed",
        "nkey_seed",
        "nkeyseed",
        "sslpassword",
    }
)
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(//)?")
_CONNINFO_PAIR = re.compile(
    r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*('(?:[^'\\]|\\.)*'|(?:[^\s'\\]|\\.)+)\s*"
)
_SECRET_ASSIGN = re.compile(rf"(?:{'|'.join(sorted(SECRET_KEYS))})\s*=", re.IGNORECASE)
_HIDDEN = "***"
_NOT_SHOWN = "(not shown: it may hold a secret)"


def _token_scheme(scheme: str) -> bool:
    """Whether a lone user-info is a token: NATS URLs (nats, tls, ws, wss, nats-leaf...)."""
    lowered = scheme.lower()
    return lowered in ("tls", "ws", "wss") or lowered.startswith("nats")


@dataclasses.dataclass(frozen=True)
class UrlParts:
    """A URL split structurally, every part as written (still percent-encoded).

    The user-info ends at the *last* ``@`` of the URL, so a password holding an
    unencoded ``@ / ? # :`` stays whole in :attr:`password` (for non-NATS
    schemes only when the user name holds none of ``/ ? #``: then the ``@``
    belongs to a path, as in ``sqlite:////data/a@b.db``). The host part ends
    at the first ``/``, ``?`` or ``#`` after it.
    """

    scheme: str
    slashes: str
    user: str | None
    password: str | None
    host: str
    tail: str

    @property
    def token(self) -> str | None:
        """The token of a NATS URL (``nats://TOKEN@host``), else None."""
        if self.password is None and self.user is not None and _token_scheme(self.scheme):
            return self.user
        return None

    @property
    def hostname(self) -> str:
        """The host without the port (brackets of an IPv6 literal removed)."""
        host = self.host
        if host.startswith("["):
            return host[1 : host.find("]")] if "]" in host else host[1:]
        return host.rpartition(":")[0] if ":" in host else host

    @property
    def port(self) -> str | None:
        """The port as written, or None when the host part has none."""
        host = self.host
        if host.startswith("["):
            _, _, after = host.partition("]")
            return after[1:] if after.startswith(":") else None
        return host.rpartition(":")[2] if ":" in host else None

    def join(self, *, userinfo: str | None = None, tail: str | None = None) -> str:
        """The URL again, with ``userinfo`` (without ``@``; "" for none) and ``tail`` replaced."""
        info = self._userinfo() if userinfo is None else userinfo
        at = "@" if info else ""
        rest = self.tail if tail is None else tail
        return f"{self.scheme}:{self.slashes}{info}{at}{self.host}{rest}"

    def _userinfo(self) -> str:
        if self.user is None:
            return ""
        return self.user if self.password is None else f"{self.user}:{self.password}"

    def redacted(self) -> str:
        """The URL with the password, a NATS token and secret query values as ``***``."""
        if self.user is None:
            info = ""
        elif self.password is not None:
            info = f"{self.user}:{_HIDDEN}"
        elif self.token is not None:
            info = _HIDDEN
        else:
            info = self.user
        return self.join(userinfo=info, tail=_redact_query(self.tail))

    def secrets(self) -> tuple[str, ...]:
        """The password or token and secret query values, as written and decoded."""
        found = [s for s in (self.password, self.token) if s]
        query = self.tail.partition("?")[2]
        for pair in query.split("&"):
            key, sep, value = pair.partition("=")
            if sep and unquote(key).strip().lower() in SECRET_KEYS and value:
                found.append(value)
        return tuple(dict.fromkeys([*found, *(unquote(s) for s in found)]))


def split_url(text: str) -> UrlParts | None:
    """Split ``scheme:[//][user[:password]@]host[:port][/path][?query][#fragment]``.

    Returns None when ``text`` has no scheme (a plain path, or libpq's
    ``key=value`` form). Nothing is decoded; see :class:`UrlParts`.

    Example::

        >>> split_url("nats://u:pa/ss@h:4222").password
        'pa/ss'
    """
    match = _SCHEME_RE.match(text)
    if match is None:
        return None
    scheme, slashes = match.group(1), match.group(2) or ""
    rest = text[match.end() :]
    user: str | None = None
    password: str | None = None
    at = rest.rfind("@")
    if at >= 0:
        info = rest[:at]
        name, colon, secret = info.partition(":")
        if _token_scheme(scheme) or not any(c in name for c in "/?#"):
            user, password = name, (secret if colon else None)
            rest = rest[at + 1 :]
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    return UrlParts(scheme, slashes, user, password, rest[:end], rest[end:])


def _redact_query(tail: str) -> str:
    path, sep, query = tail.partition("?")
    if not sep:
        return tail
    pairs = []
    for pair in query.split("&"):
        key, eq, _ = pair.partition("=")
        secret = eq and unquote(key).strip().lower() in SECRET_KEYS
        pairs.append(f"{key}={_HIDDEN}" if secret else pair)
    return f"{path}?{'&'.join(pairs)}"


def parse_conninfo(text: str) -> list[tuple[str, str]] | None:
    """libpq's ``key=value`` connection string as pairs (values as written), or None."""
    pairs = []
    pos = 0
    while pos < len(text):
        match = _CONNINFO_PAIR.match(text, pos)
        if match is None:
            return None
        pairs.append((match.group(1), match.group(2)))
        pos = match.end()
    return pairs or None


def redact_url(text: str) -> str:
    """``text`` (one URL, DSN or libpq ``key=value`` string) without its secrets, for display.

    The value is parsed, then printed again with ``***`` for the password, a
    NATS token (``nats://TOKEN@host``) and secret query parameters or keys
    (``password``, ``sslpassword``, ``token``...). A plain path is returned as
    is; a value that cannot be parsed but assigns a secret key is not shown.

    Example::

        >>> redact_url("postgresql://app:s3/cr#t@db/orders")
        'postgresql://app:***@db/orders'
        >>> redact_url("host=db password='a b' dbname=x")
        'host=db password=*** dbname=x'
    """
    parts = split_url(text)
    if parts is not None:
        return parts.redacted()
    pairs = parse_conninfo(text)
    if pairs is not None:
        return " ".join(f"{k}={_HIDDEN if k.lower() in SECRET_KEYS else v}" for k, v in pairs)
    return _NOT_SHOWN if _SECRET_ASSIGN.search(text) else text


def url_secrets(text: str) -> tuple[str, ...]:
    """The secrets a URL or libpq ``key=value`` string holds, as written and decoded."""
    parts = split_url(text)
    if parts is not None:
        return parts.secrets()
    found = []
    for key, value in parse_conninfo(text) or ():
        if key.lower() in SECRET_KEYS:
            found.append(value)
            if value.startswith("'") and value.endswith("'") and len(value) > 1:
                found.append(re.sub(r"\\(.)", r"\1", value[1:-1]))
    return tuple(found)


def _forms(secret: str) -> set[str]:
    forms = {secret, unquote(secret), quote(secret, safe=""), quote(secret), quote_plus(secret)}
    forms |= {json.dumps(secret)[1:-1], repr(secret)[1:-1]}
    return forms | {f.lower() for f in forms}


def scrub(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every known secret (and its percent-/JSON-/repr-encoded forms) as ``***``.

    For messages oncestream did not build itself (a driver's or nats-py's
    exception text) that might echo a URL or DSN. Secrets shorter than 3
    characters are left alone (they would erase ordinary words).
    """
    forms = {f for s in secrets if s for f in _forms(s) if len(f) >= 3}
    if not forms:
        return text
    pattern = "|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True))
    return re.sub(pattern, _HIDDEN, text, flags=re.IGNORECASE)


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return repr(redact_url(value))
    if isinstance(value, tuple | list):
        items = [_shown(v) for v in value]
        if isinstance(value, list):
            return f"[{', '.join(items)}]"
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    return repr(value)


def redacted_repr(obj: Any) -> str:
    """A dataclass repr (fields with ``repr=True``), every URL or DSN in it redacted.

    String fields (and strings in tuple/list fields) are shown through
    :func:`redact_url`; other values by their own ``repr``. Use as
    ``def __repr__(self) -> str: return redacted_repr(self)`` on any dataclass
    holding URLs or DSNs that may carry a password.
    """
    parts = [f"{f.name}={_shown(getattr(obj, f.name))}" for f in dataclasses.fields(obj) if f.repr]
    return f"{type(obj).__qualname__}({', '.join(parts)})"


def private_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (and missing parents) with mode 0700; tighten it to 0700 if it exists.

    Returns:
        The directory as a Path.

    Raises:
        NotADirectoryError: ``path`` (or a parent) exists and is not a directory;
            nothing is changed then.
    """
    directory = Path(path)
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(20, "Not a directory", str(directory))
    missing = []
    probe = directory
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for item in reversed(missing):
        try:
            item.mkdir(mode=0o700)
        except FileExistsError:
            pass
    if directory.stat().st_mode & 0o077:
        directory.chmod(0o700)
    return directory


def write_private(path: str | os.PathLike[str], content: str | bytes) -> Path:
    """Write ``content`` to ``path`` as a 0600 file in a 0700 directory.

    The file is opened with mode 0600 (and chmod-ed before any byte is
    written when it already existed), so no reader ever sees it more open.
    """
    target = Path(path)
    private_dir(target.parent)
    data = content.encode() if isinstance(content, str) else content
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
    finally:
        os.close(fd)
    return target
