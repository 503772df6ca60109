"""`oncestream status --watch`: refreshed stream and consumer state with per-second rates."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ._app import console
from ._output import print_table, rows_table

__all__ = ["add_rates", "watch"]

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


def _renderables(report: dict[str, Any], title: str) -> list[Table | str]:
    parts: list[Table | str] = []
    if "streams" in report:
        parts.append(rows_table("streams", report["streams"], empty="none defined"))
    else:
        parts.append(rows_table(f"stream {title}", [report["stream"]]))
    if "consumers" in report:
        parts.append(rows_table(f"consumers of {title}", report["consumers"]))
    return parts


async def watch(
    collect: Callable[[], Awaitable[dict[str, Any]]],
    *,
    title: str,
    interval: float,
    count: int | None,
) -> int:
    """Refresh every ``interval`` seconds until Ctrl-C/SIGTERM or ``count`` refreshes.

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
        if console.is_terminal:
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
                report[key] = rated if isinstance(report[key], list) else rated[0]
            stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            header = (
                f"oncestream status {title or '(all streams)'} — {stamp} — "
                f"every {interval:g}s, Ctrl-C ends"
            )
            parts = _renderables(report, title)
            if live is not None:
                group = Group(Text(header), *[Text(p) if isinstance(p, str) else p for p in parts])
                live.update(group, refresh=True)
            else:
                console.print(header, markup=False, highlight=False)
                for part in parts:
                    print_table(part)
                console.file.flush()
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
