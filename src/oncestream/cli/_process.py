"""`oncestream process`: run an exactly-once worker (like ``celery -A`` / ``faust worker``)."""

from __future__ import annotations

import asyncio
import importlib
import logging
import sys
from typing import Any

import typer

from .._connection import Connection, connect
from .._errors import ConfigError
from .._names import check_consumer_name, check_stream_name, check_subject_filter
from .._options import ConnectOptions, parse_duration
from .._private import redact_url
from ..ledger import ledger_from_url
from ..ledger._internal import check_ledger_target
from ..process import Handler, Processor, ProcessorOptions, ProcessorStats
from ..process._internal import check_handler, check_prune_interval
from ..read._internal import check_group_name
from ..tracing._internal import configure_from_env
from ._app import app, cli_errors, run_async
from ._connect_flags import with_connect_options
from ._process_extras import RecentRate, metrics_endpoint, start_position
from ._process_group import group_options, group_priority, run_group
from ._stopsignals import StopSignals

log = logging.getLogger(__name__)


def load_handler(path: str) -> Handler:
    """Import ``module:function`` (the current directory is importable).

    Raises:
        ConfigError: the path is malformed, the module cannot be imported, or
            the attribute is missing or not callable.
    """
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"--handler must be module:function, got {path!r}")
    if "" not in sys.path:
        sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:  # a module that exits on import is a bad handler too
        raise ConfigError(f"--handler {path!r}: cannot import {module_name!r}: {exc!r}") from None
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ConfigError(f"--handler {path!r}: {module_name!r} has no attribute {attr!r}")
    check_handler(target, f"--handler {path!r}")
    handler: Handler = target
    return handler


def summary(stats: ProcessorStats, rate: float | None = None) -> str:
    """The one-line progress summary; ``rate`` is the recent rate (default: since start)."""
    data = stats.as_dict()
    return (
        f"applied={data['applied']} suppressed={data['suppressed']} failed={data['failed']} "
        f"dead_lettered={data['dead_lettered']} "
        f"rate={data['rate'] if rate is None else rate:.0f} msg/s "
        f"elapsed={data['elapsed']:.0f}s"
    )


#: Seconds between --progress lines: faster floods the log, slower is a typo.
PROGRESS_EVERY = (0.1, 86400.0)

#: The CLI's defaults are the Processor's.
_DEFAULTS = ProcessorOptions()


@app.command("process")
@cli_errors
@with_connect_options
def process_command(
    handler: str = typer.Option(..., "--handler", help="module:function called as f(msg, tx)."),
    stream: str = typer.Option(..., "--stream", help="Stream to process."),
    consumer: str = typer.Option(
        ..., "--consumer", help="Durable pull consumer (created if absent)."
    ),
    ledger: str = typer.Option(
        ...,
        "--ledger",
        help="sqlite:///relative.db, sqlite:////abs/path.db or postgresql://user@host/db",
    ),
    batch: int = typer.Option(_DEFAULTS.batch, help="Messages per pull and per transaction."),
    max_deliver: int = typer.Option(_DEFAULTS.max_deliver, help="Attempts before dead-lettering."),
    dead_letter_stream: str | None = typer.Option(
        None, "--dead-letter-stream", help="Stream for messages that failed max-deliver times."
    ),
    ack_wait: str = typer.Option(
        f"{_DEFAULTS.ack_wait:g}s", help="Ack wait of a consumer created here."
    ),
    backoff: str = typer.Option(
        ",".join(f"{b:g}s" for b in _DEFAULTS.backoff), help="Nak delays after each failure."
    ),
    key: str = typer.Option("sequence", help="Ledger key: sequence or msg_id."),
    filter_subject: str | None = typer.Option(None, "--filter-subject", help="Consumer filter."),
    bind: bool = typer.Option(
        False,
        help="Use the consumer as is: no STREAM/CONSUMER API calls (one STREAM.INFO at the "
        "first dead letter).",
    ),
    progress: float = typer.Option(10.0, help="Seconds between progress lines (0 = none)."),
    start_seq: int | None = typer.Option(
        None, "--start-seq", help="A consumer created here starts at this stream sequence."
    ),
    start_time: str | None = typer.Option(
        None,
        "--start-time",
        help="A consumer created here starts at this time (ISO 8601 with a zone, or '1h' ago).",
    ),
    new_only: bool = typer.Option(
        False, "--new-only", help="A consumer created here gets only messages stored from now."
    ),
    metrics_port: int | None = typer.Option(
        None, "--metrics-port", help="Serve Prometheus metrics on this port (/metrics)."
    ),
    metrics_host: str = typer.Option(
        "127.0.0.1", "--metrics-host", help="Address the metrics endpoint binds to."
    ),
    standby: bool = typer.Option(
        False,
        "--standby",
        help="Active/standby: one instance of the group applies, the others wait and take "
        "over when it stops pulling (pinned priority group; server 2.14+).",
    ),
    takeover_after: str | None = typer.Option(
        None,
        "--takeover-after",
        help="With --standby: how long the active instance may stay silent before a standby "
        f"takes over (the bound on the takeover time; >= 2s; default {_DEFAULTS.pinned_ttl:g}s; "
        "an existing consumer's must be the same).",
    ),
    overflow_min_pending: int | None = typer.Option(
        None,
        "--overflow-min-pending",
        help="Spill-over worker: pull only while at least N messages wait (overflow policy).",
    ),
    priority_group: str | None = typer.Option(
        None,
        "--priority-group",
        help="Priority group name for --standby / --overflow-min-pending (default oncestream).",
    ),
    prune_interval: str = typer.Option(
        f"{_DEFAULTS.prune_interval:g}s",
        "--prune-interval",
        help="How often ledger rows at or below the consumer's ack floor are deleted "
        "(0 = never: every row is kept; otherwise at least 0.1s). What was pruned is "
        "still never applied again.",
    ),
    prune_grace: str = typer.Option(
        f"{_DEFAULTS.prune_grace:g}s",
        "--prune-grace",
        help="Prune only up to the ack floor seen this long ago.",
    ),
    ack_policy: str = typer.Option(
        _DEFAULTS.ack_policy,
        "--ack-policy",
        help="explicit: every message acked, several instances may share the consumer; all: "
        "one ack per batch, one instance at a time (a consumer created here gets it; an "
        "existing one must have it; server 2.14+).",
    ),
    member: str | None = typer.Option(
        None,
        "--member",
        help="Run as member NAME of a group over a partitioned stream (--consumer names the "
        "group): the partitions are shared among the live members, each applied by one at "
        "a time; the others take a member's share when it stops or dies (server 2.14+).",
    ),
    static_member: str | None = typer.Option(
        None,
        "--static-member",
        metavar="I/N",
        help="Member I of a fixed N (0 <= I < N): partitions I, I+N, ... and no membership; "
        "a dead member's partitions wait for it (or another instance with the same I).",
    ),
    member_ttl: str | None = typer.Option(
        None,
        "--member-ttl",
        help="With --member: how long a member may stay silent before the others take its "
        "partitions (whole seconds; default 4s).",
    ),
    after: str | None = typer.Option(
        None,
        "--after",
        help="With --member/--static-member: apply nothing until this consumer (the one that "
        "processed the stream before it was partitioned) has finished what it holds.",
    ),
    trace: bool = typer.Option(
        False,
        "--trace",
        help="A span per message, child of its traceparent, with the ledger's outcome "
        "(needs oncestream[otel]; exporter from OTEL_TRACES_EXPORTER).",
    ),
    *,
    options: ConnectOptions,
) -> None:
    """Apply every message of STREAM exactly once through HANDLER and a ledger.

    SIGTERM / Ctrl-C finishes the in-flight batch, commits, acks and exits 0; during
    start-up it stops before the next step (nothing applied) and exits 0 too. It exits
    1 when it leaves a message the server stopped delivering to a `consumer reset`.
    """

    check_stream_name(stream, "--stream")
    check_consumer_name(consumer, "--consumer")
    if dead_letter_stream is not None:
        check_stream_name(dead_letter_stream, "--dead-letter-stream")
    if filter_subject is not None:
        check_subject_filter(filter_subject, "--filter-subject")

    if progress != 0 and not PROGRESS_EVERY[0] <= progress <= PROGRESS_EVERY[1]:
        raise ConfigError(
            f"--progress must be 0 (no progress lines) or from {PROGRESS_EVERY[0]:g} to "
            f"{PROGRESS_EVERY[1]:g} seconds, got {progress:g}"
        )
    if ack_policy not in ("explicit", "all"):
        raise ConfigError(f"--ack-policy must be explicit or all, got {ack_policy!r}")
    grouped = member is not None or static_member is not None
    if not grouped and after is not None:
        raise ConfigError("--after applies only with --member or --static-member")
    if member is None and member_ttl is not None:
        # A static member has no membership key to expire, a lone Processor no group:
        # the flag would be ignored silently.
        raise ConfigError(
            f"--member-ttl {member_ttl} applies only with --member (elastic membership); "
            "drop it, or run as --member NAME"
        )
    if not grouped and "{partition}" in ledger:
        # A lone Processor would create a file literally named ...-{partition}.db.
        raise ConfigError(
            f"--ledger {redact_url(ledger)}: {{partition}} is replaced by each partition's "
            "number only with --member or --static-member; give a ledger without it, or run "
            "as a member of a group"
        )
    priority = (
        group_priority(
            standby,
            takeover_after,
            overflow_min_pending,
            priority_group,
            bind,
            filter_subject,
        )
        if grouped
        else _priority_options(standby, takeover_after, overflow_min_pending, priority_group)
    )
    interval = check_prune_interval("--prune-interval", prune_interval)
    grace = parse_duration("--prune-grace", prune_grace)

    async def main(stop: StopSignals) -> object:
        stop.attach()
        try:
            stats = await _start_and_run(stop)
        finally:
            stop.detach()
        if isinstance(stats, ProcessorStats):
            log.info("stopped: %s", summary(stats))
        return stats

    async def _start_and_run(stop: StopSignals) -> object:
        conn_options = options.replace(name=f"oncestream-process-{consumer}")
        func = load_handler(handler)
        check_ledger_target(ledger.replace("{partition}", "0"))
        proc_options = ProcessorOptions(
            batch=batch,
            max_deliver=max_deliver,
            dead_letter_stream=dead_letter_stream,
            ack_wait=parse_duration("--ack-wait", ack_wait),
            backoff=tuple(
                parse_duration("--backoff", part.strip())
                for part in backoff.split(",")
                if part.strip()
            ),
            filter_subject=filter_subject,
            bind=bind,
            start=start_position(start_seq, start_time, new_only),
            tracing=trace,
            prune_interval=interval,
            prune_grace=grace,
            ack_policy=ack_policy,
            **priority,
        )
        if trace:
            configure_from_env(f"oncestream-process-{consumer}")
        if grouped:
            options_ = group_options(member, static_member, member_ttl, after)
            return await run_group(
                stop, conn_options, stream, consumer, func, ledger, key, proc_options, options_,
                progress, metrics_port, metrics_host,
            )  # fmt: skip
        store = ledger_from_url(ledger, key=key)  # type: ignore[arg-type]
        conn = await stop.unless_stopped(connect(conn_options), close=Connection.close)
        if conn is None:
            log.info("stop asked for while connecting: nothing was applied")
            return ProcessorStats()
        async with conn:
            processor = Processor(conn, stream, consumer, func, ledger=store, options=proc_options)
            if stop.requested:  # before the ledger or the consumer was touched
                log.info("stop asked for before processing began: nothing was applied")
                return processor.stats
            stop.on_stop(processor.request_stop)
            exporter = metrics_endpoint(processor, metrics_port, metrics_host)
            reporter = asyncio.create_task(_report(processor, progress))
            log.info("processing %s/%s with %s into %r", stream, consumer, handler, store)
            try:
                return await processor.run()
            finally:
                reporter.cancel()
                # Waited for without suppressing CancelledError: that would swallow a
                # cancellation of this task too.
                await asyncio.wait({reporter})
                if exporter is not None:
                    exporter.close()

    # Signals are a stop request from here on (never a cancellation that start-up
    # code could swallow): see StopSignals.
    with StopSignals() as stop:
        run_async(main(stop))


def _priority_options(
    standby: bool, takeover_after: str | None, overflow_min_pending: int | None, group: str | None
) -> dict[str, Any]:
    """ProcessorOptions fields for --standby / --overflow-min-pending (validated here).

    A flag that only applies with another one is refused without it, rather than
    ignored: a worker started with ``--takeover-after 2s`` but no ``--standby``
    would otherwise pull like any other instance, which its user did not ask for.
    """
    if takeover_after is not None and not standby:
        raise ConfigError(
            f"--takeover-after {takeover_after} applies only with --standby (how long the "
            "active instance may stay silent before a standby takes over); add --standby, "
            "or drop --takeover-after"
        )
    if group is not None and not standby and overflow_min_pending is None:
        raise ConfigError(
            f"--priority-group {group} applies only with --standby or --overflow-min-pending; "
            "add one, or drop --priority-group"
        )
    group = "oncestream" if group is None else group
    ttl = parse_duration(
        "--takeover-after",
        f"{_DEFAULTS.pinned_ttl:g}s" if takeover_after is None else takeover_after,
    )
    if standby and overflow_min_pending is not None:
        raise ConfigError("--standby and --overflow-min-pending exclude each other; pick one")
    if overflow_min_pending is not None:
        if overflow_min_pending < 1:
            raise ConfigError(f"--overflow-min-pending must be >= 1, got {overflow_min_pending}")
        return {
            "priority_group": check_group_name(group, "--priority-group"),
            "policy": "overflow",
            "min_pending": overflow_min_pending,
        }
    if not standby:
        return {}
    if ttl < 2:
        raise ConfigError(f"--takeover-after must be at least 2s, got {takeover_after!r}")
    return {
        "priority_group": check_group_name(group, "--priority-group"),
        "policy": "pinned",
        "pinned_ttl": ttl,
    }


async def _report(processor: Processor, interval: float) -> None:
    if interval <= 0:
        return
    rate = RecentRate()
    rate.update(processor.stats.applied)
    while True:
        await asyncio.sleep(interval)
        stats = processor.stats
        log.info("%s", summary(stats, rate.update(stats.applied)))
