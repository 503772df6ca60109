"""`oncestream status`: stream and consumer reports, like the nats CLI's."""

from __future__ import annotations

from typing import Any

import orjson
import typer
from rich.table import Table

from .._connection import Connection, connect
from .._errors import ConfigError
from .._names import check_consumer_name, check_stream_name
from .._options import ConnectOptions
from ..ledger._readonly import read_applied_count
from ._app import app, cli_errors, console, run_async
from ._connect_flags import with_connect_options


async def _paged(conn: Connection, subject: str, field: str, body: dict[str, Any]) -> list[Any]:
    items: list[Any] = []
    for _ in range(1000):
        page = await conn.api(subject, {**body, "offset": len(items)})
        items.extend(page.get(field) or [])
        if not page.get(field) or len(items) >= int(page.get("total", 0)):
            break
    return items


def _stream_row(info: dict[str, Any]) -> dict[str, Any]:
    state, config = info.get("state", {}), info.get("config", {})
    return {
        "stream": config.get("name"),
        "subjects": config.get("subjects") or [],
        "messages": state.get("messages", 0),
        "bytes": state.get("bytes", 0),
        "first_seq": state.get("first_seq", 0),
        "last_seq": state.get("last_seq", 0),
        "consumers": state.get("consumer_count", 0),
    }


def _consumer_row(info: dict[str, Any]) -> dict[str, Any]:
    config = info.get("config", {})
    return {
        "consumer": info.get("name"),
        "ack_policy": config.get("ack_policy"),
        "num_pending": info.get("num_pending", 0),
        "ack_pending": info.get("num_ack_pending", 0),
        "redelivered": info.get("num_redelivered", 0),
        "ack_floor": info.get("ack_floor", {}).get("stream_seq", 0),
        "delivered": info.get("delivered", {}).get("stream_seq", 0),
        "waiting_pulls": info.get("num_waiting", 0),
    }


async def collect(
    conn: Connection, stream: str | None, consumer: str | None, ledger_url: str | None
) -> dict[str, Any]:
    """The report as plain data (what ``--json`` prints)."""
    if stream is None:
        infos = await _paged(conn, "STREAM.LIST", "streams", {})
        return {"streams": [_stream_row(i) for i in infos]}
    report: dict[str, Any] = {"stream": _stream_row(await conn.stream_info(stream))}
    if consumer is None:
        infos = await _paged(conn, f"CONSUMER.LIST.{stream}", "consumers", {})
        report["consumers"] = [_consumer_row(i) for i in infos]
        if ledger_url:  # the ledger counts per stream: report it with the stream
            report["stream"]["ledger_applied"] = read_applied_count(ledger_url, stream)
    else:
        row = _consumer_row(await conn.consumer_info(stream, consumer))
        if ledger_url:
            row["ledger_applied"] = read_applied_count(ledger_url, stream)
        report["consumers"] = [row]
    return report


def _table(title: str, rows: list[dict[str, Any]]) -> Table:
    table = Table(title=title, title_justify="left")
    if not rows:
        table.add_column("(none)")
        return table
    for column in rows[0]:
        table.add_column(column, justify="right" if isinstance(rows[0][column], int) else "left")
    for row in rows:
        table.add_row(
            *[
                f"{v:,}" if isinstance(v, int) else ", ".join(v) if isinstance(v, list) else str(v)
                for v in row.values()
            ]
        )
    return table


@app.command("status")
@cli_errors
@with_connect_options
def status_command(
    stream: str | None = typer.Argument(None, help="Stream to report on (default: all)."),
    consumer: str | None = typer.Argument(None, help="Consumer of STREAM to report on."),
    ledger: str | None = typer.Option(
        None,
        "--ledger",
        help="Ledger URL (read-only, never created): adds what it recorded as applied "
        "for STREAM (sqlite:///path.db or postgresql://user@host/db).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts."),
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

    async def main() -> dict[str, Any]:
        async with await connect(options) as conn:
            return await collect(conn, stream, consumer, ledger)

    report = run_async(main())
    if as_json:
        typer.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
        return
    if "streams" in report:
        console.print(_table("streams", report["streams"]))
    else:
        console.print(_table(f"stream {stream}", [report["stream"]]))
    if "consumers" in report:
        console.print(_table(f"consumers of {stream}", report["consumers"]))
