"""`oncestream doctor`: a server, its streams and consumers against what exactly-once needs."""

from __future__ import annotations

import typer
from rich.text import Text

from .._connection import connect
from .._errors import ConfigError
from .._names import check_stream_name
from .._options import ConnectOptions, parse_duration, parse_positive_int
from ..doctor import DoctorOptions, DoctorReport, Target, diagnose
from ..doctor._internal import SPARK_TASK_MAX_FAILURES, parse_target
from ..publish import PublisherOptions
from ..streams import list_streams
from ._app import app, cli_errors, console, run_async
from ._connect_flags import with_connect_options
from ._output import print_json
from ._rows import BOOKKEEPING_PREFIX

_DEFAULTS = PublisherOptions()
_LABELS = {
    "breaks": ("BREAKS", "bold red"),
    "warning": ("warning", "yellow"),
    "note": ("note", "cyan"),
    "ok": ("ok", "green"),
}


@app.command("doctor")
@cli_errors
@with_connect_options
def doctor_command(
    streams: list[str] | None = typer.Argument(
        None,
        help="STREAM (with all its consumers) or STREAM/CONSUMER; repeat for several "
        "(default: every stream but oncestream's bookkeeping ones).",
    ),
    ack_timeout: str = typer.Option(
        f"{_DEFAULTS.ack_timeout:g}s",
        "--ack-timeout",
        help="The Publisher's ack timeout: with --max-attempts and the backoff, the retry "
        "horizon every duplicate window must cover.",
    ),
    max_attempts: int = typer.Option(
        _DEFAULTS.max_attempts, "--max-attempts", help="The Publisher's sends per message."
    ),
    task_max_failures: int = typer.Option(
        SPARK_TASK_MAX_FAILURES,
        "--task-max-failures",
        help="Spark task attempts the jetstream sink assumes (its taskMaxFailures).",
    ),
    monitor: list[str] | None = typer.Option(
        None,
        "--monitor",
        metavar="URL",
        help="A server's monitoring URL (http://HOST:8222): its /varz tells how often that "
        "server fsyncs (sync_interval). Repeat it for each server of a cluster: a stream's "
        "policy is known when every server holding it was read.",
    ),
    max_deliver: str = typer.Option(
        str(DoctorOptions.max_deliver),
        "--max-deliver",
        metavar="N",
        help="The Processor's --max-deliver (attempts before it dead-letters): a consumer's "
        "own max_deliver must be -1 or above it.",
    ),
    dead_letter_stream: str | None = typer.Option(
        None,
        "--dead-letter-stream",
        metavar="STREAM",
        help="The Processor's --dead-letter-stream: with it, a consumer max_deliver above "
        "--max-deliver is what the Processor accepts (without: a warning).",
    ),
    show_all: bool = typer.Option(
        False, "--all", "-a", help="Without STREAM: check oncestream's bookkeeping streams too."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts."),
    *,
    options: ConnectOptions,
) -> None:
    """Check a server, streams and consumers against what exactly-once needs, with fixes.

    Each finding comes with the command that fixes it. Checks the server's release
    against the known-bug table (by patch level), each
    stream's duplicate window against the Publisher's and the Spark sink's retry
    horizons, its storage and replicas (and, with --monitor, each server's fsync
    policy), fast-ingest batches, and each consumer's ack policy, ack wait and max
    deliver (by the Processor's rule: give it the Processor's --max-deliver and
    --dead-letter-stream). Exit 0 when nothing breaks a guarantee (warnings allowed),
    1 when a finding does, 2 for bad usage (a stream or consumer that does not exist,
    a --monitor that is not a NATS monitoring endpoint or not of this cluster's servers).
    """
    if task_max_failures < 1:
        raise ConfigError(f"--task-max-failures must be >= 1, got {task_max_failures}")
    if dead_letter_stream is not None:
        check_stream_name(dead_letter_stream, "--dead-letter-stream")
    targets = [parse_target(text) for text in streams or []]
    doctor_options = DoctorOptions(
        publisher=PublisherOptions(
            ack_timeout=parse_duration("--ack-timeout", ack_timeout), max_attempts=max_attempts
        ),
        task_max_failures=task_max_failures,
        monitor=tuple(monitor) if monitor else None,
        max_deliver=parse_positive_int("--max-deliver", max_deliver),
        dead_letter_stream=dead_letter_stream,
    )

    async def main() -> DoctorReport:
        async with await connect(options) as conn:
            chosen = targets or [
                Target(str(info["config"]["name"]))
                for info in await list_streams(conn)
                if show_all or not str(info["config"]["name"]).startswith(BOOKKEEPING_PREFIX)
            ]
            return await diagnose(conn, chosen, doctor_options)

    report = run_async(main())
    if as_json:
        print_json(report.to_json())
    else:
        _print(report)
    if report.exit_code:
        raise typer.Exit(report.exit_code)


def _print(report: DoctorReport) -> None:
    server = report.server
    where = f"cluster {server['cluster']}" if server.get("cluster") else "a single server"
    version = server.get("version") or "(version not announced)"
    console.print(f"nats-server {version}, {where}", highlight=False, markup=False)
    for finding in report.findings:
        label, style = _LABELS[finding.severity]
        console.print(
            Text.assemble((f"{label:<8}", style), f" {finding.target}: {finding.message}"),
            highlight=False,
        )
        if finding.fix:
            console.print(f"{'':<8} fix: {finding.fix}", highlight=False, markup=False)
        if finding.reference:
            console.print(f"{'':<8} see: {finding.reference}", highlight=False, markup=False)
    console.print(report.summary(), highlight=False, markup=False)
