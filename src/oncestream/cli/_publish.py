"""`oncestream publish FILE|-`: load JSONL or CSV records into a stream, exactly once.

The verb around :func:`oncestream.load.load`: flags, the progress bar, the
summary, Ctrl-C and exit codes. For a regular file, progress records in the
server make a re-run add nothing, however late; stdin relies on msg-id
de-duplication inside the stream's duplicate window only.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import sys
from collections.abc import Coroutine
from dataclasses import replace
from enum import StrEnum
from typing import IO, Any

import typer
from rich.progress import (
    BarColumn,
    Progress,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from .._connection import connect
from .._errors import ConfigError, PermissionDenied, PublishFailed
from .._names import check_stream_name
from .._options import ConnectOptions, parse_duration, parse_rate
from ..load import (
    PROGRESS_STREAM,
    InputFormat,
    LoadIncomplete,
    LoadObserver,
    LoadOptions,
    LoadResult,
    LoadStart,
    load,
)
from ..load._internal import open_input
from ..publish import PublisherOptions
from ..tracing._internal import configure_from_env
from ._app import EXIT_CONFIG, EXIT_FAILURE, app, cli_errors, console, err_console, run_async
from ._connect_flags import with_connect_options
from ._process_extras import metrics_endpoint

__all__ = ["publish_command"]

EXIT_INTERRUPTED = 130
#: How the loader's messages name its options here: by their flags.
_FLAGS = {
    "stream": "--stream",
    "subject": "--subject",
    "id_field": "--id-field",
    "progress_stream": "--progress-stream",
    "fresh": "--fresh",
    "no_resume": "--no-resume",
    "patience": "--ack-timeout x --max-attempts",
}


class OnError(StrEnum):
    stop = "stop"
    skip = "skip"


def _summary(result: LoadResult) -> Table:
    table = Table(title="publish summary", title_justify="left")
    columns = ("sent", "stored", "duplicates", "failed", "retried", "malformed", "skipped")
    for column in (*columns, "msg/s"):
        table.add_column(column, justify="right")
    rate = result.sent / result.seconds if result.seconds > 0 else 0.0
    table.add_row(
        f"{result.sent:,}",
        f"{result.stored:,}",
        f"{result.duplicates:,}",
        f"[{'bold red' if result.failed else 'green'}]{result.failed:,}[/]",
        f"{result.retried:,}",
        f"[{'yellow' if result.malformed else 'green'}]{result.malformed:,}[/]",
        f"{result.skipped:,}",
        f"{rate:,.0f}",
    )
    return table


def _say(text: str) -> None:
    err_console.print(text, highlight=False, soft_wrap=True)


def _report(*, name: str, result: LoadResult, horizon: float, size_now: int | None) -> None:
    for error in result.errors[:3]:
        _say(f"[bold red]failed[/] {error}")
    if result.failed > 3:
        _say(f"[bold red]failed[/] ... and {result.failed - 3:,} more")
    total = f" of {result.lines:,}" if result.lines is not None else ""
    _say(
        f"publish {name}: stored {result.stored:,}, duplicates {result.duplicates:,}, "
        f"skipped (stored by an earlier run) {result.skipped:,}, failed {result.failed:,}, "
        f"malformed {result.malformed:,}; lines 1..{result.confirmed:,}{total} confirmed"
    )
    if result.rewritten:
        # Rewritten in place while read: the malformed line (or the early end) is the seam.
        _say(
            f"[yellow]cause:[/] {name} was rewritten while it was published "
            f"({result.rewritten}): the line read across the rewrite is torn (part of "
            "each version, or cut short), not malformed in the file; nothing was stored "
            "twice. Write a new version under another name and rename it into place (a "
            "rename never tears a line), then publish it"
        )
    elif result.size is not None and size_now is not None and size_now != result.size:
        how = "grew" if size_now > result.size else "shrank"
        then = (
            "re-run the same command to publish the lines added since"
            if result.resumable and how == "grew"
            else "what changed since was not published"
        )
        _say(
            f"[yellow]note:[/] {name} {how} from {result.size:,} to {size_now:,} bytes while it "
            f"was published; this run read only the {result.size:,} bytes ({result.lines:,} "
            f"lines) it had at the start: {then}"
        )
    if result.complete:
        return
    first = result.first_unconfirmed or result.confirmed + 1
    reason = "interrupted" if result.interrupted else "stopped"
    if isinstance(result.failure, PublishFailed) and not result.interrupted:
        reason = (
            f"gave up (no PubAck for the retry horizon, {horizon:g}s: server unreachable, "
            "or the stream without a leader?)"
        )
    remaining = (
        f"; {result.lines - result.read_to:,} lines not read" if result.lines is not None else ""
    )
    _say(f"[bold]{reason}[/]: first unconfirmed line {first:,}{remaining}")
    if result.refused:
        return  # the error line that follows says the way out; a plain re-run is refused again
    if not result.resumable:
        window = result.duplicate_window
        covered = f"{window:g}s" if window is not None else "its"
        _say(
            "resume: stdin (or --no-resume) keeps no progress; re-running sends every record "
            f"again and only the stream's duplicate window ({covered}) drops the stored ones"
        )
    elif result.progress_error is None and result.rewritten:
        _say(
            "resume: re-running the same command on the rewritten file is refused when the "
            f"lines 1..{result.confirmed:,} it published changed (it says how to start over)"
        )
    elif (
        result.progress_error is None and result.stopped and result.malformed and not result.failed
    ):
        _say(
            f"resume: fix line {first:,} (or pass --on-error skip) and re-run the same "
            f"command; lines 1..{result.confirmed:,} are not published again"
        )
    elif result.progress_error is None:
        _say(
            "resume: re-run the same command; it continues after line "
            f"{result.confirmed:,} and does not store again what this run stored"
        )
    else:
        _say(
            f"resume: re-run the same command (progress not recorded now: "
            f"{result.progress_error}; the re-run scans from the last recorded point and "
            "stores nothing twice)"
        )


def _install_sigint(stop: asyncio.Event) -> None:
    """Ctrl-C sets ``stop`` (the load then finishes what is in flight) instead of raising."""
    loop = asyncio.get_running_loop()

    def on_sigint() -> None:
        stop.set()
        # A second Ctrl-C ends the program at once.
        loop.remove_signal_handler(signal.SIGINT)

    try:
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread (tests)
        pass


def _remove_sigint() -> None:
    try:
        asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)
    except (NotImplementedError, RuntimeError, ValueError):
        pass


class _Console(LoadObserver):
    """The load as the command shows it: notes, the progress bar, malformed lines, Ctrl-C."""

    def __init__(self, name: str, progress: Progress, metrics: tuple[int | None, str]) -> None:
        self.name = name
        self.progress = progress
        self.metrics = metrics
        self.stop = asyncio.Event()
        self.task: TaskID | None = None
        self.exporter: Any = None

    def publishing(self, start: LoadStart) -> None:
        if start.changed_after:
            _say(
                f"[yellow]note:[/] {self.name} changed after line {start.start_line:,}; lines "
                f"1..{start.start_line:,}, already published, are unchanged: publishing what "
                "follows"
            )
        if start.resumed:
            _say(
                f"resuming {self.name} after line {start.start_line:,}: {start.known_ids:,} "
                "msg ids stored after the recorded point will not be sent again"
            )
        self.exporter = metrics_endpoint(start.publisher, *self.metrics)
        total = start.lines
        self.task = self.progress.add_task(
            "publish", total=total, of=f"{total:,}" if total else "?"
        )
        self.progress.update(self.task, completed=start.start_line)
        _install_sigint(self.stop)

    def line(self, line: int) -> None:
        if self.task is not None:
            self.progress.update(self.task, completed=line)

    def malformed(self, text: str) -> None:
        _say(f"[yellow]malformed[/] {text}")


async def _run(
    source: IO[bytes],
    *,
    name: str,
    options: ConnectOptions,
    load_options: LoadOptions,
    show_progress: bool,
    metrics: tuple[int | None, str] = (None, "127.0.0.1"),
) -> int:
    progress = Progress(
        TextColumn("[bold]publishing"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.completed:,}/{task.fields[of]} lines"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        disable=not show_progress,
    )
    shown = _Console(name, progress, metrics)
    pub = load_options.publisher
    patience = pub.patience
    limit = options.max_reconnect_attempts
    if limit != -1 and limit * options.reconnect_wait < patience:
        # A server restarting at start-up is waited for as long as a stalled one: the
        # connection must not give up reconnecting before the run's patience runs out.
        options = replace(
            options, max_reconnect_attempts=math.ceil(patience / options.reconnect_wait) + 1
        )
    async with await connect(options) as conn:
        try:
            with progress:
                try:
                    result = await load(conn, source, load_options, stop=shown.stop, observer=shown)
                except LoadIncomplete as exc:
                    result = exc.result
                if shown.task is not None:
                    progress.update(shown.task, completed=result.read_to)
        finally:
            _remove_sigint()
            if shown.exporter is not None:
                shown.exporter.close()
    if result.up_to_date:
        _say(
            f"nothing to publish: every record of {name} is already in stream "
            f"{result.stream!r} (an earlier run confirmed all {result.start_line:,} lines; "
            "--fresh publishes it again)"
        )
        return 0
    size_now = None
    if result.path is not None:
        try:
            size_now = os.stat(result.path).st_size
        except OSError:
            size_now = None
    console.print(_summary(result))
    _report(
        name=name,
        result=result,
        horizon=load_options.publisher_options().retry_horizon,
        size_now=size_now,
    )
    if result.refused:
        _say(f"[bold red]error:[/] {result.refused}")
        return EXIT_CONFIG
    if isinstance(result.failure, PermissionDenied):
        _say(f"[bold red]error:[/] PermissionDenied: {result.failure}")
        return EXIT_CONFIG
    if result.interrupted:
        return EXIT_INTERRUPTED
    if result.stopped and result.id_refused and not result.failed:
        return EXIT_CONFIG
    if result.failed or result.stopped:
        return EXIT_FAILURE
    if result.malformed and not (result.stored or result.duplicates or result.skipped):
        _say("[bold red]error:[/] every record was malformed: nothing was stored")
        return EXIT_FAILURE
    if not (result.stored or result.duplicates or result.skipped or result.malformed):
        _say(f"[yellow]warning:[/] {name} holds no records: nothing was published")
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
        None, "--id-field", help="Record field holding the msg id (a string or integer)."
    ),
    id_from_content: bool = typer.Option(
        False, "--id-from-content", help="Msg id = sha256 of the record's canonical JSON."
    ),
    fmt: InputFormat = typer.Option(InputFormat.auto, "--format", help="Input format."),
    on_error: OnError = typer.Option(
        OnError.stop,
        "--on-error",
        help="Malformed line: stop (exit 1; 2 when its id is refused) or skip it.",
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
    rate: float | None = typer.Option(
        None,
        "--rate",
        help="At most this many records per second (default: as fast as PubAcks come back).",
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bar."),
    metrics_port: int | None = typer.Option(
        None, "--metrics-port", help="Serve Prometheus metrics on this port (/metrics)."
    ),
    metrics_host: str = typer.Option(
        "127.0.0.1", "--metrics-host", help="Address the metrics endpoint binds to."
    ),
    resume: bool | None = typer.Option(
        None,
        "--resume/--no-resume",
        help="Record progress in the server and resume a re-run after it (regular files only; "
        "default: on for them).",
        show_default=False,
    ),
    fresh: bool = typer.Option(
        False,
        "--fresh",
        help="Ignore the file's recorded progress and publish it from line 1 (records "
        "stored before, outside the duplicate window, are stored again).",
    ),
    progress_stream: str = typer.Option(
        PROGRESS_STREAM,
        "--progress-stream",
        help="Stream for progress records (created when missing).",
    ),
    trace: bool = typer.Option(
        False,
        "--trace",
        help="A span and a W3C traceparent header per record (needs oncestream[otel]; "
        "exporter from OTEL_TRACES_EXPORTER: otlp, console or none).",
    ),
    *,
    options: ConnectOptions,
) -> None:
    """Publish every record of FILE exactly once; a re-run adds nothing, however late.

    A re-run of the same FILE to the same stream stores nothing twice, however
    late: progress is recorded in the server and the re-run resumes after it
    (a changed FILE is refused; --fresh starts over). With the server gone,
    the run gives up once a record has had no PubAck for the retry horizon
    (--max-attempts x --ack-timeout + backoff: 27.3s by default) plus the
    connect timeout (5s), prints the summary and how to resume. Ctrl-C does
    the same and exits 130.

    Exit codes: 0 all stored or already there; 1 a publish failed, a malformed
    line stopped the run, or every record was malformed; 2 invalid options or
    configuration (missing stream, subject of another stream, changed file,
    retry horizon longer than the stream's duplicate window, a subject or the
    reply inbox the user may not use) or a record id the server would read as
    another id; 130 interrupted.
    """
    if id_field is not None and id_from_content:
        raise ConfigError("give one of --id-field FIELD or --id-from-content, not both")
    if id_field is None and not id_from_content:
        raise ConfigError("give exactly one of --id-field FIELD or --id-from-content")
    if id_field is not None and not id_field.strip():
        raise ConfigError("--id-field must name a record field, got ''")
    check_stream_name(stream, "--stream")
    check_stream_name(progress_stream, "--progress-stream")
    if fresh and resume is False:
        raise ConfigError("--fresh and --no-resume contradict each other; give one")
    # A pipe or a device: no identity either (a missing FILE or a directory is named below).
    streamed = file == "-" or (os.path.exists(file) and not os.path.isfile(file))
    if (resume or fresh) and streamed and not os.path.isdir(file):
        what = "stdin ('-')" if file == "-" else f"{file!r}, which is not a regular file,"
        raise ConfigError(
            f"{'--fresh' if fresh else '--resume'} needs a regular FILE: {what} has no "
            "stable identity to record progress for, so a re-run cannot resume. Drop the "
            "flag: it is then published without progress records, and a re-run is "
            "de-duplicated only inside the stream's duplicate window"
        )
    if resume is None:
        resume = True
    if rate is not None:
        rate = parse_rate("--rate", rate)
    pub_options = PublisherOptions(
        max_inflight=max_inflight,
        ack_timeout=parse_duration("--ack-timeout", ack_timeout),
        max_attempts=max_attempts,
        tracing=trace,
    )
    if trace:
        configure_from_env("oncestream-publish")
    load_options = LoadOptions(
        stream=stream,
        subject=subject,
        id_field=id_field,
        id_from_content=id_from_content,
        format=fmt.value,
        on_error=on_error.value,
        resume=resume,
        fresh=fresh,
        progress_stream=progress_stream,
        rate=rate,
        publisher=pub_options,
        labels=_FLAGS,
    )
    if file == "-":
        if sys.stdin.isatty():
            raise ConfigError("FILE is '-' but stdin is a terminal: pipe the records in")
        source: IO[bytes] = sys.stdin.buffer
        name = "stdin"
    else:
        try:
            source = open_input(file, _say)
        except KeyboardInterrupt:
            _say(f"[bold]interrupted[/] while waiting for {file!r}: nothing was published")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        name = repr(file)
    try:
        if file != "-" and not os.path.isfile(file) and resume:
            # A pipe (e.g. <(zcat f.gz)) can be read once and has no identity.
            _say(f"[yellow]note:[/] {name} is not a regular file: no progress is recorded")
        code = _interruptible(
            _run(
                source,
                name=name,
                options=options,
                load_options=load_options,
                show_progress=progress and err_console.is_terminal,
                metrics=(metrics_port, metrics_host),
            )
        )
    finally:
        if file != "-":
            source.close()
    if code:
        raise typer.Exit(code)


def _interruptible(coro: Coroutine[Any, Any, int]) -> int:
    """Run the publish; a Ctrl-C outside the publishing phase (connect, resume scan) exits 130."""
    try:
        return run_async(coro)
    except KeyboardInterrupt:
        _say(
            "[bold]interrupted[/] before or after the publishing phase; "
            "re-run the same command to finish"
        )
        return EXIT_INTERRUPTED
