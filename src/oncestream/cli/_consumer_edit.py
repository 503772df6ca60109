"""`oncestream consumer edit`: change the settings of a consumer that the server lets change."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from .._connection import connect
from .._errors import ConfigError, JetStreamError
from .._options import ConnectOptions, parse_duration, seconds_to_ns
from ..streams import consumer_info, stream_info, update_consumer
from ._app import cli_errors, console, run_async
from ._connect_flags import with_connect_options
from ._consumer import Json, Name, Stream, check_filter, consumer_app
from ._name_args import subject_filter
from ._output import print_json

_DURATIONS = ("ack_wait", "priority_timeout")


def _shown(key: str, value: Any) -> str:
    if key == "backoff":
        return "[" + ", ".join(f"{int(v) / 1e9:g}s" for v in value) + "]" if value else "none"
    if value is None:
        return "-"
    if key in _DURATIONS:
        return f"{int(value) / 1e9:g}s"
    return repr(value) if isinstance(value, str) else str(value)


def _backoff(value: str) -> list[int]:
    if value.strip().lower() in ("none", ""):
        return []
    parts = [part.strip() for part in value.split(",")]
    if not all(parts):
        raise ConfigError(
            f"--backoff must be durations separated by commas (e.g. 1s,5s,30s) or none, "
            f"got {value!r}"
        )
    return [seconds_to_ns(parse_duration("--backoff", part)) for part in parts]


def changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """``key: old -> new`` for each setting whose value differs (the server may change
    more than was asked: a backoff sets ack_wait to its first delay)."""
    out = []
    for key in sorted((set(before) | set(after)) - {"metadata"}):
        old, new = before.get(key), after.get(key)
        if (old or None) != (new or None):
            out.append(f"{key}: {_shown(key, old)} -> {_shown(key, new)}")
    return out


@consumer_app.command("edit")
@cli_errors
@with_connect_options
def edit_command(
    stream: Stream,
    name: Name,
    ack_wait: Annotated[
        str | None,
        typer.Option("--ack-wait", metavar="DURATION", help="Redelivery delay (30s, 2m...)."),
    ] = None,
    max_deliver: Annotated[
        int | None, typer.Option("--max-deliver", help="Delivery attempts (-1 = unlimited).")
    ] = None,
    max_ack_pending: Annotated[
        int | None,
        typer.Option("--max-ack-pending", "--max-pending", help="Unacked messages at most."),
    ] = None,
    description: Annotated[
        str | None, typer.Option("--description", help="Free text ('' clears it).")
    ] = None,
    backoff: Annotated[
        str | None,
        typer.Option(
            "--backoff",
            metavar="D,D,...",
            help="Redelivery delays per attempt, comma-separated (1s,5s,30s), or 'none'.",
        ),
    ] = None,
    filter_subject: Annotated[
        str | None,
        typer.Option("--filter", help="Only deliver this subject.", callback=subject_filter),
    ] = None,
    takeover_after: Annotated[
        str | None,
        typer.Option(
            "--takeover-after",
            metavar="DURATION",
            help="A --standby group's takeover time (priority_timeout, >= 2s); restart its "
            "instances with the same --takeover-after.",
        ),
    ] = None,
    ack: Annotated[
        str | None,
        typer.Option(
            "--ack",
            metavar="explicit|all|none",
            help="Ack policy: fixed at creation, the server refuses a change (exit 1).",
        ),
    ] = None,
    as_json: Json = False,
    *,
    options: ConnectOptions,
) -> None:
    """Change the given settings of consumer NAME of STREAM; the others stay as they are.

    Prints each setting changed (old -> new; with --backoff the server also sets
    ack_wait to the first delay). The server refuses changes of
    settings fixed at creation (ack policy, deliver policy, start): exit 1 with
    its reason; remove and re-create the consumer to change those.
    """
    changes: dict[str, Any] = {}
    if ack_wait is not None:
        changes["ack_wait"] = seconds_to_ns(parse_duration("--ack-wait", ack_wait))
        if changes["ack_wait"] <= 0:
            raise ConfigError(f"--ack-wait must be more than 0, got {ack_wait!r}")
    if max_deliver is not None:
        if max_deliver == 0 or max_deliver < -1:
            raise ConfigError(f"--max-deliver must be -1 or >= 1, got {max_deliver}")
        changes["max_deliver"] = max_deliver
    if max_ack_pending is not None:
        if max_ack_pending == 0 or max_ack_pending < -1:
            raise ConfigError(f"--max-ack-pending must be -1 or >= 1, got {max_ack_pending}")
        changes["max_ack_pending"] = max_ack_pending
    if description is not None:
        changes["description"] = description
    if backoff is not None:
        changes["backoff"] = _backoff(backoff)
    if filter_subject is not None:
        changes["filter_subject"] = filter_subject
    if takeover_after is not None:
        if parse_duration("--takeover-after", takeover_after) < 2:
            raise ConfigError(f"--takeover-after must be at least 2s, got {takeover_after!r}")
        changes["priority_timeout"] = seconds_to_ns(
            parse_duration("--takeover-after", takeover_after)
        )
    if ack is not None:
        if ack not in ("explicit", "all", "none"):
            raise ConfigError(f"--ack must be explicit, all or none, got {ack!r}")
        changes["ack_policy"] = ack
    if not changes:
        raise ConfigError(f"consumer edit {stream} {name}: nothing to change; give a setting")

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        async with await connect(options) as conn:
            config = (await consumer_info(conn, stream, name)).get("config") or {}
            if filter_subject is not None:
                check_filter(await stream_info(conn, stream), stream, filter_subject)
            if takeover_after is not None and config.get("priority_policy") != "pinned_client":
                raise ConfigError(
                    f"--takeover-after applies to a consumer of a --standby group (priority "
                    f"policy pinned_client); {stream}/{name} has priority policy "
                    f"{config.get('priority_policy') or 'none'!r}"
                )
            wanted = {**config, **changes}
            attempts = int(wanted.get("max_deliver", -1))
            if wanted.get("backoff") and attempts != -1 and len(wanted["backoff"]) > attempts:
                raise ConfigError(
                    f"--backoff has {len(wanted['backoff'])} delays but the consumer makes at "
                    f"most {attempts} deliveries (max_deliver): give at most {attempts} delays "
                    "or raise --max-deliver"
                )
            try:
                return await update_consumer(conn, stream, name, changes)
            except JetStreamError as exc:
                hint = (
                    ": it is fixed when the consumer is created; remove and re-create it to "
                    "change it (its position is lost)"
                    if "can not be updated" in exc.description
                    else ""
                )
                raise type(exc)(
                    f"the server refused to update consumer {stream}/{name}: "
                    f"{exc.description}{hint}",
                    code=exc.code,
                    err_code=exc.err_code,
                ) from exc

    before, after = run_async(main())
    old, new = before.get("config") or {}, after.get("config") or {}
    diff = changed(old, new)
    if as_json:
        print_json({"changed": diff, "consumer": after})
        return
    if not diff:
        console.print(f"consumer {stream}/{name}: nothing changed", highlight=False, markup=False)
        return
    console.print(f"updated consumer {stream}/{name}:", highlight=False, markup=False)
    for line in diff:
        console.print(f"  {line}", highlight=False, markup=False)
