"""`oncestream status`: stream and consumer reports, like the nats CLI's."""

from __future__ import annotations

from typing import Any

import orjson
import typer

from .._connection import Connection, connect
from .._errors import ConfigError
from .._names import check_consumer_name, check_stream_name
from .._options import ConnectOptions
from ..ledger._internal import read_applied_count
from ..process._internal import group_report
from ..streams import Partitioning, consumer_info, list_consumers, list_streams, stream_info
from ..streams._internal import upstream_rows
from ._app import app, cli_errors, console, run_async
from ._connect_flags import with_connect_options
from ._output import print_table, rows_table
from ._rows import BOOKKEEPING_PREFIX, consumer_row, hidden_note, stream_row
from ._watch import watch

#: The --interval of --watch, in seconds: faster hammers the server, slower is a typo.
WATCH_INTERVAL = (0.1, 3600.0)


async def collect(
    conn: Connection,
    stream: str | None,
    consumer: str | None,
    ledger_url: str | None,
    *,
    show_all: bool = False,
) -> dict[str, Any]:
    """The report as plain data (what ``--json`` prints).

    Without STREAM: every stream but oncestream's bookkeeping ones (``show_all``:
    those too); ``hidden`` counts the ones left out.
    """
    if stream is None:
        infos = await list_streams(conn)
        rows = [stream_row(i, settings=False) for i in infos]
        shown = [r for r in rows if show_all or not str(r["stream"]).startswith(BOOKKEEPING_PREFIX)]
        return {"streams": shown, "hidden": len(rows) - len(shown)}
    info = await stream_info(conn, stream)
    report: dict[str, Any] = {"stream": stream_row(info, settings=False)}
    upstreams = upstream_rows(info)
    if upstreams:  # a mirror, or a stream sourcing others (a hub): how far each is behind
        report["upstreams"] = upstreams
    if consumer is None:
        infos = await list_consumers(conn, stream)
        report["consumers"] = [consumer_row(i, with_filter=False) for i in infos]
        if ledger_url:  # the ledger counts per stream: report it with the stream
            report["stream"]["ledger_applied"] = read_applied_count(ledger_url, stream)
        partitioning = Partitioning.from_config(info.get("config") or {})
        if partitioning is not None:  # who applies which partition, and how far behind
            report["partitions"] = await group_report(conn, stream, partitioning, infos)
    else:
        row = consumer_row(await consumer_info(conn, stream, consumer), with_filter=False)
        if ledger_url:
            row["ledger_applied"] = read_applied_count(ledger_url, stream)
        report["consumers"] = [row]
    return report


@app.command("status")
@cli_errors
@with_connect_options
def status_command(
    stream: str | None = typer.Argument(None, help="Stream to report on (default: all)."),
    consumer: str | None = typer.Argument(None, help="Consumer of STREAM to report on."),
    ledger: str | None = typer.Option(
        None,
        "--ledger",
        help="Ledger URL (read-only, never created): adds what it recorded as settled "
        "(applied or dead-lettered) for STREAM (sqlite:///path.db or "
        "postgresql://user@host/db).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts."),
    watch: bool = typer.Option(
        False,
        "--watch",
        "-w",
        help="Refresh until Ctrl-C, with per-second rates, each consumer's lag and the time "
        "to catch up (with --json: one JSON object per refresh and line).",
    ),
    interval: float = typer.Option(2.0, "--interval", help="Seconds between --watch refreshes."),
    count: int | None = typer.Option(None, "--count", help="Stop --watch after N refreshes."),
    show_all: bool = typer.Option(
        False, "--all", "-a", help="Also list oncestream's bookkeeping streams (ONCESTREAM_*)."
    ),
    *,
    options: ConnectOptions,
) -> None:
    """Streams (messages, bytes, first/last seq, consumers) and consumers (pending, acks)."""

    if ledger is not None and stream is None:
        raise ConfigError("--ledger needs STREAM: the ledger counts what was applied per stream")
    if stream is not None:
        check_stream_name(stream, "STREAM")
    if consumer is not None:
        check_consumer_name(consumer, "CONSUMER")
    if watch:
        _watch_command(stream, consumer, ledger, interval, count, as_json, options, show_all)
        return

    async def main() -> dict[str, Any]:
        async with await connect(options) as conn:
            return await collect(conn, stream, consumer, ledger, show_all=show_all)

    report = run_async(main())
    if as_json:
        typer.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
        return
    if "streams" in report:
        print_table(rows_table("streams", report["streams"], empty="none defined"))
        note = hidden_note(report["hidden"])
        if note:
            console.print(note, highlight=False, markup=False)
    else:
        print_table(rows_table(f"stream {stream}", [report["stream"]]))
    if report.get("upstreams"):
        print_table(rows_table(f"mirror and sources of {stream}", report["upstreams"]))
    if "consumers" in report:
        print_table(rows_table(f"consumers of {stream}", report["consumers"]))
    _print_groups(report.get("partitions"))
    # Counts do not show a setting that breaks exactly-once; doctor checks those.
    console.print(
        f"hint: `oncestream doctor{' ' + stream if stream else ''}` checks these settings "
        "against what exactly-once needs",
        highlight=False,
        markup=False,
    )


def _print_groups(partitions: dict[str, Any] | None) -> None:
    """Per group of a partitioned stream: its members, then each partition's owner and lag."""
    if not partitions:
        return
    console.print(f"partitioned: {partitions['partitioning']}", highlight=False, markup=False)
    for group in partitions["groups"]:
        name = group["group"]
        members = [
            {**m, "partitions": ",".join(map(str, m["partitions"])) or "-",
             "active": ",".join(map(str, m["active"])) or "-"}
            for m in group["members"]
        ]  # fmt: skip
        print_table(rows_table(f"members of group {name}", members, empty="none alive"))
        print_table(rows_table(f"partitions of group {name}", group["partitions"]))


def _watch_command(
    stream: str | None,
    consumer: str | None,
    ledger: str | None,
    interval: float,
    count: int | None,
    as_json: bool,
    options: ConnectOptions,
    show_all: bool,
) -> None:
    if not WATCH_INTERVAL[0] <= interval <= WATCH_INTERVAL[1]:
        raise ConfigError(
            f"--interval must be from {WATCH_INTERVAL[0]:g} to {WATCH_INTERVAL[1]:g} seconds, "
            f"got {interval:g}"
        )
    if count is not None and count < 1:
        raise ConfigError(f"--count must be >= 1, got {count}")

    async def main() -> None:
        async with await connect(options) as conn:
            await watch(
                lambda: collect(conn, stream, consumer, ledger, show_all=show_all),
                title=stream or "",
                interval=interval,
                count=count,
                as_json=as_json,
            )

    run_async(main())
