"""The loader's input: the file, its records, their subjects and msg ids.

Everything here is checked before anything is published: a bad subject
template, a file that is a directory, unreadable, binary or lacks the id
field's column is a :class:`ConfigError` naming the thing at fault; a bad line
is a :class:`RecordError` that the run reports with its line number.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import select
import stat
import string
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import IO, Any

import orjson

from .._errors import ConfigError
from .._headers import check_msg_id
from .._names import check_publish_subject
from ._labels import default_label

__all__ = [
    "FileFacts",
    "IdRefused",
    "InputFormat",
    "PrefixHasher",
    "Record",
    "RecordError",
    "SubjectTemplate",
    "check_text",
    "content_id",
    "detect_format",
    "file_facts",
    "open_input",
    "read_items",
    "read_records",
    "record_id",
    "rewritten",
    "snapshot",
]

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


def rewritten(source: IO[bytes], facts: FileFacts, *, symptom: bool) -> str | None:
    """How the file behind ``source`` (a :func:`snapshot`) changed in place since ``facts``
    were taken, or None when the bytes counted then are still the same.

    A file rewritten while it is read is read partly before and partly after the
    rewrite: the line at the seam is torn (a line of each, or one cut short), which
    reads as a malformed record (``symptom``: one was seen). Lines appended meanwhile
    are not a change here: the snapshot stops at the bytes counted. A file that grew
    is taken for appended to unless there is a symptom (then its first ``facts.size``
    bytes are hashed again); one that kept its size but not its modification time is
    hashed again too.
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
    if now.st_size > facts.size and not symptom:
        return None  # appended to (read only up to the counted bytes)
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
