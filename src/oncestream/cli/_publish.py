"""`oncestream publish FILE|-`: load JSONL or CSV records into a stream, exactly once.

Each record gets a deterministic msg id (a field, or a hash of its content).
For a regular file, progress records in the server (``_progress``) make a
re-run add nothing, however long after the first run; stdin relies on msg-id
de-duplication inside the stream's duplicate window only.
"""

from __future__ import annotations

import io
import math
import os
import sys
import time
from collections.abc import Coroutine
from enum import StrEnum
from typing import IO, Any

import typer
from rich.progress import (
    BarColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from .._connection import connect
from .._errors import ConfigError, PermissionDenied, PublishFailed
from .._names import check_stream_name
from .._options import ConnectOptions, parse_duration
from ..publish import Publisher, PublisherOptions
from ..tracing import configure_from_env
from ._app import EXIT_CONFIG, EXIT_FAILURE, app, cli_errors, console, err_console, run_async
from ._connect_flags import with_connect_options
from ._process_extras import metrics_endpoint
from ._progress import PROGRESS_STREAM
from ._publish_input import (
    FileFacts,
    InputFormat,
    PrefixHasher,
    Record,
    RecordError,
    SubjectTemplate,
    check_text,
    content_id,
    detect_format,
    file_facts,
    open_input,
    read_items,
    read_records,
    snapshot,
)
from ._publish_plan import ResumePlan, check_target, plan_resume, refused_subject
from ._publish_run import (
    EXIT_INTERRUPTED,
    Confirmed,
    ProgressKeeper,
    RunState,
    Tally,
    drain,
    install_sigint,
    is_config_failure,
    new_run_id,
    publish_records,
    read_off_loop,
    remove_sigint,
)

__all__ = [
    "InputFormat",
    "Record",
    "RecordError",
    "SubjectTemplate",
    "content_id",
    "detect_format",
    "publish_command",
    "read_records",
]


class OnError(StrEnum):
    stop = "stop"
    skip = "skip"


def _summary(tally: Tally, pub: Publisher, seconds: float) -> Table:
    stats = pub.stats
    table = Table(title="publish summary", title_justify="left")
    columns = ("sent", "stored", "duplicates", "failed", "retried", "malformed", "skipped")
    for column in (*columns, "msg/s"):
        table.add_column(column, justify="right")
    rate = stats.sent / seconds if seconds > 0 else 0.0
    table.add_row(
        f"{stats.sent:,}",
        f"{tally.stored:,}",
        f"{tally.duplicates:,}",
        f"[{'bold red' if tally.failed else 'green'}]{tally.failed:,}[/]",
        f"{stats.retried:,}",
        f"[{'yellow' if tally.malformed else 'green'}]{tally.malformed:,}[/]",
        f"{tally.already:,}",
        f"{rate:,.0f}",
    )
    return table


def _say(text: str) -> None:
    err_console.print(text, highlight=False, soft_wrap=True)


def _report(
    *,
    name: str,
    facts: FileFacts | None,
    tally: Tally,
    state: RunState,
    confirmed: Confirmed,
    plan: ResumePlan,
    progress_error: str | None,
    window: float | None,
    horizon: float,
    size_now: int | None = None,
) -> None:
    for error in tally.errors[:3]:
        _say(f"[bold red]failed[/] {error}")
    if tally.failed > 3:
        _say(f"[bold red]failed[/] ... and {tally.failed - 3:,} more")
    total = f" of {facts.lines:,}" if facts is not None else ""
    _say(
        f"publish {name}: stored {tally.stored:,}, duplicates {tally.duplicates:,}, "
        f"skipped (stored by an earlier run) {tally.already:,}, failed {tally.failed:,}, "
        f"malformed {tally.malformed:,}; lines 1..{confirmed.line:,}{total} confirmed"
    )
    if facts is not None and size_now is not None and size_now != facts.size:
        how = "grew" if size_now > facts.size else "shrank"
        then = (
            "re-run the same command to publish the lines added since"
            if plan.store is not None and how == "grew"
            else "what changed since was not published"
        )
        _say(
            f"[yellow]note:[/] {name} {how} from {facts.size:,} to {size_now:,} bytes while it "
            f"was published; this run read only the {facts.size:,} bytes ({facts.lines:,} "
            f"lines) it had at the start: {then}"
        )
    finished = state.eof and confirmed.first_unconfirmed is None and not tally.failed
    if finished:
        return
    first = confirmed.first_unconfirmed or confirmed.line + 1
    reason = "interrupted" if state.interrupted else "stopped"
    if isinstance(tally.fatal, PublishFailed) and not state.interrupted:
        reason = f"gave up (no PubAck for the retry horizon, {horizon:g}s: server unreachable?)"
    remaining = f"; {facts.lines - state.read_to:,} lines not read" if facts is not None else ""
    _say(f"[bold]{reason}[/]: first unconfirmed line {first:,}{remaining}")
    if plan.store is None:
        covered = f"{window:g}s" if window is not None else "its"
        _say(
            "resume: stdin (or --no-resume) keeps no progress; re-running sends every record "
            f"again and only the stream's duplicate window ({covered}) drops the stored ones"
        )
    elif progress_error is None and state.stopped and tally.malformed and not tally.failed:
        _say(
            f"resume: fix line {first:,} (or pass --on-error skip) and re-run the same "
            f"command; lines 1..{confirmed.line:,} are not published again"
        )
    elif progress_error is None:
        _say(
            "resume: re-run the same command; it continues after line "
            f"{confirmed.line:,} and does not store again what this run stored"
        )
    else:
        _say(
            f"resume: re-run the same command (progress not recorded now: {progress_error}; "
            "the re-run scans from the last recorded point and stores nothing twice)"
        )


async def _run(
    source: IO[bytes],
    fmt: InputFormat,
    *,
    name: str,
    facts: FileFacts | None,
    options: ConnectOptions,
    pub_options: PublisherOptions,
    subject: SubjectTemplate,
    id_field: str | None,
    skip_on_error: bool,
    show_progress: bool,
    progress_stream: str | None,
    fresh: bool,
    hasher: PrefixHasher | None,
    rate: float | None = None,
    metrics: tuple[int | None, str] = (None, "127.0.0.1"),
) -> int:
    stream = pub_options.stream
    assert stream is not None
    ids = f"field:{id_field}" if id_field is not None else "content"
    needed = {n: "--subject" for n in subject.fields}
    if id_field is not None:
        needed[id_field] = "--id-field"
    async with await connect(options) as conn:
        info = await check_target(conn, stream, subject)
        plan = ResumePlan()
        if facts is not None and hasher is not None and progress_stream is not None:
            plan = await plan_resume(
                conn,
                info=info,
                facts=facts,
                template=subject,
                ids=ids,
                progress_stream=progress_stream,
                fresh=fresh,
                run=new_run_id(),
                hasher=hasher,
                ack_timeout=pub_options.ack_timeout,
                max_attempts=pub_options.max_attempts,
            )
        if plan.done:
            _say(
                f"nothing to publish: every record of {name} is already in stream {stream!r} "
                f"(an earlier run confirmed all {plan.skip_to:,} lines; --fresh publishes it again)"
            )
            return 0
        if plan.changed_after:
            _say(
                f"[yellow]note:[/] {name} changed after line {plan.skip_to:,}; lines "
                f"1..{plan.skip_to:,}, already published, are unchanged: publishing what follows"
            )
        if plan.resumed:
            _say(
                f"resuming {name} after line {plan.skip_to:,}: {len(plan.found):,} msg ids "
                "stored after the recorded point will not be sent again"
            )
        pub = Publisher(conn, pub_options)
        exporter = metrics_endpoint(pub, *metrics)
        await pub.start()
        tally = Tally(max_seq=int(info.get("state", {}).get("last_seq", 0)))
        confirmed = Confirmed(plan.skip_to, tally.max_seq, plan.inherited_to, plan.inherited_floor)
        keeper = ProgressKeeper(plan.store, plan.base, confirmed, hasher)
        keeper.chunk = max(2 * pub_options.max_inflight, 1000)
        state = RunState()
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
        total = facts.lines if facts is not None else None
        items = read_items(source, fmt, skip_to=plan.skip_to, needed=needed)
        install_sigint(state)
        try:
            with progress:
                task = progress.add_task("publish", total=total, of=f"{total:,}" if total else "?")
                progress.update(task, completed=plan.skip_to)
                await publish_records(
                    conn,
                    pub,
                    items if facts is not None else read_off_loop(items),
                    subject=subject,
                    id_field=id_field,
                    skip_on_error=skip_on_error,
                    found=plan.found,
                    confirmed=confirmed,
                    keeper=keeper,
                    tally=tally,
                    state=state,
                    on_line=lambda line: progress.update(task, completed=line),
                    say=_say,
                    rate=rate,
                )
                await drain(pub, tally, state, options.connect_timeout)
                progress.update(task, completed=state.read_to)
            confirmed.advance(tally.max_seq)
            done = state.eof and confirmed.first_unconfirmed is None and not tally.failed
            progress_error = state.progress_error or await keeper.final(
                done=done, budget=options.connect_timeout
            )
        finally:
            remove_sigint()
            if plan.store is not None:
                await plan.store.close()
            if exporter is not None:
                exporter.close()
        seconds = time.monotonic() - state.started
        refused = (
            await refused_subject(conn, stream, tally) if is_config_failure(tally.fatal) else ""
        )
    size_now = None
    if facts is not None:
        try:
            size_now = os.stat(facts.path).st_size
        except OSError:
            size_now = None
    console.print(_summary(tally, pub, seconds))
    _report(
        size_now=size_now,
        name=name,
        facts=facts,
        tally=tally,
        state=state,
        confirmed=confirmed,
        plan=plan,
        progress_error=progress_error,
        window=pub.duplicate_window,
        horizon=pub_options.retry_horizon,
    )
    if refused:
        _say(f"[bold red]error:[/] {refused}")
        return EXIT_CONFIG
    if isinstance(tally.fatal, PermissionDenied):
        _say(f"[bold red]error:[/] PermissionDenied: {tally.fatal}")
        return EXIT_CONFIG
    if state.interrupted:
        return EXIT_INTERRUPTED
    if state.stopped and state.id_refused and not tally.failed:
        return EXIT_CONFIG
    if tally.failed or state.stopped:
        return EXIT_FAILURE
    if tally.malformed and not (tally.stored or tally.duplicates or tally.already):
        _say("[bold red]error:[/] every record was malformed: nothing was stored")
        return EXIT_FAILURE
    if not (tally.stored or tally.duplicates or tally.already or tally.malformed):
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
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise ConfigError(f"--rate must be a positive number of records per second, got {rate!r}")
    pub_options = PublisherOptions(
        stream=stream,
        max_inflight=max_inflight,
        ack_timeout=parse_duration("--ack-timeout", ack_timeout),
        max_attempts=max_attempts,
        tracing=trace,
        # The resume record keeps the stream sequence each record was stored at,
        # which fast-ingest batches do not report per message.
        ingest="acks",
    )
    if trace:
        configure_from_env("oncestream-publish")
    template = SubjectTemplate(subject)
    facts: FileFacts | None = None
    hasher: PrefixHasher | None = None
    if file == "-":
        if sys.stdin.isatty():
            raise ConfigError("FILE is '-' but stdin is a terminal: pipe the records in")
        source: IO[bytes] = sys.stdin.buffer
        if not hasattr(source, "peek"):
            source = io.BufferedReader(source)  # type: ignore[type-var]
        name = "stdin"
    else:
        try:
            source = open_input(file, _say)
        except KeyboardInterrupt:
            _say(f"[bold]interrupted[/] while waiting for {file!r}: nothing was published")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        name = repr(file)
    try:
        peek = source.peek(4096) if hasattr(source, "peek") else b""
        if file == "-":
            check_text("-", peek[:4096])
        elif os.path.isfile(file):
            facts = file_facts(file, source)
            source = snapshot(source, facts)
            hasher = PrefixHasher(file)
        elif resume:
            # A pipe (e.g. <(zcat f.gz)) can be read once and has no identity.
            _say(f"[yellow]note:[/] {name} is not a regular file: no progress is recorded")
        first = next((line for line in peek.splitlines() if line.strip()), b"")
        chosen = detect_format(file, first) if fmt is InputFormat.auto else fmt
        code = _interruptible(
            _run(
                source,
                chosen,
                name=name,
                facts=facts,
                options=options,
                pub_options=pub_options,
                subject=template,
                id_field=id_field,
                skip_on_error=on_error is OnError.skip,
                show_progress=progress and err_console.is_terminal,
                progress_stream=progress_stream if resume else None,
                fresh=fresh,
                hasher=hasher,
                rate=rate,
                metrics=(metrics_port, metrics_host),
            )
        )
    finally:
        if file != "-":
            source.close()
        if hasher is not None:
            hasher.close()
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
