"""`oncestream publish FILE|-`: load JSONL or CSV records into a stream, exactly once.

Each record gets a deterministic msg id (a field, or a hash of its content),
so re-running the same file inside the stream's duplicate window stores
nothing new: every record is reported as a duplicate.
"""

from __future__ import annotations

import asyncio
import csv
import functools
import hashlib
import io
import os
import string
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import IO, Any

import orjson
import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .._connection import connect
from .._errors import ConfigError, JetStreamError, MessageTooLarge, PublishError
from .._names import check_publish_subject, check_stream_name
from .._options import ConnectOptions, parse_duration
from ..publisher import PubAck, Publisher, PublisherOptions
from ._app import EXIT_FAILURE, app, cli_errors, console, err_console, run_async
from ._connect_flags import with_connect_options

__all__ = ["RecordError", "SubjectTemplate", "publish_command", "read_records"]

_BAD_SUBJECT_VALUE = set(" \t\r\n.*>")


class InputFormat(StrEnum):
    auto = "auto"
    jsonl = "jsonl"
    csv = "csv"


class OnError(StrEnum):
    stop = "stop"
    skip = "skip"


class RecordError(ValueError):
    """A malformed input line; never published."""

    def __init__(self, line: int, reason: str) -> None:
        self.line = line
        self.reason = reason
        super().__init__(f"line {line}: {reason}")


@dataclass(frozen=True)
class Record:
    line: int
    fields: dict[str, Any]
    data: bytes


class SubjectTemplate:
    """``orders.{region}``: a subject with placeholders filled from record fields.

    Raises:
        ConfigError: the template is not a valid subject pattern.
    """

    def __init__(self, template: str) -> None:
        self.template = template
        self.fields: list[str] = []
        try:
            parts = list(string.Formatter().parse(template))
        except ValueError as exc:  # an unmatched '{' or '}'
            raise ConfigError(
                f"--subject {template!r}: {exc}; placeholders look like {{region}}"
            ) from None
        for _literal, name, spec, conversion in parts:
            if name is not None:
                if not name or spec or conversion:
                    raise ConfigError(
                        f"--subject {template!r}: placeholders are plain field names like "
                        "{region}"
                    )
                self.fields.append(name)
        # Every placeholder fills one token: check the template with a stand-in value.
        check_publish_subject(template.format_map(dict.fromkeys(self.fields, "x")), "--subject")

    def render(self, record: Record) -> str:
        """The subject for ``record``.

        Raises:
            RecordError: a referenced field is missing or unusable as a subject token.
        """
        if not self.fields:
            return self.template
        values: dict[str, str] = {}
        for name in self.fields:
            if name not in record.fields or record.fields[name] is None:
                raise RecordError(record.line, f"field {name!r} (used by --subject) is missing")
            value = str(record.fields[name])
            if not value or _BAD_SUBJECT_VALUE.intersection(value):
                raise RecordError(
                    record.line,
                    f"field {name!r} = {value!r} cannot be a subject token "
                    "(empty, or contains '.', spaces or wildcards)",
                )
            values[name] = value
        return self.template.format_map(values)


def detect_format(path: str, first_line: bytes) -> InputFormat:
    """``csv`` for ``*.csv``, ``jsonl`` for ``*.jsonl``/``*.ndjson``/``*.json``, else sniffed."""
    lowered = path.lower()
    if lowered.endswith(".csv"):
        return InputFormat.csv
    if lowered.endswith((".jsonl", ".ndjson", ".json")):
        return InputFormat.jsonl
    return InputFormat.jsonl if first_line.lstrip().startswith(b"{") else InputFormat.csv


def _jsonl_records(stream: IO[bytes]) -> Iterator[Record | RecordError]:
    for number, raw in enumerate(stream, start=1):
        line = raw.strip()
        if not line:
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            yield RecordError(number, f"invalid JSON ({exc})")
            continue
        if not isinstance(value, dict):
            yield RecordError(number, f"expected a JSON object, got {type(value).__name__}")
            continue
        yield Record(number, value, line)


def _csv_records(stream: IO[bytes]) -> Iterator[Record | RecordError]:
    text = io.TextIOWrapper(stream, encoding="utf-8", newline="")
    reader = csv.reader(text)
    try:
        header = next(reader)
    except StopIteration:
        return
    except (csv.Error, UnicodeDecodeError) as exc:
        yield RecordError(1, f"unreadable CSV header ({exc})")
        return
    if not header or len(set(header)) != len(header) or any(not h for h in header):
        yield RecordError(1, f"the CSV header needs unique, non-empty column names: {header}")
        return
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except (csv.Error, UnicodeDecodeError) as exc:
            yield RecordError(reader.line_num, f"unreadable CSV row ({exc})")
            continue
        if not row or row == [""]:
            continue
        if len(row) != len(header):
            yield RecordError(reader.line_num, f"expected {len(header)} fields, got {len(row)}")
            continue
        fields = dict(zip(header, row, strict=True))
        yield Record(reader.line_num, fields, orjson.dumps(fields))


def read_records(stream: IO[bytes], fmt: InputFormat) -> Iterator[Record | RecordError]:
    """Records (or the error of each malformed line) of a JSONL or CSV byte stream."""
    return _csv_records(stream) if fmt is InputFormat.csv else _jsonl_records(stream)


def content_id(record: Record) -> str:
    """A stable id from the record's canonical JSON (sorted keys): sha256, hex."""
    canonical = orjson.dumps(record.fields, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()


@dataclass
class Tally:
    """What happened to the input."""

    stored: int = 0
    duplicates: int = 0
    failed: int = 0
    malformed: int = 0
    errors: list[str] = field(default_factory=list)

    def on_done(self, line: int, future: asyncio.Future[PubAck]) -> None:
        if future.cancelled():
            self.failed += 1
            return
        exc = future.exception()
        if exc is not None:
            self.failed += 1
            if len(self.errors) < 20:
                self.errors.append(f"line {line}: {type(exc).__name__}: {exc}")
        elif future.result().duplicate:
            self.duplicates += 1
        else:
            self.stored += 1


def _summary(tally: Tally, pub: Publisher, seconds: float) -> Table:
    stats = pub.stats
    table = Table(title="publish summary", title_justify="left")
    for column in ("sent", "stored", "duplicates", "failed", "retried", "malformed", "msg/s"):
        table.add_column(column, justify="right")
    rate = stats.sent / seconds if seconds > 0 else 0.0
    table.add_row(
        f"{stats.sent:,}",
        f"{tally.stored:,}",
        f"{tally.duplicates:,}",
        f"[{'bold red' if tally.failed else 'green'}]{tally.failed:,}[/]",
        f"{stats.retried:,}",
        f"[{'yellow' if tally.malformed else 'green'}]{tally.malformed:,}[/]",
        f"{rate:,.0f}",
    )
    return table


async def _publish(
    source: IO[bytes],
    fmt: InputFormat,
    *,
    options: ConnectOptions,
    pub_options: PublisherOptions,
    subject: SubjectTemplate,
    id_field: str | None,
    on_error: OnError,
    show_progress: bool,
) -> int:
    tally = Tally()
    stopped = False
    progress = Progress(
        TextColumn("[bold]publishing"),
        BarColumn(),
        TextColumn("{task.completed:,} records"),
        TimeElapsedColumn(),
        console=err_console,
        disable=not show_progress,
    )
    async with await connect(options) as conn:
        pub = Publisher(conn, pub_options)
        await pub.start()
        started = time.monotonic()
        with progress:
            task = progress.add_task("publish", total=None)
            pending_progress = 0
            for item in read_records(source, fmt):
                if isinstance(item, RecordError):
                    tally.malformed += 1
                    err_console.print(f"[yellow]malformed[/] {item}", highlight=False)
                    if on_error is OnError.stop:
                        err_console.print("[bold red]stopping[/] (--on-error stop)")
                        stopped = True
                        break
                    continue
                try:
                    subj = subject.render(item)
                    if id_field is not None:
                        value = item.fields.get(id_field)
                        if value is None or str(value) == "":
                            raise RecordError(item.line, f"id field {id_field!r} is missing")
                        msg_id = str(value)
                    else:
                        msg_id = content_id(item)
                    future = await pub.publish(subj, item.data, msg_id=msg_id)
                except MessageTooLarge as exc:
                    tally.failed += 1
                    tally.errors.append(f"line {item.line}: {exc}")
                    continue
                except (RecordError, ConfigError) as exc:
                    tally.malformed += 1
                    text = exc if isinstance(exc, RecordError) else f"line {item.line}: {exc}"
                    err_console.print(f"[yellow]malformed[/] {text}", highlight=False)
                    if on_error is OnError.stop:
                        err_console.print("[bold red]stopping[/] (--on-error stop)")
                        stopped = True
                        break
                    continue
                future.add_done_callback(functools.partial(tally.on_done, item.line))
                pending_progress += 1
                if pending_progress >= 500:
                    progress.advance(task, pending_progress)
                    pending_progress = 0
            progress.advance(task, pending_progress)
            try:
                await pub.flush()
            except (PublishError, JetStreamError):
                pass  # every failure is already counted by Tally.on_done
        seconds = time.monotonic() - started
        try:
            await pub.close()
        except (PublishError, JetStreamError):
            pass
    console.print(_summary(tally, pub, seconds))
    for error in tally.errors:
        err_console.print(f"[bold red]failed[/] {error}", highlight=False)
    if tally.failed or stopped:
        return EXIT_FAILURE
    return 0


#: The CLI's defaults are the Publisher's.
_DEFAULTS = PublisherOptions()


@app.command("publish")
@cli_errors
@with_connect_options
def publish_command(
    file: str = typer.Argument(..., help="JSONL or CSV file, or '-' for stdin."),
    stream: str = typer.Option(..., "--stream", help="Target stream (must exist)."),
    subject: str = typer.Option(
        ..., "--subject", help="Subject, may use record fields: 'orders.{region}'."
    ),
    id_field: str | None = typer.Option(
        None, "--id-field", help="Record field holding the msg id."
    ),
    id_from_content: bool = typer.Option(
        False, "--id-from-content", help="Msg id = sha256 of the record's canonical JSON."
    ),
    fmt: InputFormat = typer.Option(InputFormat.auto, "--format", help="Input format."),
    on_error: OnError = typer.Option(
        OnError.stop, "--on-error", help="Malformed line: stop (exit 1) or skip it."
    ),
    max_inflight: int = typer.Option(
        _DEFAULTS.max_inflight, "--max-inflight", help="Unacknowledged publishes."
    ),
    ack_timeout: str = typer.Option(
        f"{_DEFAULTS.ack_timeout:g}s", "--ack-timeout", help="Re-send after this long."
    ),
    max_attempts: int = typer.Option(
        _DEFAULTS.max_attempts, "--max-attempts", help="Sends per message."
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bar."),
    *,
    options: ConnectOptions,
) -> None:
    """Publish every record of FILE exactly once (deterministic msg ids, acked, retried).

    Exit codes: 0 all stored or duplicates; 1 a publish failed or a malformed
    line stopped the run; 2 invalid options (or the stream's duplicate window
    is shorter than the retry horizon).
    """
    if (id_field is None) == (not id_from_content):
        raise ConfigError("give exactly one of --id-field FIELD or --id-from-content")
    check_stream_name(stream, "--stream")
    pub_options = PublisherOptions(
        stream=stream,
        max_inflight=max_inflight,
        ack_timeout=parse_duration("--ack-timeout", ack_timeout),
        max_attempts=max_attempts,
    )
    template = SubjectTemplate(subject)
    if file == "-":
        source: IO[bytes] = sys.stdin.buffer
    else:
        if not os.path.isfile(file):
            raise ConfigError(f"input file {file!r} not found")
        source = open(file, "rb")  # noqa: SIM115 - closed below
    try:
        peek = source.peek(4096) if hasattr(source, "peek") else b""
        first = next((line for line in peek.splitlines() if line.strip()), b"")
        chosen = detect_format(file, first) if fmt is InputFormat.auto else fmt
        code = run_async(
            _publish(
                source,
                chosen,
                options=options,
                pub_options=pub_options,
                subject=template,
                id_field=id_field,
                on_error=on_error,
                show_progress=progress and err_console.is_terminal,
            )
        )
    finally:
        if source is not sys.stdin.buffer:
            source.close()
    if code:
        raise typer.Exit(code)
