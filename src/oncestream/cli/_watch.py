"""`oncestream status --watch`: refreshed stream and consumer state with per-second rates,
each consumer's lag and the time it needs to catch up at its current rate; ``--json``
prints one JSON object per refresh (JSON Lines) for scripts."""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import orjson
import typer
from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ._app import console
from ._output import print_table, rows_table

__all__ = ["add_eta", "add_rates", "eta_text", "watch"]

#: row key -> (counter column, rate column)
_RATES = {
    "stream": (("last_seq", "in/s"),),
    "consumer": (("ack_floor", "acked/s"), ("delivered", "delivered/s")),
}


def add_rates(
    rows: list[dict[str, Any]], previous: dict[str, dict[str, Any]], seconds: float, kind: str
) -> list[dict[str, Any]]:
    """Rows with per-second rate columns from the same rows ``seconds`` ago."""
    out = []
    for row in rows:
        before = previous.get(str(row.get(kind)))
        extra: dict[str, Any] = {}
        for counter, column in _RATES[kind]:
            if before is None or seconds <= 0:
                extra[column] = 0.0
            else:
                delta = max(int(row.get(counter, 0)) - int(before.get(counter, 0)), 0)
                extra[column] = round(delta / seconds, 1)
        out.append({**row, **extra})
    return out


def add_eta(rows: list[dict[str, Any]], *, measured: bool = True) -> list[dict[str, Any]]:
    """Consumer rows with ``lag`` (pending + ack pending) and ``eta_seconds`` to catch up.

    ``eta_seconds`` is the lag over the ``acked/s`` rate: 0 when nothing is behind,
    None when messages are behind and none was acked since the last refresh (or,
    ``measured`` False, before there is a previous refresh to measure a rate from).
    """
    out = []
    for row in rows:
        lag = int(row.get("num_pending", 0)) + int(row.get("ack_pending", 0))
        rate = float(row.get("acked/s", 0.0))
        eta: float | None
        if lag == 0:
            eta = 0.0
        elif rate > 0 and measured:
            eta = round(lag / rate, 1)
        else:
            eta = None
        out.append({**row, "lag": lag, "eta_seconds": eta})
    return out


def eta_text(seconds: float | None, *, measured: bool = True) -> str:
    """``eta_seconds`` for a table: ``caught up``, ``12s``, ``3m05s``, ``2h10m``, ``stalled``
    (nothing acked since the last refresh), ``-`` (no rate measured yet)."""
    if seconds is None or math.isnan(seconds):
        return "stalled" if measured else "-"
    if seconds <= 0:
        return "caught up"
    whole = math.ceil(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def _renderables(report: dict[str, Any], title: str, *, measured: bool = True) -> list[Table | str]:
    parts: list[Table | str] = []
    if "streams" in report:
        parts.append(rows_table("streams", report["streams"], empty="none defined"))
    else:
        parts.append(rows_table(f"stream {title}", [report["stream"]]))
    if report.get("upstreams"):
        parts.append(rows_table(f"mirror and sources of {title}", report["upstreams"]))
    if "consumers" in report:
        rows = [
            {
                **{k: v for k, v in r.items() if k != "eta_seconds"},
                "eta": eta_text(r["eta_seconds"], measured=measured),
            }
            if "eta_seconds" in r
            else r
            for r in report["consumers"]
        ]
        parts.append(rows_table(f"consumers of {title}", rows))
    return parts


async def watch(
    collect: Callable[[], Awaitable[dict[str, Any]]],
    *,
    title: str,
    interval: float,
    count: int | None,
    as_json: bool = False,
) -> int:
    """Refresh every ``interval`` seconds until Ctrl-C/SIGTERM or ``count`` refreshes.

    ``as_json``: one JSON object per refresh and line (``time``, ``seconds`` since
    the previous refresh, then the report with its rates, lag and ETA).

    Returns the number of refreshes shown.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    previous: dict[str, dict[str, dict[str, Any]]] = {"stream": {}, "consumer": {}}
    last_time = 0.0
    shown = 0
    live: Live | None = None
    try:
        if console.is_terminal and not as_json:
            live = Live(console=console, auto_refresh=False)
            live.start()
        while not stop.is_set() and (count is None or shown < count):
            report = await collect()
            now = time.monotonic()
            seconds = now - last_time if last_time else 0.0
            last_time = now
            for key, kind in (
                ("streams", "stream"),
                ("stream", "stream"),
                ("consumers", "consumer"),
            ):
                if key not in report:
                    continue
                rows = report[key] if isinstance(report[key], list) else [report[key]]
                rated = add_rates(rows, previous[kind], seconds, kind)
                previous[kind] = {str(r.get(kind)): r for r in rows}
                if kind == "consumer":
                    rated = add_eta(rated, measured=seconds > 0)
                report[key] = rated if isinstance(report[key], list) else rated[0]
            if as_json:
                line = {"time": datetime.now(UTC).isoformat(), "seconds": round(seconds, 3)}
                typer.echo(orjson.dumps({**line, **report}).decode())
            else:
                _show(report, title, interval, live, measured=seconds > 0)
            shown += 1
            if count is not None and shown >= count:
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await stop.wait()
    finally:
        if live is not None:
            live.stop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
    return shown


def _show(
    report: dict[str, Any], title: str, interval: float, live: Live | None, *, measured: bool
) -> None:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    header = (
        f"oncestream status {title or '(all streams)'} — {stamp} — every {interval:g}s, Ctrl-C ends"
    )
    parts = _renderables(report, title, measured=measured)
    if live is not None:
        group = Group(Text(header), *[Text(p) if isinstance(p, str) else p for p in parts])
        live.update(group, refresh=True)
    else:
        console.print(header, markup=False, highlight=False)
        for part in parts:
            print_table(part)
        console.file.flush()
