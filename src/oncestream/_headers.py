"""NATS message headers: every ``Nats-*`` name once, the one block parser, the msg-id rule.

A header block is ``NATS/1.0[ status]\\r\\n`` then ``Name: value\\r\\n`` lines
and a blank line. Three readers look at the same bytes and must agree:

- **nats-server** (``server/client.go`` ``getHeaderKeyIndex``/``sliceHeader``)
  acts on the *first* line whose name matches exactly (case-sensitive) and
  that follows a CRLF; it skips the spaces after the colon and takes the
  value up to the next CRLF, trailing whitespace included. An empty
  ``Nats-Msg-Id`` means "no id": nothing is de-duplicated.
- **client libraries** (nats-py, nats.go) trim whitespace at both ends of
  every value when they write and when they read.
- **oncestream** itself: :func:`header_value` reads exactly as the server
  does, and :func:`check_msg_id` refuses every id on which the three could
  disagree, so an id we write is stored, de-duplicated and read back as the
  same string everywhere (see docs/publishing.md, "Message ids").

What a reader sees (:func:`parse_block`): the message's own headers, in
order, names as sent. The write-time control headers ``Nats-Expected-*`` and
``Nats-Batch-*`` are hidden, as JetStream's own mirrors and sources strip
them, and so are the ``Nats-Stream``/``Nats-Sequence``... lines the server
appends to a direct-get reply. What a writer accepts
(:func:`check_user_headers`): any token name except those control headers,
``Nats-Msg-Id`` (given separately) and the names the server appends to reads.

Headers the server stamps on a stored message (:data:`SERVER_STAMPED`:
``Nats-Stream-Source`` on a sourced message, ``Nats-Scheduler`` and
``Nats-Schedule-Next`` on one a schedule produced, ``Nats-Counter-Sources``
on a counter, ``Nats-Marker-Reason`` on a delete marker) are readable like
any other, but they are the server's record of where a message came from, not
the message's: no writer sends them. :func:`build_block`, which every
oncestream publish goes through, leaves them out (:func:`writable_headers`
for the writers that hand a dict to nats-py), so rows read from a hub's
aggregate stream can be written to another stream as they are. nats-server
refuses them from a client: ``Nats-Stream-Source`` with 10227 ("message
stream source header is not allowed"), ``Nats-Scheduler`` without
``Nats-Schedule-Next: purge`` and any other ``Nats-Schedule-Next`` with 10212
("message schedules invalid scheduler"); the pair it stamps on a fired
delayed message (``purge``) would purge a schedule in the target instead.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import TypeVar

from ._errors import ConfigError

__all__ = [
    "BATCH_COMMIT",
    "BATCH_ID",
    "BATCH_SEQ",
    "BLOCK_START",
    "BLOCK_START_B",
    "CONTROL_PREFIXES",
    "COUNTER_SOURCES",
    "EXPECTED_LAST_MSG_ID",
    "EXPECTED_LAST_SEQ",
    "EXPECTED_LAST_SUBJECT_SEQ",
    "EXPECTED_STREAM",
    "LAST_SEQUENCE",
    "MARKER_REASON",
    "MSG_ID",
    "MSG_TTL",
    "NUM_PENDING",
    "PENDING_BYTES",
    "PENDING_MESSAGES",
    "PIN_ID",
    "ROLLUP",
    "SCHEDULE",
    "SCHEDULER",
    "SCHEDULE_NEXT",
    "SCHEDULE_TARGET",
    "SEQUENCE",
    "SERVER_STAMPED",
    "STREAM",
    "STREAM_SOURCE",
    "SUBJECT",
    "TIME_STAMP",
    "HeaderValues",
    "build_block",
    "check_msg_id",
    "check_user_headers",
    "direct_value",
    "first_values",
    "header_value",
    "is_clean_msg_id",
    "msg_id_key",
    "msg_id_of",
    "own_block",
    "parse_block",
    "render_block",
    "split_status",
    "writable_headers",
]

MSG_ID = "Nats-Msg-Id"
EXPECTED_STREAM = "Nats-Expected-Stream"
EXPECTED_LAST_SEQ = "Nats-Expected-Last-Sequence"
EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
EXPECTED_LAST_MSG_ID = "Nats-Expected-Last-Msg-Id"
BATCH_ID = "Nats-Batch-Id"
BATCH_SEQ = "Nats-Batch-Sequence"
BATCH_COMMIT = "Nats-Batch-Commit"
MSG_TTL = "Nats-TTL"
ROLLUP = "Nats-Rollup"
# A message schedule's own headers (server/stream.go): when, and the subject it fires on.
SCHEDULE = "Nats-Schedule"
SCHEDULE_TARGET = "Nats-Schedule-Target"
# Status replies to a pull request: how much of it went unused (404/408), the pin a
# pinned_client priority group gave this client.
PENDING_MESSAGES = "Nats-Pending-Messages"
PENDING_BYTES = "Nats-Pending-Bytes"
PIN_ID = "Nats-Pin-Id"
# Appended by the server to direct-get replies, in this order (the last two
# only in batched replies).
STREAM = "Nats-Stream"
SUBJECT = "Nats-Subject"
SEQUENCE = "Nats-Sequence"
TIME_STAMP = "Nats-Time-Stamp"
NUM_PENDING = "Nats-Num-Pending"
LAST_SEQUENCE = "Nats-Last-Sequence"
_UPTO_SEQUENCE = "Nats-UpTo-Sequence"
# Stamped by the server on messages it stores (server/stream.go, server/scheduler.go).
STREAM_SOURCE = "Nats-Stream-Source"
SCHEDULER = "Nats-Scheduler"
SCHEDULE_NEXT = "Nats-Schedule-Next"
COUNTER_SOURCES = "Nats-Counter-Sources"
MARKER_REASON = "Nats-Marker-Reason"

#: Headers nats-server writes onto a message it stores: where a sourced message came
#: from, the schedule that produced a message and its next firing, a counter's sources,
#: why a delete marker was written. Readable; never sent by a writer (the server refuses
#: the first three from a client: 10227, 10212).
SERVER_STAMPED = (STREAM_SOURCE, SCHEDULER, SCHEDULE_NEXT, COUNTER_SOURCES, MARKER_REASON)
#: Of those and of what the server adds to a message as it delivers it to a pinned
#: client (``Nats-Pin-Id``): what a writer never copies from a read. A copied pin id
#: stored with a message (a dead letter's replay) would be taken, when it is delivered,
#: for the pin the server gives the reader: a stale pin, so the reader steps down.
_STAMPED_LOWER = frozenset(name.lower() for name in (*SERVER_STAMPED, PIN_ID))

#: Write-time control headers: acted on when a message is stored, meaningless
#: (and harmful if copied into another write) once it is.
CONTROL_PREFIXES = ("Nats-Expected-", "Nats-Batch-")
_DIRECT_TAIL = (STREAM, SUBJECT, SEQUENCE, TIME_STAMP, NUM_PENDING, LAST_SEQUENCE)
_RESERVED = frozenset(name.lower() for name in (MSG_ID, *_DIRECT_TAIL, _UPTO_SEQUENCE))
_CONTROL_LOWER = tuple(p.lower() for p in CONTROL_PREFIXES)
_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_HEAD = b"NATS/1.0"
#: The first line of a header block without a status (text and bytes, for builders that
#: format it into a template once).
BLOCK_START = "NATS/1.0\r\n"
BLOCK_START_B = BLOCK_START.encode()
_CRLF = b"\r\n"
_MSG_ID_B = MSG_ID.encode()
_MSG_ID_KEY = b"\r\n" + _MSG_ID_B + b":"
#: Ledger keys of ids no writer of ours can produce start with this (see msg_id_key).
_ESCAPED = "\x01b64:"

_V = TypeVar("_V")

#: Header values by name: one string, or several (each becomes its own line).
HeaderValues = Mapping[str, str | Sequence[str]]


# --------------------------------------------------------------------------- msg ids


def is_clean_msg_id(msg_id: str) -> bool:
    """Whether every reader (server, nats-py, nats.go, ledgers) reads ``msg_id`` as written.

    Clean: non-empty, no control character, no whitespace at either end, and
    encodable as UTF-8. The fast test (``isprintable`` is C code) decides
    almost every id; only ids with other non-printable characters (say a
    zero-width space inside) take the slow path.
    """
    if msg_id.isprintable():
        return bool(msg_id) and msg_id[0] != " " and msg_id[-1] != " "
    if not msg_id or msg_id[0].isspace() or msg_id[-1].isspace():
        return False
    for char in msg_id:
        code = ord(char)
        if code < 0x20 or 0x7F <= code <= 0x9F or 0xD800 <= code <= 0xDFFF:
            return False
    return True


def check_msg_id(msg_id: object, what: str = "msg id") -> str:
    """Return ``msg_id`` if it is clean (:func:`is_clean_msg_id`); else raise naming why.

    Why the rule: nats-server drops the spaces in front of a ``Nats-Msg-Id``
    value (``" a"`` is de-duplicated against ``"a"``), ignores an empty one,
    and ends it at a line break; nats-py and nats.go trim both ends of every
    header value they write or read. An id that any of them would read
    differently could be merged with another record's id (a record lost)
    or read back as another id (a message skipped as already applied), so it
    is refused instead.

    Raises:
        ConfigError: naming ``what``, the id and the rule it breaks.

    Example::

        check_msg_id("order-17")   # -> "order-17"
        check_msg_id(" order-17")  # ConfigError: ... starts with whitespace ...
    """
    if type(msg_id) is not str:
        raise ConfigError(f"{what} must be a str, got {type(msg_id).__name__} {msg_id!r}"[:300])
    if is_clean_msg_id(msg_id):
        return msg_id
    shown = repr(msg_id) if len(msg_id) <= 80 else repr(msg_id[:80]) + "..."
    if not msg_id.strip():
        reason = (
            "is empty or only whitespace (nats-server ignores an empty Nats-Msg-Id: "
            "nothing would be de-duplicated)"
        )
    elif msg_id[0].isspace() or msg_id[-1].isspace():
        end = "starts" if msg_id[0].isspace() else "ends"
        reason = (
            f"{end} with whitespace (nats-server drops leading spaces and client libraries "
            "trim both ends, so it would be merged with, or read back as, another id)"
        )
    elif any(0xD800 <= ord(c) <= 0xDFFF for c in msg_id):
        reason = "is not valid Unicode (a lone surrogate cannot be encoded as UTF-8)"
    else:
        bad = next(c for c in msg_id if ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F)
        reason = (
            f"contains the control character {bad!r} (a line break ends a header value; "
            "other control characters are read differently by databases and clients)"
        )
    raise ConfigError(
        f"{what} {shown} {reason}; a msg id must be non-empty UTF-8 text without control "
        "characters or leading/trailing whitespace"
    )


def header_value(block: bytes | bytearray, name: bytes) -> bytes | None:
    """The value of header ``name`` exactly as nats-server reads it, or None.

    The first line whose name is exactly ``name`` (case-sensitive) after a
    CRLF, the spaces after the colon skipped, up to the next CRLF.
    """
    key = b"\r\n" + name + b":"
    start = block.find(key)
    if start < 0:
        return None
    start += len(key)
    size = len(block)
    while start < size and block[start] == 0x20:
        start += 1
    end = block.find(_CRLF, start)
    return bytes(block[start : end if end >= 0 else size])


def msg_id_of(block: bytes | bytearray | None) -> str | None:
    """The ``Nats-Msg-Id`` the server de-duplicates on, as text (None: no id).

    For display and Spark's ``msg_id`` column: bytes that are not UTF-8 (only
    foreign writers produce them) show as U+FFFD. Compare ids with
    :func:`msg_id_key`, which keeps them apart.
    """
    if not block or _MSG_ID_KEY not in block:
        return None
    raw = header_value(block, _MSG_ID_B)
    if not raw:
        return None
    return raw.decode("utf-8", "replace")


def msg_id_key(block: bytes | bytearray | None) -> str | None:
    """The ``Nats-Msg-Id`` as a comparable, storable key: one key per id the server tells apart.

    A clean id (every id oncestream writes) is its own key. Any other
    non-empty id (written by a foreign client: trailing whitespace, control
    characters, bytes that are not UTF-8) becomes ``"\\x01b64:"`` + the
    base64 of its bytes, which no clean id can equal and every database can
    store. None when the message has no (or an empty) id.
    """
    if not block or _MSG_ID_KEY not in block:
        return None
    raw = header_value(block, _MSG_ID_B)
    if not raw:
        return None
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        return _ESCAPED + base64.b64encode(raw).decode()
    return text if is_clean_msg_id(text) else _ESCAPED + base64.b64encode(raw).decode()


# --------------------------------------------------------------------------- reading


def split_status(block: bytes | bytearray) -> tuple[str | None, str]:
    """``(status code, description)`` of a block's first line (``NATS/1.0 404 No Messages``)."""
    end = block.find(_CRLF)
    first = bytes(block[: end if end >= 0 else len(block)])
    code, _, description = first[len(_HEAD) :].strip().partition(b" ")
    if not code.isdigit():
        return None, ""
    return code.decode(), description.strip().decode("utf-8", "replace")


def parse_block(
    block: bytes | bytearray | None, *, direct: bool = False, control: bool = False
) -> dict[str, list[str]]:
    """A header block as name -> values: the one parser every reader uses.

    Names as sent (case-sensitive, as the server compares them), values in
    order with spaces and tabs trimmed at both ends (as nats.go and nats-py
    read them), text decoded as UTF-8 (U+FFFD for other bytes). Lines without
    a colon, or with a name that is not a token, are skipped; so is the
    status line.

    Args:
        direct: the block is a direct-get reply: the ``Nats-Stream``,
            ``Nats-Subject``... lines the server appended are dropped.
        control: keep the write-time control headers (``Nats-Expected-*``,
            ``Nats-Batch-*``), hidden by default.
    """
    out: dict[str, list[str]] = {}
    if not block:
        return out
    lines = bytes(block).split(_CRLF)[1:]
    if direct:
        lines = _without_direct_tail(lines)
    for line in lines:
        name, sep, value = line.partition(b":")
        if not sep or not name:
            continue
        try:
            key = name.decode("ascii")
        except UnicodeDecodeError:
            continue
        if not _TOKEN.issuperset(key):
            continue
        if not control and key.startswith(CONTROL_PREFIXES):
            continue
        out.setdefault(key, []).append(value.strip(b" \t").decode("utf-8", "replace"))
    return out


def direct_value(block: bytes | bytearray, name: str) -> bytes | None:
    """A value the server appended to a direct-get reply (``Nats-Sequence``...), or None.

    The server appends its lines after the message's own headers, so the last
    line of that name is the server's, even when a writer used the name too.
    """
    key = b"\r\n" + name.encode() + b": "
    start = block.rfind(key)
    if start < 0:
        return None
    start += len(key)
    end = block.find(_CRLF, start)
    return bytes(block[start : end if end >= 0 else len(block)])


def own_block(block: bytes | bytearray, *, direct: bool = False) -> bytes:
    """The block with only the message's own lines (a direct-get reply's server tail cut off)."""
    if not direct or not block:
        return bytes(block)
    lines = bytes(block).split(_CRLF)
    kept = [lines[0], *_without_direct_tail(lines[1:])]
    return _CRLF.join(kept) + _CRLF + _CRLF


def first_values(headers: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """One value per name, the first (the one nats-server and nats.go's ``Get`` use)."""
    return {name: values[0] for name, values in headers.items() if values}


def _without_direct_tail(lines: list[bytes]) -> list[bytes]:
    """``lines`` without the trailing lines the server appends to a direct-get reply."""
    end = len(lines)
    while end and not lines[end - 1]:
        end -= 1
    # The server appends Nats-Stream ... in a fixed order after the message's own
    # headers: cut at the last Nats-Stream line followed only by appended names.
    prefix = STREAM.encode() + b":"
    for index in range(end - 1, -1, -1):
        if lines[index].startswith(prefix):
            tail = lines[index:end]
            names = {line.partition(b":")[0].decode("ascii", "replace") for line in tail}
            if names <= set(_DIRECT_TAIL) | {_UPTO_SEQUENCE}:
                return lines[:index]
            break
    return lines[:end]


# --------------------------------------------------------------------------- writing


def check_user_headers(headers: HeaderValues, what: str = "header") -> None:
    """Refuse header names and values a publish must not carry.

    Names must be tokens (printable ASCII without ``:`` or spaces). Refused,
    in any letter case: ``Nats-Msg-Id`` (give the id separately), the
    write-time control headers ``Nats-Expected-*``/``Nats-Batch-*`` (the
    writer sets its own; copied from a read they would make the write fail or
    check the wrong thing) and the names the server appends to direct-get
    replies. Values must be single lines.

    Raises:
        ConfigError: naming the header and the rule.
    """
    for key, value in headers.items():
        if not isinstance(key, str) or not key or not _TOKEN.issuperset(key):
            raise ConfigError(
                f"{what} name {key!r} is invalid: a header name is printable ASCII "
                "without ':' or spaces"
            )
        lowered = key.lower()
        if lowered == MSG_ID.lower():
            raise ConfigError(
                f"{what} {key!r} is not accepted: give the message id as the msg id "
                "(msg_id=, or the sink's msg_id column), not as a header"
            )
        if lowered.startswith(_CONTROL_LOWER) or lowered in _RESERVED:
            raise ConfigError(
                f"{what} {key!r} is not accepted: Nats-Expected-* and Nats-Batch-* are "
                "write-time checks the writer sets itself, and Nats-Stream, Nats-Subject, "
                "Nats-Sequence... are added by the server to reads and to republished "
                "messages (drop them from the headers you write: a stored message carrying "
                "them would be misread by direct gets)"
            )
        for item in (value,) if isinstance(value, str) else value:
            if not isinstance(item, str) or "\r" in item or "\n" in item or not item:
                raise ConfigError(f"{what} {key} must be a non-empty single line, got {item!r}")


def writable_headers(headers: Mapping[str, _V]) -> dict[str, _V]:
    """``headers`` without the server-stamped ones (and a pinned delivery's ``Nats-Pin-Id``):
    what a writer may send of a read's headers.

    Example::

        writable_headers({"X-A": "1", "Nats-Stream-Source": "ORDERS 7 ..."})  # {"X-A": "1"}
    """
    return {k: v for k, v in headers.items() if k.lower() not in _STAMPED_LOWER}


def build_block(msg_id: str, extra: HeaderValues | None, expect: Mapping[str, str]) -> bytes:
    """The ``NATS/1.0`` block: the msg id first, then user headers, then the control headers.

    The msg id comes first so that the server's first-match lookup finds it;
    ``msg_id`` and ``extra`` must have been checked (:func:`check_msg_id`,
    :func:`check_user_headers`). A list value becomes one line per item. Headers the
    server stamps (:data:`SERVER_STAMPED`, and a pinned delivery's ``Nats-Pin-Id``) are
    left out: they describe where a stored message came from or how it was delivered,
    and the server refuses the first from a client.
    """
    parts = [BLOCK_START, MSG_ID, ": ", msg_id, "\r\n"]
    if extra:
        for key, value in extra.items():
            if key.lower() in _STAMPED_LOWER:
                continue
            for item in (value,) if isinstance(value, str) else value:
                parts += [key, ": ", item, "\r\n"]
    for key, value in expect.items():
        parts += [key, ": ", value, "\r\n"]
    parts.append("\r\n")
    return "".join(parts).encode()


def render_block(headers: HeaderValues) -> bytes:
    """The ``NATS/1.0`` block of ``headers`` as given: no checks, nothing left out.

    For a message rebuilt from headers already parsed (a direct get's own lines, a
    dead letter's record); a list value becomes one line per item. Writers use
    :func:`build_block`.
    """
    lines = "".join(
        f"{key}: {item}\r\n"
        for key, value in headers.items()
        for item in ((value,) if isinstance(value, str) else value)
    )
    return f"{BLOCK_START}{lines}\r\n".encode()
