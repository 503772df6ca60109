"""Stream, consumer and subject names, checked by nats-server's own rules.

The rules (nats-server ``server/jetstream.go`` ``isValidAssetName``,
``JSMaxNameLen``; ``server/sublist.go`` ``IsValidSubject``):

- a **stream or consumer name** is 1 to 255 bytes and contains none of
  space, tab, CR, LF, form feed, ``.``, ``*``, ``>``, ``/`` or ``\\``;
- a **subject** is ``.``-separated tokens, none empty and none containing
  whitespace; ``*`` (a whole token) matches one token and ``>`` (a whole,
  last token) matches the rest. A **publish subject** has no wildcard token.

Every option, flag and constructor that takes such a name checks it here, so
a bad name fails at once with a :class:`~oncestream.ConfigError` naming the
option and the rule instead of timing out against the server.
"""

from __future__ import annotations

from ._errors import ConfigError

__all__ = [
    "MAX_NAME_LEN",
    "check_consumer_name",
    "check_publish_subject",
    "check_stream_name",
    "check_subject_filter",
    "is_valid_name",
    "is_valid_subject",
    "subject_matches",
    "subjects_overlap",
]

#: nats-server's ``JSMaxNameLen`` (bytes).
MAX_NAME_LEN = 255

_NAME_FORBIDDEN = frozenset(" \t\r\n\f.*>/\\")
_SUBJECT_WHITESPACE = frozenset(" \t\r\n\f")
_NAME_RULE = f"1-{MAX_NAME_LEN} bytes without spaces, tabs, line breaks, '.', '*', '>', '/' or '\\'"
_FILTER_RULE = (
    "dot-separated tokens, none empty and none containing whitespace; "
    "'*' matches one token and '>' (last token only) the rest"
)
_PUBLISH_RULE = "dot-separated tokens, none empty and none containing whitespace, no wildcards"


def is_valid_name(name: object) -> bool:
    """Whether ``name`` is a valid stream or consumer name (nats-server ``isValidAssetName``)."""
    return (
        isinstance(name, str)
        and 0 < len(name.encode()) <= MAX_NAME_LEN
        and _NAME_FORBIDDEN.isdisjoint(name)
    )


def is_valid_subject(subject: object, *, wildcards: bool = True) -> bool:
    """Whether ``subject`` is a valid subject (a filter when ``wildcards``, else a literal)."""
    if not isinstance(subject, str) or not subject:
        return False
    tokens = subject.split(".")
    last = len(tokens) - 1
    for index, token in enumerate(tokens):
        if not token or not _SUBJECT_WHITESPACE.isdisjoint(token):
            return False
        if token in ("*", ">") and (not wildcards or (token == ">" and index != last)):
            return False
    return True


def _show(value: object) -> str:
    return repr(value) if isinstance(value, str) else f"{value!r} ({type(value).__name__})"


def _checked(valid: bool, value: object, what: str, kind: str, rule: str) -> str:
    """Return ``value`` when ``valid``, else raise naming ``what``, the value, ``kind`` and rule."""
    if not valid:
        raise ConfigError(f"{what}: {_show(value)} is not a valid {kind} ({rule})")
    assert isinstance(value, str)
    return value


def check_stream_name(value: object, what: str = "stream") -> str:
    """Return ``value`` if it is a valid stream name.

    Args:
        value: the name to check.
        what: how the caller calls it, for the message (``"--stream"``, ``"option 'stream'"``).

    Raises:
        ConfigError: naming ``what``, the value and the rule.

    Example::

        check_stream_name("ORDERS", "--stream")  # -> "ORDERS"
    """
    return _checked(is_valid_name(value), value, what, "stream name", _NAME_RULE)


def check_consumer_name(value: object, what: str = "consumer") -> str:
    """Return ``value`` if it is a valid consumer (durable) name.

    Raises:
        ConfigError: naming ``what``, the value and the rule.
    """
    return _checked(is_valid_name(value), value, what, "consumer name", _NAME_RULE)


def check_subject_filter(value: object, what: str = "subject") -> str:
    """Return ``value`` if it is a valid subject or subject filter (wildcards allowed).

    Raises:
        ConfigError: naming ``what``, the value and the rule.
    """
    return _checked(is_valid_subject(value, wildcards=True), value, what, "subject", _FILTER_RULE)


def check_publish_subject(value: object, what: str = "subject") -> str:
    """Return ``value`` if it is a valid subject to publish to (no wildcards).

    Raises:
        ConfigError: naming ``what``, the value and the rule.
    """
    valid = is_valid_subject(value, wildcards=False)
    return _checked(valid, value, what, "subject to publish to", _PUBLISH_RULE)


def subject_matches(pattern: str, subject: str) -> bool:
    """True when ``subject`` is captured by ``pattern`` (``*`` one token, ``>`` one or more)."""
    want, have = pattern.split("."), subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or (token != "*" and token != have[i]):
            return False
    return len(want) == len(have)


def subjects_overlap(a: str, b: str) -> bool:
    """True when some subject matches both patterns ``a`` and ``b``."""
    left, right = a.split("."), b.split(".")
    for i in range(max(len(left), len(right))):
        x = left[i] if i < len(left) else None
        y = right[i] if i < len(right) else None
        if x == ">" or y == ">":
            return x is not None and y is not None
        if x is None or y is None:
            return False
        if x != y and "*" not in (x, y):
            return False
    return True
