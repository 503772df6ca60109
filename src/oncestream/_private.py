"""Secrets: files written private from the start, and text redacted before it is shown.

Every writer of a file that may hold a secret (server configs, the topology
state file, ``.creds`` and key files) goes through :func:`write_private`: the
file is created with mode 0600 by ``os.open`` (no window in which another user
could read it) inside a directory made 0700 by :func:`private_dir`.

Every ``repr``/``str``/error message that could show a URL or DSN goes through
:func:`redact`, which hides passwords in URL user-info and ``password=`` /
``token=`` key-value pairs.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any

__all__ = ["private_dir", "redact", "redacted_repr", "write_private"]

_USERINFO_RE = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<info>[^@/?#\s]*)@")
_KEYVALUE_RE = re.compile(
    r"(?P<key>\b(?:password|passwd|pwd|token|secret|seed|nkey_seed|nkeyseed|sslpassword)\s*=\s*)"
    r"(?P<value>'[^']*'|\"[^\"]*\"|[^\s&;,]+)",
    re.IGNORECASE,
)


_TOKEN_SCHEMES = ("nats://", "tls://", "ws://", "wss://")


def _userinfo(match: re.Match[str]) -> str:
    scheme, info = match.group("scheme"), match.group("info")
    if ":" in info:
        user = info.split(":", 1)[0]
        return f"{scheme}{user}:***@"
    # A bare user-info is a token in a NATS URL (nats://TOKEN@host), else a user name.
    return f"{scheme}***@" if scheme.lower() in _TOKEN_SCHEMES else match.group(0)


def redact(text: str) -> str:
    """``text`` with every password/token in URLs and ``key=value`` pairs replaced by ``***``.

    Example::

        >>> redact("postgresql://app:s3cret@db/orders")
        'postgresql://app:***@db/orders'
        >>> redact("host=db password=s3cret dbname=x")
        'host=db password=*** dbname=x'
    """
    text = _USERINFO_RE.sub(_userinfo, text)
    return _KEYVALUE_RE.sub(lambda m: f"{m.group('key')}***", text)


def redacted_repr(obj: Any) -> str:
    """A dataclass repr (fields with ``repr=True``) with every secret in it redacted.

    Use as ``def __repr__(self) -> str: return redacted_repr(self)`` on any
    dataclass holding URLs or DSNs that may carry a password.
    """
    parts = [f"{f.name}={getattr(obj, f.name)!r}" for f in dataclasses.fields(obj) if f.repr]
    return redact(f"{type(obj).__qualname__}({', '.join(parts)})")


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
