"""`oncestream dlq ls|show|replay`: inspect dead letters and replay them exactly once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import orjson
import typer
from rich.text import Text

from .._connection import connect
from .._errors import ConfigError, MessageNotFound
from .._headers import render_block
from .._options import ConnectOptions, parse_duration, parse_int, parse_time, rfc3339
from ..process import DeadLetter, list_dead_letters, replay_dead_letters
from ..process._internal import unknown_consumer
from ..streams import StoredMessage, get_message, stream_info
from ._app import EXIT_CONFIG, app, cli_errors, console, err_console, fail, run_async
from ._connect_flags import with_connect_options
from ._help import new_typer
from ._name_args import consumer_name, stream_name
from ._output import confirm, kv_table, print_json, print_table, rows_table
from ._tail import message_json, preview

dlq_app = new_typer(
    name="dlq",
    help="List, show and replay the dead letters of a Processor.",
)
app.add_typer(dlq_app)

Dlq = Annotated[
    str,
    typer.Argument(help="Dead-letter stream (process --dead-letter-stream).", callback=stream_name),
]
Json = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
Seqs = Annotated[
    str | None,
    typer.Option("--seq", metavar="N|FIRST-LAST", help="Dead-letter sequences: N or FIRST-LAST."),
]
Subject = Annotated[
    str | None, typer.Option("--subject", help="Only dead letters of this original subject.")
]
Error = Annotated[str | None, typer.Option("--error", help="Only errors containing this text.")]
Consumer = Annotated[
    str | None,
    typer.Option("--consumer", help="Only dead letters of this consumer.", callback=consumer_name),
]


def parse_range(value: str | None) -> tuple[int | None, int | None]:
    """``N`` or ``FIRST-LAST`` (either side may be empty) as (first, last).

    Raises:
        ConfigError: naming the value.
    """
    if value is None:
        return None, None
    text = value.strip()
    left, sep, right = text.partition("-")
    try:
        first = parse_int("--seq", left) if left else None
        last = (parse_int("--seq", right) if right else None) if sep else first
    except ConfigError:
        if not all(part.strip().isdigit() for part in (left, right) if part):
            raise ConfigError(f"--seq must be N or FIRST-LAST, got {value!r}") from None
        raise
    if (first is not None and first < 1) or (
        first is not None and last is not None and last < first
    ):
        raise ConfigError(f"--seq must be N or FIRST-LAST with 1 <= FIRST <= LAST, got {value!r}")
    return first, last


def replay_time(at: str | None, within: str | None) -> datetime | None:
    """The time of a scheduled replay from ``--at`` (ISO 8601 with a zone) or ``--in`` (a duration).

    Raises:
        ConfigError: both given, a value in neither form, or a time not in the future.
    """
    if at is None and within is None:
        return None
    if at is not None and within is not None:
        raise ConfigError("dlq replay: give --at or --in, not both")
    now = datetime.now(UTC)
    if within is not None:
        seconds = parse_duration("--in", within)
        if seconds < 1:
            raise ConfigError(f"--in must be at least 1s, got {within!r}")
        moment = now + timedelta(seconds=seconds)
    else:
        assert at is not None
        moment = parse_time("--at", at, ago=False, hint="for a delay use --in 10m")
        if moment <= now:
            raise ConfigError(f"--at {at!r} is not in the future; replay now without --at")
    # The server's @at has whole seconds: round up, never earlier than asked.
    if moment.microsecond:
        moment = moment.replace(microsecond=0) + timedelta(seconds=1)
    return moment


def letter_row(letter: DeadLetter) -> dict[str, Any]:
    """The ``dlq ls`` row of a dead letter.

    ``copy_for``: who applies its replayed copy: its consumer only (a letter of that
    consumer's own), or every consumer of the stream (a letter written before letters
    were per consumer, ``all (old letter)``).
    """
    return {
        "seq": letter.seq,
        "time": rfc3339(letter.time),
        "stream": letter.stream,
        "orig_seq": letter.sequence,
        "subject": letter.subject,
        "consumer": letter.consumer,
        "copy_for": letter.consumer if letter.per_consumer else "all (old letter)",
        "attempts": letter.attempts,
        "error": letter.error if len(letter.error) <= 80 else letter.error[:79] + "…",
    }


def letter_json(letter: DeadLetter) -> dict[str, Any]:
    """The ``--json`` record of a dead letter: its row, the full error and the original's
    msg id, whether it is its consumer's own (``per_consumer``) and the creation time of
    the stream it came from (``stream_created``, null in letters that do not name it)."""
    return {
        **letter_row(letter),
        "error": letter.error,
        "msg_id": letter.msg_id,
        "per_consumer": letter.per_consumer,
        "stream_created": letter.stream_created,
    }


@dlq_app.command("ls")
@cli_errors
@with_connect_options
def ls_command(
    dlq: Dlq,
    seq: Seqs = None,
    subject: Subject = None,
    error: Error = None,
    consumer: Consumer = None,
    as_json: Json = False,
    *,
    options: ConnectOptions,
) -> None:
    """List dead letters: where they came from, attempts and the last error.

    --consumer NAME that no letter names and no consumer of the letters' streams has
    is warned about on stderr (exit 0: no letters is the answer).
    """
    first, last = parse_range(seq)

    async def main() -> tuple[list[DeadLetter], str | None]:
        async with await connect(options) as conn:
            letters = await list_dead_letters(
                conn, dlq, first=first, last=last, subject=subject, error=error, consumer=consumer
            )
            why = None if letters or not consumer else await unknown_consumer(conn, dlq, consumer)
            return letters, why

    letters, why = run_async(main())
    if why:
        err_console.print(Text.assemble(("warning:", "bold yellow"), " ", why), highlight=False)
    if as_json:
        print_json([letter_json(x) for x in letters])
    else:
        print_table(rows_table(f"dead letters in {dlq}", [letter_row(x) for x in letters]))


@dlq_app.command("show")
@cli_errors
@with_connect_options
def show_command(
    dlq: Dlq,
    seq: Annotated[int, typer.Argument(help="Dead-letter sequence.")],
    as_json: Json = False,
    *,
    options: ConnectOptions,
) -> None:
    """One dead letter: origin, attempts, full error, headers and payload."""

    async def main() -> DeadLetter:
        async with await connect(options) as conn:
            await stream_info(conn, dlq)
            try:
                msg = await get_message(conn, dlq, seq=seq)
            except MessageNotFound:
                raise MessageNotFound(f"no message {seq} in stream {dlq!r}") from None
            return DeadLetter.from_message(msg)

    letter = run_async(main())
    if as_json:
        typer.echo(
            orjson.dumps(
                {**letter_json(letter), "message": message_json(_stored(letter))},
                option=orjson.OPT_INDENT_2,
            ).decode()
        )
        return
    details = {**letter_row(letter), "error": letter.error, "msg_id": letter.msg_id}
    details["stream_created"] = letter.stream_created or "-"
    details["data"] = preview(letter.data, 2000)
    print_table(kv_table(f"dead letter {dlq} #{seq}", details))
    for name, values in letter.headers.items():
        for value in values:
            console.print(f"  {name}: {value}", markup=False, highlight=False)


def _stored(letter: DeadLetter) -> StoredMessage:
    return StoredMessage(
        stream=letter.dlq_stream,
        seq=letter.seq,
        subject=letter.dlq_subject,
        time=letter.time,
        raw_headers=render_block(letter.headers),
        data=letter.data,
    )


@dlq_app.command("replay")
@cli_errors
@with_connect_options
def replay_command(
    dlq: Dlq,
    seq: Seqs = None,
    all_letters: Annotated[bool, typer.Option("--all", help="Every dead letter.")] = False,
    subject: Subject = None,
    error: Error = None,
    consumer: Consumer = None,
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            metavar="TIME",
            help="Let the server publish them at TIME (ISO 8601 with a zone, 2026-11-22T15:00Z).",
        ),
    ] = None,
    within: Annotated[
        str | None,
        typer.Option("--in", metavar="DURATION", help="Let the server publish them in 10m, 2h..."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", "-f", help="Do not ask.")] = False,
    as_json: Json = False,
    *,
    options: ConnectOptions,
) -> None:
    """Republish dead letters to their original subject exactly once, then delete them.

    Select with --seq, --subject, --error, --consumer, or --all. A re-run replays
    nothing twice. A dead letter whose subject moved to another stream is refused
    (exit 1). Each consumer that gave up on a message has its own dead letter
    (`dlq ls`: copy_for): its republished copy is applied by that consumer only, once
    (other consumers of the stream ack it without applying it). A letter written
    before letters were per consumer (copy_for: all) is applied by every consumer
    of the stream, also one that had applied the original.

    A letter whose consumer no longer exists on its stream, or no longer takes its
    subject (its filter changed, the stream was partitioned anew), is kept and named
    (exit 1): no one would apply its copy. Publish the message again if it must
    still be applied (a consumer that takes its subject now may already have applied
    the original). --consumer NAME that no letter names and no consumer of the
    letters' streams has is refused (exit 2).

    --at / --in schedule the replay on the server (nats-server 2.12+ message
    schedules): it fires at that time even if no client runs then. The original
    stream needs allow_msg_schedules and must capture oncestream.schedule.<STREAM>.>
    (`oncestream stream edit STREAM --allow-msg-schedules --subjects ...`); otherwise
    the replay is refused (exit 2) and nothing happens. The published message
    carries Oncestream-Replay-Of but, unlike an immediate replay, no Nats-Msg-Id
    (the server drops it).
    """
    if not (all_letters or seq or subject or error or consumer):
        raise ConfigError(
            "dlq replay: select dead letters with --seq, --subject, --error, --consumer or --all"
        )
    if all_letters and (seq or subject or error or consumer):
        raise ConfigError(
            "dlq replay: --all cannot be combined with --seq/--subject/--error/--consumer"
        )
    first, last = parse_range(seq)
    when = replay_time(at, within)

    async def count() -> tuple[int, str | None]:
        async with await connect(options) as conn:
            letters = await list_dead_letters(
                conn, dlq, first=first, last=last, subject=subject, error=error, consumer=consumer
            )
            why = None if letters or not consumer else await unknown_consumer(conn, dlq, consumer)
            return len(letters), why

    selected, why = run_async(count())
    if why:
        raise fail(f"dlq replay: {why}; nothing was replayed", EXIT_CONFIG)
    if selected:
        later = f" at {rfc3339(when)}" if when else ""
        confirm(
            f"Replay {selected:,} dead letters from {dlq}{later}?",
            force=force,
            what=f"replay {dlq}",
        )

    async def main() -> dict[str, Any]:
        async with await connect(options) as conn:
            report = await replay_dead_letters(
                conn, dlq, first=first, last=last, subject=subject, error=error,
                consumer=consumer, at=when,
            )  # fmt: skip
            return {
                "selected": report.selected,
                "replayed": report.replayed,
                "already_replayed": report.already_replayed,
                "deleted_by_another": report.deleted_by_another,
                "kept": {str(seq): why for seq, why in report.kept.items()},
                **({"scheduled_at": rfc3339(when)} if when else {}),
            }

    empty: dict[str, Any] = {
        "selected": 0, "replayed": [], "already_replayed": [], "deleted_by_another": [],
        "kept": {},
    }  # fmt: skip
    result = run_async(main()) if selected else empty
    kept: dict[str, str] = result["kept"]
    if as_json:
        print_json(result)
    else:
        console.print(_summary(dlq, result, when), highlight=False, markup=False)
    if kept:
        raise fail(
            f"{len(kept)} dead letters of {dlq} were kept, not replayed:\n"
            + "\n".join(f"  {why}" for why in kept.values())
        )


def _summary(dlq: str, result: dict[str, Any], when: datetime | None) -> str:
    """What ``dlq replay`` did, in one line."""
    scheduled = when is not None and bool(result["replayed"])
    verb = "scheduled" if scheduled else "replayed"
    later = f" for {rfc3339(when)} (the server publishes them)" if when and scheduled else ""
    notes = []
    if result["already_replayed"]:
        notes.append(
            f"{len(result['already_replayed'])} had been republished before and were removed"
        )
    if result["deleted_by_another"]:
        notes.append(
            f"{len(result['deleted_by_another'])} were replayed and removed by another "
            "replay running at the same time: run one replay of a dead-letter stream at a time"
        )
    return f"{verb} {len(result['replayed']):,} dead letters from {dlq}{later}" + (
        f" ({'; '.join(notes)})" if notes else ""
    )
