"""`oncestream consumer add|ls|info|rm`: durable pull consumers, like ``nats consumer``."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from .._connection import connect
from .._errors import ConfigError, ConsumerNotFound
from .._names import check_consumer_name, check_stream_name, subjects_overlap
from .._options import ConnectOptions, parse_duration, parse_time
from ..read import StartPosition
from ..streams import (
    Partitioning,
    consumer_info,
    delete_consumer,
    list_consumers,
    stream_info,
)
from ._app import WaitTimeout, app, cli_errors, console, poll_until, run_async
from ._connect_flags import with_connect_options
from ._help import new_typer
from ._name_args import consumer_name, stream_name, subject_filter
from ._output import confirm, kv_table, print_json, print_output, rows_table
from ._rows import config_differences, consumer_row

consumer_app = new_typer(
    name="consumer",
    help="Create, list, inspect, wait for and remove durable pull consumers.",
)
app.add_typer(consumer_app)

Stream = Annotated[str, typer.Argument(help="Stream name.", callback=stream_name)]
Name = Annotated[str, typer.Argument(help="Consumer (durable) name.", callback=consumer_name)]
Json = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


def _details(info: dict[str, Any]) -> dict[str, Any]:
    config = info.get("config", {})
    return {
        "stream": info.get("stream_name"),
        "consumer": info.get("name"),
        "filter": config.get("filter_subject") or config.get("filter_subjects") or "",
        "deliver policy": config.get("deliver_policy"),
        "start seq": config.get("opt_start_seq"),
        "start time": config.get("opt_start_time"),
        "ack policy": config.get("ack_policy"),
        "ack wait": f"{int(config.get('ack_wait', 0)) / 1e9:g}s",
        "max deliver": config.get("max_deliver", -1),
        "max ack pending": config.get("max_ack_pending", -1),
        "pending": info.get("num_pending", 0),
        "ack pending": info.get("num_ack_pending", 0),
        "redelivered": info.get("num_redelivered", 0),
        "waiting pulls": info.get("num_waiting", 0),
        "delivered seq": info.get("delivered", {}).get("stream_seq", 0),
        "ack floor seq": info.get("ack_floor", {}).get("stream_seq", 0),
        "created": info.get("created"),
    }


def check_filter(info: dict[str, Any], stream: str, wanted: str) -> None:
    """Refuse a ``--filter`` that matches nothing the stream (``info``) stores.

    The server takes it, and the consumer then delivers nothing, silently. A
    stream without subjects of its own (a mirror, a sourcing stream) is not checked.
    A partitioned stream stores ``<partition>.<subject>`` besides what it stored
    before it was partitioned: a filter on either is taken.

    Raises:
        ConfigError: naming the filter and the stream's subjects.
    """
    config = info.get("config", {})
    subjects = config.get("subjects") or []
    partitioning = Partitioning.from_config(config)
    if partitioning is not None:  # stored as <partition>.<subject> (and, from before, as is)
        subjects = [*subjects, f"*.{partitioning.subjects}"]
    if subjects and not any(subjects_overlap(wanted, s) for s in subjects):
        raise ConfigError(
            f"--filter {wanted!r} matches nothing stream {stream!r} stores (its subjects: "
            f"{', '.join(subjects)}); give a subject within them"
        )


def start_from_flag(flag: str, value: str) -> StartPosition:
    """``all``, ``new``, a sequence or a time (ISO 8601 or a duration ago) as a StartPosition."""
    text = value.strip().lower()
    if text == "all":
        return StartPosition()
    if text == "new":
        return StartPosition(new_only=True)
    if text.isdigit():
        return StartPosition(seq=int(text))
    return StartPosition(time=parse_time(flag, value))


def _show(info: dict[str, Any], as_json: bool) -> None:
    title = f"consumer {info.get('stream_name')}/{info.get('name')}"
    print_output(info, as_json, kv_table(title, _details(info)))


@consumer_app.command("add")
@cli_errors
@with_connect_options
def add_command(
    stream: Stream,
    name: Name,
    filter_subject: Annotated[
        str | None,
        typer.Option("--filter", help="Only deliver this subject.", callback=subject_filter),
    ] = None,
    deliver: Annotated[
        str,
        typer.Option(
            "--deliver",
            metavar="all|new|SEQ|TIME",
            help="all, new, a sequence, or a time (ISO 8601 with a zone, or '10m' ago).",
        ),
    ] = "all",
    ack: Annotated[
        str, typer.Option("--ack", metavar="explicit|all|none", help="Ack policy.")
    ] = "explicit",
    ack_wait: Annotated[
        str, typer.Option("--ack-wait", metavar="DURATION", help="Redelivery delay.")
    ] = "30s",
    max_deliver: Annotated[
        int, typer.Option("--max-deliver", help="Delivery attempts (-1 = unlimited).")
    ] = -1,
    max_ack_pending: Annotated[
        int, typer.Option("--max-pending", help="Unacked messages at most.")
    ] = 10_000,
    as_json: Json = False,
    *,
    options: ConnectOptions,
) -> None:
    """Create durable pull consumer NAME on STREAM."""
    if ack not in ("explicit", "all", "none"):
        raise ConfigError(f"--ack must be explicit, all or none, got {ack!r}")
    if max_deliver == 0 or max_deliver < -1:
        raise ConfigError(f"--max-deliver must be -1 or >= 1, got {max_deliver}")
    if max_ack_pending < 1:
        raise ConfigError(f"--max-pending must be >= 1, got {max_ack_pending}")
    check_consumer_name(name, "consumer NAME")
    check_stream_name(stream, "STREAM")
    start = start_from_flag("--deliver", deliver)
    if parse_duration("--ack-wait", ack_wait) <= 0:
        # The server would take 0 as its default (30s), and a re-run then differs from it.
        raise ConfigError(f"--ack-wait must be more than 0, got {ack_wait!r}")
    config: dict[str, Any] = {
        "durable_name": name,
        "ack_policy": ack,
        "ack_wait": int(parse_duration("--ack-wait", ack_wait) * 1e9),
        "max_deliver": max_deliver,
        "max_ack_pending": max_ack_pending,
        **start.to_config(),
    }
    if filter_subject:
        config["filter_subject"] = filter_subject

    async def main() -> tuple[bool, dict[str, Any]]:
        async with await connect(options) as conn:
            info = await stream_info(conn, stream)
            if filter_subject:
                check_filter(info, stream, filter_subject)
            try:
                existing = await consumer_info(conn, stream, name)
            except ConsumerNotFound:
                payload = {"stream_name": stream, "config": config, "action": "create"}
                return True, await conn.api(f"CONSUMER.CREATE.{stream}.{name}", payload)
            differing = config_differences(existing.get("config") or {}, config)
            if differing:
                raise ConfigError(
                    f"consumer {stream}/{name} already exists with another configuration "
                    f"({'; '.join(differing)}); remove it first with `oncestream consumer rm "
                    f"{stream} {name}` (its position is lost), or pick another name"
                )
            return False, existing

    created, info = run_async(main())
    if not as_json:
        what = "created consumer" if created else "consumer already exists with this configuration:"
        console.print(f"{what} {stream}/{name}", highlight=False, markup=False)
    _show(info, as_json)


@consumer_app.command("ls")
@cli_errors
@with_connect_options
def ls_command(stream: Stream, as_json: Json = False, *, options: ConnectOptions) -> None:
    """List the consumers of STREAM with their pending and ack-pending counts."""

    async def main() -> list[dict[str, Any]]:
        async with await connect(options) as conn:
            return [consumer_row(i) for i in await list_consumers(conn, stream)]

    rows = run_async(main())
    print_output(rows, as_json, rows_table(f"consumers of {stream}", rows))


@consumer_app.command("info")
@cli_errors
@with_connect_options
def info_command(
    stream: Stream, name: Name, as_json: Json = False, *, options: ConnectOptions
) -> None:
    """Configuration and state of consumer NAME on STREAM."""

    async def main() -> dict[str, Any]:
        async with await connect(options) as conn:
            return await consumer_info(conn, stream, name)

    _show(run_async(main()), as_json)


@consumer_app.command("rm")
@cli_errors
@with_connect_options
def rm_command(
    stream: Stream,
    name: Name,
    force: Annotated[bool, typer.Option("--force", "-f", help="Do not ask.")] = False,
    as_json: Json = False,
    *,
    options: ConnectOptions,
) -> None:
    """Delete consumer NAME of STREAM (its messages stay in the stream)."""

    async def check() -> None:
        async with await connect(options) as conn:
            await consumer_info(conn, stream, name)

    run_async(check())
    confirm(f"Delete consumer {stream}/{name}?", force=force, what=f"delete {stream}/{name}")

    async def main() -> None:
        async with await connect(options) as conn:
            await delete_consumer(conn, stream, name)

    run_async(main())
    deleted = {"deleted": name, "stream": stream}
    print_output(deleted, as_json, f"deleted consumer {stream}/{name}")


@consumer_app.command("wait")
@cli_errors
@with_connect_options
def wait_command(
    stream: Stream,
    name: Name,
    timeout: WaitTimeout = "60s",
    as_json: Json = False,
    *,
    options: ConnectOptions,
) -> None:
    """Wait until consumer NAME of STREAM has nothing pending and nothing unacked.

    Exits 1 when --timeout passes first (for scripts: "wait until caught up").
    """
    limit = parse_duration("--timeout", timeout)

    async def main() -> dict[str, Any]:
        async with await connect(options) as conn:
            return await poll_until(
                lambda: consumer_info(conn, stream, name),
                lambda info: not info.get("num_pending") and not info.get("num_ack_pending"),
                timeout=limit,
                failure=lambda info: (
                    f"consumer {stream}/{name} still has {info.get('num_pending', 0)} "
                    f"pending and {info.get('num_ack_pending', 0)} unacked after {timeout}"
                ),
            )

    info = run_async(main())
    if as_json:
        print_json(info)
        return
    floor = info.get("ack_floor", {}).get("stream_seq", 0)
    console.print(
        f"consumer {stream}/{name} caught up (ack floor {floor})", highlight=False, markup=False
    )
