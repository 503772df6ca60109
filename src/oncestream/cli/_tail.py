"""`oncestream tail STREAM`: print stored messages; never acks, creates no consumer."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import signal
from typing import Annotated, Any

import orjson
import typer

from .._connection import Connection, connect
from .._errors import ConfigError, StreamNotFound
from .._options import ConnectOptions, parse_int, parse_time, rfc3339
from ..read import iter_messages
from ..read._internal import LEADER_PATIENCE, led_stream_info
from ..streams import Partitioning, StoredMessage, stream_info
from ..streams._internal import seq_at_time
from ._app import app, cli_errors, run_async
from ._connect_flags import with_connect_options
from ._name_args import stream_name, subject_filter

PREVIEW = 200


def preview(data: bytes, limit: int = PREVIEW) -> str:
    """A one-line, terminal-safe view of a payload.

    Text is shown with control characters escaped and cut at ``limit``
    characters with a ``…(+N bytes)`` marker; anything else is shown as binary.
    """
    if not data:
        return "<empty>"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return (
            f"<binary, {len(data):,} bytes: {data[:16].hex(' ')}{' …' if len(data) > 16 else ''}>"
        )
    controls = sum(1 for c in text if not c.isprintable() and c not in "\t\n\r")
    if "\x00" in text or controls > max(1, len(text) // 10):
        return (
            f"<binary, {len(data):,} bytes: {data[:16].hex(' ')}{' …' if len(data) > 16 else ''}>"
        )
    safe = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if len(safe) <= limit:
        return safe
    rest = len(text[limit:].encode("utf-8")) if len(text) > limit else 0
    return f"{safe[:limit]}…(+{rest:,} bytes)" if rest else f"{safe[:limit]}…"


def message_json(msg: StoredMessage) -> dict[str, Any]:
    """One message as JSON: ``data`` when it is UTF-8 text, else ``data_base64``."""
    row: dict[str, Any] = {
        "stream": msg.stream,
        "seq": msg.seq,
        "time": rfc3339(msg.time),
        "subject": msg.subject,
        "headers": msg.headers,
        "size": len(msg.data),
    }
    try:
        row["data"] = msg.data.decode("utf-8")
    except UnicodeDecodeError:
        row["data_base64"] = base64.b64encode(msg.data).decode()
    return row


def message_lines(msg: StoredMessage, *, headers: bool) -> list[str]:
    """The text lines of one message."""
    safe_subject = "".join(c if c.isprintable() else "?" for c in msg.subject)
    lines = [f"#{msg.seq}  {rfc3339(msg.time)}  {safe_subject}  {preview(msg.data)}"]
    if headers:
        for name, values in msg.headers.items():
            for value in values:
                lines.append(f"    {name}: {preview(value.encode(), 300)}")
    return lines


async def resolve_start(conn: Connection, stream: str, start: str, subject: str | None) -> int:
    """The first sequence to print for ``--from`` (a sequence, ``last:N`` or a time).

    Raises:
        ConfigError: the value is none of these.
        StreamNotFound: naming the stream.
    """
    # The leader's bounds: a replica answering while the stream has none may be behind,
    # and `last:N` counted from its last_seq would print far more than N.
    info = await led_stream_info(conn, stream, LEADER_PATIENCE)
    state = info.get("state", {})
    first, last = int(state.get("first_seq", 1) or 1), int(state.get("last_seq", 0))
    text = start.strip()
    if text.isdigit():
        return max(parse_int("--from", text), 1)
    if text.lower().startswith("last:"):
        count = text[5:]
        if not count.isdigit() or parse_int("--from last:N", count) < 1:
            raise ConfigError(f"--from last:N needs N >= 1, got {start!r}")
        return await _last_n(conn, stream, int(count), subject, first, last)
    return await seq_at_time(conn, stream, parse_time("--from", text))


async def _last_n(
    conn: Connection, stream: str, count: int, subject: str | None, first: int, last: int
) -> int:
    window = count
    for _ in range(64):
        begin = max(first, last - window + 1)
        seqs = [
            m.seq
            async for m in iter_messages(
                conn, stream, start_seq=begin, subject=subject, end_seq=last
            )
        ]
        if len(seqs) >= count or begin <= first:
            return seqs[-count] if len(seqs) >= count else (seqs[0] if seqs else last + 1)
        window *= 4
    return first


async def stored_filter(conn: Connection, stream: str, subject: str | None) -> str | None:
    """``--subject`` on a partitioned stream: a published subject is stored under
    ``<partition>.<subject>``, so ``orders.eu.>`` reads ``*.orders.eu.>`` (every partition)."""
    if subject is None:
        return None
    partitioning = Partitioning.from_config((await stream_info(conn, stream)).get("config") or {})
    return subject if partitioning is None else partitioning.stored_filter(subject)


@app.command("tail")
@cli_errors
@with_connect_options
def tail_command(
    stream: Annotated[str, typer.Argument(help="Stream to read.", callback=stream_name)],
    subject: Annotated[
        str | None,
        typer.Option(
            "--subject", help="Only this subject (wildcards ok).", callback=subject_filter
        ),
    ] = None,
    start: Annotated[
        str,
        typer.Option(
            "--from",
            metavar="SEQ|TIME|last:N",
            help="SEQ, TIME (ISO 8601 with a zone, or '10m' ago) or last:N.",
        ),
    ] = "last:10",
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new messages (Ctrl-C ends).")
    ] = False,
    headers: Annotated[bool, typer.Option("--headers", help="Print headers too.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
    *,
    options: ConnectOptions,
) -> None:
    """Print STREAM's messages: sequence, time, subject, a safe payload preview.

    Reads with direct message gets: it never acks and creates no consumer.
    """

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        if follow:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
        try:
            async with await connect(options) as conn:
                subject_ = await stored_filter(conn, stream, subject)
                first = await resolve_start(conn, stream, start, subject_)
                try:
                    async for msg in iter_messages(
                        conn, stream, start_seq=first, subject=subject_, follow=follow, stop=stop
                    ):
                        if as_json:
                            typer.echo(orjson.dumps(message_json(msg)).decode())
                        else:
                            typer.echo("\n".join(message_lines(msg, headers=headers)))
                except StreamNotFound as exc:
                    # It existed when tail started: say that it went away, not "not found".
                    raise StreamNotFound(
                        f"stream {stream!r} was deleted while tail was reading it",
                        code=exc.code,
                        err_code=exc.err_code,
                    ) from exc
        finally:
            if follow:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    with contextlib.suppress(Exception):
                        loop.remove_signal_handler(sig)

    run_async(main())
