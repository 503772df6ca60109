"""The loader's input: opening it (a path, a binary file, a pipe or records), its
records, their subjects and msg ids; a pipe is read on a thread, off the event loop.

Everything here is checked before anything is published: a bad subject
template, a file that is a directory, unreadable, binary or lacks the id
field's column is a :class:`ConfigError` naming the thing at fault; a bad line
is a :class:`RecordError` that the run reports with its line number.
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import io
import json
import logging
import math
import os
import re
import select
import stat
import string
import threading
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Callable,
    Iterable,
    Iterator,
    Mapping,
)
from dataclasses import dataclass, field
from enum import StrEnum
from typing import IO, Any, Protocol, cast

import orjson

from .._errors import ConfigError
from .._headers import check_msg_id
from .._names import check_publish_subject
from ._labels import default_label

__all__ = [
    "FileFacts",
    "IdRefused",
    "InputFormat",
    "Item",
    "OpenOptions",
    "OpenedSource",
    "PrefixHasher",
    "Record",
    "RecordError",
    "Source",
    "SubjectTemplate",
    "check_text",
    "content_id",
    "detect_format",
    "file_facts",
    "open_input",
    "open_source",
    "read_items",
    "read_off_loop",
    "read_records",
    "record_id",
    "record_of",
    "rewritten",
    "snapshot",
]

log = logging.getLogger(__name__)

_BAD_SUBJECT_VALUE = set(" \t\r\n.*>")
_BOM = b"\xef\xbb\xbf"
# 20 digits in a row: maybe an integer beyond 64 bits, which orjson turns into a float.
_BIG_INT = re.compile(rb"\d{20}")
_HASH_CHUNK = 1 << 20
#: Seconds a FIFO may stay without a writer before the command says it is waiting.
_FIFO_NOTICE = 0.5


class InputFormat(StrEnum):
    auto = "auto"
    jsonl = "jsonl"
    csv = "csv"


class RecordError(ValueError):
    """A malformed input line; never published."""

    def __init__(self, line: int, reason: str) -> None:
        self.line = line
        self.reason = reason
        super().__init__(f"line {line}: {reason}")


class IdRefused(RecordError):
    """A record whose id the server (or a reader) would read as another id; never published."""


@dataclass(frozen=True)
class Record:
    line: int
    fields: dict[str, Any]
    data: bytes


class SubjectTemplate:
    """``orders.{region}``: a subject with placeholders filled from record fields.

    Args:
        template: the subject, with ``{field}`` placeholders.
        label: how messages name the option that gave it (``--subject`` on the CLI).

    Raises:
        ConfigError: naming ``label`` when the template is not a valid subject pattern.
    """

    def __init__(self, template: str, label: str = default_label("subject")) -> None:
        self.template = template
        self.label = label
        self.fields: list[str] = []
        where = f"{label} {template!r}"
        try:
            parsed = list(string.Formatter().parse(template))
        except ValueError as exc:
            raise ConfigError(
                f"{where}: unbalanced braces ({exc}); placeholders look like "
                "'orders.{region}', a literal brace is written '{{' or '}}'"
            ) from None
        for _literal, name, spec, conversion in parsed:
            if name is not None:
                if not name or spec or conversion or not name.strip() or "." in name:
                    raise ConfigError(
                        f"{where}: placeholders are plain field names like "
                        "'{region}' (no format spec, conversion or dots)"
                    )
                self.fields.append(name)
        # Every placeholder fills (part of) one token: check with a stand-in value.
        check_publish_subject(self._render(dict.fromkeys(self.fields, "x")), where)
        # For asking the server which streams capture it, a placeholder is '*'.
        self.filter = self._render(dict.fromkeys(self.fields, "*"), allow_wild=True)

    def _render(self, values: dict[str, str], *, allow_wild: bool = False) -> str:
        text = self.template.format_map(values)
        if allow_wild:
            # A token mixing text and a placeholder ('eu{n}') is matched by '*' as a whole.
            text = ".".join("*" if "*" in token else token for token in text.split("."))
        return text

    def render(self, record: Record) -> str:
        """The subject for ``record``.

        Raises:
            RecordError: a referenced field is missing or unusable as a subject token.
        """
        if not self.fields:
            return self.template.format_map({}) if "{" in self.template else self.template
        values: dict[str, str] = {}
        for name in self.fields:
            if name not in record.fields or record.fields[name] is None:
                raise RecordError(record.line, f"field {name!r} (used by {self.label}) is missing")
            raw = record.fields[name]
            if isinstance(raw, dict | list | bool):
                raise RecordError(
                    record.line,
                    f"field {name!r} (used by {self.label}) is a {type(raw).__name__}, "
                    "not a string or number",
                )
            value = str(raw)
            if not value or _BAD_SUBJECT_VALUE.intersection(value):
                raise RecordError(
                    record.line,
                    f"field {name!r} = {value!r} cannot be a subject token "
                    "(empty, or contains '.', spaces or wildcards)",
                )
            values[name] = value
        return self.template.format_map(values)


def record_id(record: Record, id_field: str | None) -> str:
    """The msg id of ``record``: its ``id_field`` (a string or integer), else a content hash.

    Raises:
        RecordError: the id field is missing, null, or not a string/integer.
        IdRefused: the id is not clean (:func:`oncestream._headers.check_msg_id`):
            nats-server or a client library would read it as another id.
    """
    if id_field is None:
        return content_id(record)
    if id_field not in record.fields or record.fields[id_field] is None:
        raise RecordError(record.line, f"id field {id_field!r} is missing or null")
    value = record.fields[id_field]
    if type(value) is float and _BIG_INT.search(record.data):
        value = _exact_fields(record).get(id_field, value)
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise RecordError(
            record.line,
            f"id field {id_field!r} must be a string or an integer, got "
            f"{type(value).__name__} {value!r}"[:200],
        )
    try:
        return check_msg_id(str(value), f"id field {id_field!r}:")
    except ConfigError as exc:
        raise IdRefused(record.line, str(exc)) from None


def _exact_fields(record: Record) -> dict[str, Any]:
    """The record's fields with integers beyond 64 bits exact (orjson makes them floats)."""
    try:
        value = json.loads(record.data)
    except ValueError:
        return record.fields
    return value if isinstance(value, dict) else record.fields


def content_id(record: Record) -> str:
    """A stable id from the record's canonical JSON (sorted keys): sha256, hex.

    Integers beyond 64 bits stay exact (orjson would round them to floats, and
    two records differing only there would share an id).
    """
    if _BIG_INT.search(record.data):
        canonical = json.dumps(
            _exact_fields(record), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ).encode()
    else:
        canonical = orjson.dumps(record.fields, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()


def detect_format(path: str, first_line: bytes) -> InputFormat:
    """``csv`` for ``*.csv``, ``jsonl`` for ``*.jsonl``/``*.ndjson``/``*.json``, else sniffed."""
    lowered = path.lower()
    if lowered.endswith(".csv"):
        return InputFormat.csv
    if lowered.endswith((".jsonl", ".ndjson", ".json")):
        return InputFormat.jsonl
    return (
        InputFormat.jsonl if first_line.lstrip(_BOM).lstrip().startswith(b"{") else InputFormat.csv
    )


@dataclass(frozen=True, kw_only=True)
class FileFacts:
    """What the up-front pass over a regular file learned: identity, size, lines."""

    path: str
    size: int
    sha256: str
    lines: int
    #: The file's modification time when it was counted (``st_mtime_ns``; 0: unknown).
    mtime_ns: int = 0


def open_input(file: str, say: Callable[[str], None] = lambda _: None) -> IO[bytes]:
    """Open FILE for reading, refusing what cannot be a record file.

    A FIFO (named pipe) is opened at once; while no writer sends anything,
    ``say`` is told that the command waits for one (instead of blocking silently).

    Raises:
        ConfigError: FILE is missing, a directory, not a regular file, unreadable, or binary.
    """
    try:
        info = os.stat(file)
    except FileNotFoundError:
        raise ConfigError(f"input file {file!r} not found") from None
    except OSError as exc:
        raise ConfigError(f"input file {file!r}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise ConfigError(
            f"input {file!r} is a directory; give one JSONL or CSV file (or '-' for stdin)"
        )
    try:
        fifo = stat.S_ISFIFO(info.st_mode)
        source = _open_fifo(file, say) if fifo else open(file, "rb")  # noqa: SIM115
    except PermissionError:
        raise ConfigError(f"input file {file!r} is not readable (permission denied)") from None
    except OSError as exc:
        raise ConfigError(f"input file {file!r}: {exc.strerror or exc}") from None
    try:
        head = source.peek(4096)[:4096]
    except OSError as exc:
        source.close()
        raise ConfigError(f"input file {file!r} cannot be read: {exc.strerror or exc}") from None
    check_text(file, head)
    return source


def _open_fifo(file: str, say: Callable[[str], None]) -> io.BufferedReader:
    """Open a FIFO without blocking, say so if no writer sends anything soon, then wait.

    A plain ``open`` blocks until a writer opens the other end, silently.
    """
    fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK)
    try:
        readable, _, _ = select.select([fd], [], [], _FIFO_NOTICE)
        if not readable:
            say(
                f"waiting for a writer on FIFO {file!r} (a named pipe): start the program "
                "that writes the records into it, or press Ctrl-C"
            )
            select.select([fd], [], [])
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    raw = io.FileIO(fd, "rb")
    raw.name = file  # the format is told by the name (e.g. a FIFO 'in.csv'), not the fd
    return io.BufferedReader(raw)


def check_text(name: str, head: bytes) -> None:
    """Refuse input whose first bytes show a binary or compressed file.

    Raises:
        ConfigError: naming the input and what it seems to be.
    """
    if head.startswith(b"\x1f\x8b"):
        raise ConfigError(
            f"input {name!r} is gzip-compressed; decompress it first, e.g. "
            f"'zcat {name} | oncestream publish - ...'"
        )
    if b"\x00" in head:
        raise ConfigError(f"input {name!r} is a binary file (NUL bytes); give JSONL or CSV text")


def file_facts(path: str, source: IO[bytes]) -> FileFacts:
    """Hash and count the lines of an open regular file, then rewind it."""
    mtime_ns = os.fstat(source.fileno()).st_mtime_ns
    digest = hashlib.sha256()
    size = lines = 0
    last = b"\n"
    while chunk := source.read(_HASH_CHUNK):
        digest.update(chunk)
        size += len(chunk)
        lines += chunk.count(b"\n")
        last = chunk[-1:]
    if last != b"\n":
        lines += 1
    source.seek(0)
    return FileFacts(
        path=os.path.realpath(path),
        size=size,
        sha256=digest.hexdigest(),
        lines=lines,
        mtime_ns=mtime_ns,
    )


class _Snapshot(io.RawIOBase):
    """The first ``size`` bytes of an open file: what :func:`file_facts` counted and hashed."""

    def __init__(self, source: IO[bytes], size: int) -> None:
        self._source = source
        self._left = size
        #: The file ended before ``size`` bytes: it was cut (truncated) while it was read.
        self.short = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._left <= 0:
            return 0
        view = memoryview(buffer).cast("B")[: self._left]
        count = self._source.readinto(view)  # type: ignore[attr-defined]
        if not count:
            self.short = True
        self._left -= count
        return int(count)

    def fileno(self) -> int:
        return self._source.fileno()


def snapshot(source: IO[bytes], facts: FileFacts) -> IO[bytes]:
    """Read only the bytes ``facts`` counted: lines appended while publishing wait for a re-run.

    Closing the snapshot leaves ``source`` open: whoever opened it closes it.

    Without it a file that grows during the run is read past the line count,
    hash and size the run reports and records as its progress.
    """
    return io.BufferedReader(_Snapshot(source, facts.size))


def rewritten(source: IO[bytes], facts: FileFacts) -> str | None:
    """How the file behind ``source`` (a :func:`snapshot`) changed in place since ``facts``
    were taken, or None when the bytes counted then are still the same.

    A file rewritten while it is read is read partly before and partly after the
    rewrite: the line at the seam is torn (a line of each, or one cut short), which
    reads as a malformed record, or, when the new version
    is longer and its lines line up, reads cleanly but holds lines of both versions.
    Lines appended meanwhile are not a change here: the snapshot stops at the bytes
    counted. Whenever the modification time moved, the first ``facts.size`` bytes are
    hashed again: the same bytes mean appended to (or touched), others rewritten.
    """
    raw = getattr(source, "raw", None)
    short = isinstance(raw, _Snapshot) and raw.short
    cut = f"it ended before the {facts.size:,} bytes counted at the start"
    try:
        fd = source.fileno()
        now = os.fstat(fd)
    except (OSError, ValueError, io.UnsupportedOperation):
        return cut if short else None
    if short or now.st_size < facts.size:
        return f"{facts.size:,} bytes at the start, {now.st_size:,} now; {cut}"
    if not facts.mtime_ns or now.st_mtime_ns == facts.mtime_ns:
        return None
    digest = hashlib.sha256()
    offset = 0
    while offset < facts.size:
        chunk = os.pread(fd, min(_HASH_CHUNK, facts.size - offset), offset)
        if not chunk:
            break
        digest.update(chunk)
        offset += len(chunk)
    if offset == facts.size and digest.hexdigest() == facts.sha256:
        return None  # appended to, not rewritten
    grew = f", {now.st_size:,} now" if now.st_size != facts.size else ""
    return f"{facts.size:,} bytes at the start{grew}, and they are not the same any more"


class PrefixHasher:
    """sha256 of a file's first lines, advanced line by line (a second, sequential read).

    Progress records keep the hash of the lines already confirmed, so a re-run
    can tell whether that part of the file changed.
    """

    def __init__(self, path: str) -> None:
        self._file = open(path, "rb")  # noqa: SIM115 - closed by close()
        self._hash = hashlib.sha256()
        self.line = 0
        self.offset = 0

    def advance_to(self, line: int) -> None:
        while self.line < line:
            raw = self._file.readline()
            if not raw:
                break
            self._hash.update(raw)
            self.offset += len(raw)
            self.line += 1

    def hexdigest(self) -> str:
        return self._hash.hexdigest()

    def close(self) -> None:
        self._file.close()


def _jsonl_records(stream: IO[bytes], skip_to: int) -> Iterator[Record | RecordError | int]:
    for number, raw in enumerate(stream, start=1):
        yield number
        if number <= skip_to:
            continue
        line = raw.strip()
        if number == 1 and line.startswith(_BOM):
            line = line[len(_BOM) :].strip()
        if not line:
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            reason = "not UTF-8 text" if "utf-8" in str(exc).lower() else f"invalid JSON ({exc})"
            yield RecordError(number, reason)
            continue
        if not isinstance(value, dict):
            yield RecordError(number, f"expected a JSON object, got {type(value).__name__}")
            continue
        yield Record(number, value, line)


def _csv_records(
    stream: IO[bytes], skip_to: int, needed: dict[str, str]
) -> Iterator[Record | RecordError | int]:
    text = io.TextIOWrapper(stream, encoding="utf-8-sig", newline="")
    reader = csv.reader(text)
    try:
        header = next(reader)
    except StopIteration:
        return
    except (csv.Error, UnicodeDecodeError) as exc:
        raise ConfigError(f"the CSV header (line 1) is unreadable: {exc}") from None
    if not header or len(set(header)) != len(header) or any(not h for h in header):
        raise ConfigError(f"the CSV header needs unique, non-empty column names, found {header}")
    for column, flag in needed.items():
        if column not in header:
            raise ConfigError(
                f"the CSV header has no column {column!r} ({flag}); it has: {', '.join(header)}"
            )
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except UnicodeDecodeError:
            yield RecordError(reader.line_num + 1, "not UTF-8 text")
            return
        except csv.Error as exc:
            yield RecordError(reader.line_num, f"unreadable CSV row ({exc})")
            continue
        yield reader.line_num
        if reader.line_num <= skip_to or not row or row == [""]:
            continue
        if len(row) != len(header):
            yield RecordError(reader.line_num, f"expected {len(header)} fields, got {len(row)}")
            continue
        fields = dict(zip(header, row, strict=True))
        yield Record(reader.line_num, fields, orjson.dumps(fields))


def read_items(
    stream: IO[bytes],
    fmt: InputFormat,
    *,
    skip_to: int = 0,
    needed: dict[str, str] | None = None,
) -> Iterator[Record | RecordError | int]:
    """Records (or the error of each malformed line) of a JSONL or CSV byte stream.

    Integers in the output are progress ticks: the physical line number reached.
    Lines up to ``skip_to`` are read but not yielded (a resumed run).
    ``needed`` maps CSV columns that must exist to the flag that needs them.

    Raises:
        ConfigError: the CSV header is unreadable, has empty or repeated names, or
            lacks a needed column.
    """
    if fmt is InputFormat.csv:
        return _csv_records(stream, skip_to, needed or {})
    return _jsonl_records(stream, skip_to)


def read_records(stream: IO[bytes], fmt: InputFormat) -> Iterator[Record | RecordError]:
    """Records (or the error of each malformed line) of a JSONL or CSV byte stream.

    Raises:
        ConfigError: the CSV header is unreadable or has empty or repeated names.
    """
    for item in read_items(stream, fmt):
        if not isinstance(item, int):
            yield item


Item = Record | RecordError | int
"""What the readers yield: a record, a malformed line's error, or the line number reached."""
#: Items read ahead by the reader thread of a pipe (bounded: the reader waits).
_READ_AHEAD = 1024
_END = object()


@dataclass(frozen=True)
class _Raised:
    """What ended the reader thread. Not the exception itself: a malformed line is an
    item that is an exception (:class:`RecordError`), and must stay an item."""

    exc: BaseException


async def read_off_loop(items: Iterator[Item]) -> AsyncIterator[Item]:
    """Iterate ``items`` on a reader thread: a pipe that stays open and idle
    (``tail -F log | oncestream publish -``) must not stop the event loop, which
    sends what is queued and receives the PubAcks meanwhile.

    Closing the iterator (the run stopped early) tells the thread to stop: it
    hands nothing more to a loop that may be shutting down.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[object] = asyncio.Queue()
    room = threading.Semaphore(_READ_AHEAD)
    gone = threading.Event()

    def hand(item: object) -> bool:
        """Queue ``item`` for the loop; False once nobody reads any more."""
        room.acquire()
        if gone.is_set():
            return False
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the loop is closed
            return False
        return True

    def read() -> None:
        try:
            for item in items:
                if not hand(item):
                    return
            outcome: object = _END
        except BaseException as exc:  # handed to the loop, raised there
            outcome = _Raised(exc)
        hand(outcome)

    # A daemon: a run that stops early leaves it blocked on the pipe; exiting ends it.
    threading.Thread(target=read, name="oncestream-publish-reader", daemon=True).start()
    try:
        while True:
            item = await queue.get()
            room.release()
            if item is _END:
                return
            if isinstance(item, _Raised):
                raise item.exc
            yield item  # type: ignore[misc]
    finally:
        gone.set()
        room.release()  # a reader waiting for room wakes up and stops


class OpenOptions(Protocol):
    """What opening a source needs of :class:`~oncestream.load.LoadOptions`."""

    @property
    def fresh(self) -> bool:
        """Start over: only a regular file has an identity to record progress for."""
        ...

    @property
    def format(self) -> str:
        """``auto``, ``jsonl`` or ``csv``."""
        ...

    def label(self, name: str) -> str:
        """How a message names option ``name`` (a Python field, or the CLI's flag)."""
        ...


_Records = Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]]
#: What :func:`load` reads: a path, an open binary file, or records (mappings).
Source = str | os.PathLike[str] | IO[bytes] | _Records


@dataclass
class OpenedSource:
    """The input, opened and looked at: where its records come from, what it is."""

    label: str
    source: IO[bytes] | None = None
    fmt: InputFormat = InputFormat.jsonl
    facts: FileFacts | None = None
    hasher: PrefixHasher | None = None
    records: _Records | None = None
    owned: list[IO[bytes]] = field(default_factory=list)

    def items(self, skip_to: int, needed: dict[str, str]) -> Iterator[Item] | AsyncIterator[Item]:
        if self.records is not None:
            if isinstance(self.records, AsyncIterable):
                return _async_records(self.records)
            return _records(self.records)
        assert self.source is not None
        items = read_items(self.source, self.fmt, skip_to=skip_to, needed=needed)
        # A pipe may stay open and idle: it is read on a thread, off the event loop.
        return items if self.facts is not None else read_off_loop(items)

    def close(self) -> None:
        if self.hasher is not None:
            self.hasher.close()
        for handle in self.owned:
            handle.close()


def _regular_path(handle: IO[bytes]) -> str | None:
    """The path of an open regular file (by its name, the same file), else None."""
    name = getattr(handle, "name", None)
    if not isinstance(name, str):
        return None
    try:
        opened = os.fstat(handle.fileno())
        named = os.stat(name)
    except (OSError, ValueError, io.UnsupportedOperation):
        return None
    if not stat.S_ISREG(opened.st_mode) or not os.path.samestat(opened, named):
        return None
    return name


def open_source(source: Source, options: OpenOptions) -> OpenedSource:
    if isinstance(source, str | os.PathLike):
        handle = open_input(os.fspath(source), log.warning)
        try:
            return _open_file(handle, options, owned=True)
        except BaseException:
            handle.close()
            raise
    if isinstance(source, bytes | bytearray | memoryview | io.TextIOBase):
        raise ConfigError(
            "source: give a path, a file opened in binary mode ('rb') or an iterable of "
            f"records (mappings), got {type(source).__name__}"
        )
    if hasattr(source, "read"):
        return _open_file(source, options, owned=False)  # type: ignore[arg-type]
    if isinstance(source, Iterable | AsyncIterable):
        if options.fresh:
            raise ConfigError(
                f"{options.label('fresh')} needs a regular file: an iterable of records has "
                "no identity to record progress for"
            )
        return OpenedSource(label="records", records=cast(_Records, source))
    raise ConfigError(
        "source: give a path, a file opened in binary mode ('rb') or an iterable of records "
        f"(mappings), got {type(source).__name__}"
    )


def _open_file(handle: IO[bytes], options: OpenOptions, *, owned: bool) -> OpenedSource:
    name = getattr(handle, "name", None)
    # stdin is '-' on the command line; its file object calls itself '<stdin>'.
    label = name if isinstance(name, str) and not name.startswith("<") else "-"
    source: IO[bytes] = handle
    if not hasattr(source, "peek"):
        source = io.BufferedReader(source)  # type: ignore[type-var]
    opened = OpenedSource(label=label, source=source, owned=[handle] if owned else [])
    peek = source.peek(4096)[:4096]
    check_text(label, peek)
    path = _regular_path(handle)
    if path is None and options.fresh:
        raise ConfigError(
            f"{options.label('fresh')} needs a regular file: {label!r}, which is not one, has "
            "no stable identity to record progress for"
        )
    first = next((line for line in peek.splitlines() if line.strip()), b"")
    opened.fmt = (
        detect_format(label, first) if options.format == "auto" else InputFormat(options.format)
    )
    if path is not None:
        source.seek(0)
        opened.facts = file_facts(path, source)
        opened.source = snapshot(source, opened.facts)
        opened.hasher = PrefixHasher(path)
    return opened


def record_of(number: int, value: object) -> Record | RecordError:
    if not isinstance(value, Mapping):
        return RecordError(number, f"expected a mapping (a record), got {type(value).__name__}")
    fields = dict(value)
    if (where := _non_finite(fields, "")) is not None:
        # orjson writes NaN and infinities as null: the stored record would differ from
        # the one given, and records differing only there would share a content id.
        return RecordError(number, f"field {where} is not a finite number (JSON has none)")
    try:
        data = orjson.dumps(fields)
    except TypeError:
        try:  # integers beyond 64 bits, which orjson refuses, stay exact
            data = json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode()
        except (TypeError, ValueError) as exc:
            return RecordError(number, f"not JSON-serializable ({exc})")
    return Record(number, fields, data)


def _non_finite(value: object, path: str) -> str | None:
    """The path of the first NaN or infinity in ``value`` (mappings and lists), or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (path or "(the record)")
    if isinstance(value, Mapping):
        items: Iterable[tuple[object, object]] = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _non_finite(item, f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None


def _records(records: Iterable[Mapping[str, Any]]) -> Iterator[Item]:
    for number, value in enumerate(records, start=1):
        yield number
        yield record_of(number, value)


async def _async_records(records: AsyncIterable[Mapping[str, Any]]) -> AsyncIterator[Item]:
    number = 0
    async for value in records:
        number += 1
        yield number
        yield record_of(number, value)
