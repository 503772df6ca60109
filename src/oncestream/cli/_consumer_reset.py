"""`oncestream consumer reset`: move a durable consumer to another stream sequence."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from .._connection import connect
from .._errors import ConfigError, LedgerError
from .._options import ConnectOptions, parse_time
from ..ledger import Horizon
from ..ledger._internal import drop_handed_back, read_handed_back, read_horizons
from ..streams import ConsumerReset, ResetTarget, reset_consumer
from ._app import cli_errors, console, err_console, run_async
from ._connect_flags import with_connect_options
from ._consumer import Json, Name, Stream, consumer_app
from ._output import confirm, print_json

_TARGETS = "--to-seq, --to-time, --to-start or --to-end"


def _state(info: dict[str, Any]) -> dict[str, int]:
    return {
        "delivered_seq": int(info.get("delivered", {}).get("stream_seq", 0)),
        "ack_floor_seq": int(info.get("ack_floor", {}).get("stream_seq", 0)),
        "pending": int(info.get("num_pending", 0)),
        "ack_pending": int(info.get("num_ack_pending", 0)),
    }


def _clamp_note(done: ConsumerReset) -> str:
    if done.clamped_from is None:
        return ""
    return (
        f" (--to-seq {done.clamped_from} is past the stream's end: clamped to its end, "
        f"seq {done.seq}, the next message stored, as Kafka's reset clamps to the log end)"
    )


def _pruned(horizons: list[Horizon], seq: int) -> tuple[int, int] | None:
    """The pruned span a reset to ``seq`` delivers again, or None (0: the ack floor + 1,
    above every horizon: a horizon lies at or below the ack floor)."""
    covering = [h for h in horizons if seq and h.last_seq >= seq]
    if not covering:
        return None
    return max(seq, min(h.first_seq for h in covering)), max(h.last_seq for h in covering)


def _pruned_note(stream: str, name: str, span: tuple[int, int]) -> str:
    return (
        f"the ledger has pruned seqs {span[0]}..{span[1]} of {stream}/{name}: delivered again, "
        "each counts as done (acked, not applied again), also one that was dead-lettered "
        "or skipped by an earlier reset and never applied (to apply such a message, publish "
        "it again or `oncestream dlq replay` its dead letter); the others are applied unless "
        "the ledger holds them"
    )


def _handed_back_below(url: str, stream: str, name: str, seq: int) -> list[int]:
    """The messages the ledger records as handed back by the Processor (nak'ed after a
    failed attempt) below ``seq`` (read-only). A reset forward past them is a deliberate
    skip: left in the record, the next run would take them as dropped by the server and
    dead-letter them (or, without a dead-letter stream, move the consumer back to them)."""
    return [s for s in read_handed_back(url, stream, name) if s < seq]


def _skipped_note(stream: str, name: str, seqs: list[int], *, dry_run: bool) -> str:
    shown = ", ".join(map(str, seqs[:10])) + (
        f" and {len(seqs) - 10} more" if len(seqs) > 10 else ""
    )
    verb = "would be" if dry_run else "were"
    return (
        f"the Processor of {stream}/{name} had handed back seq {shown} (failed, waiting for "
        f"a redelivery): they {verb} dropped from the ledger's record, so its next run "
        "skips them (without the reset's --ledger it would dead-letter them)"
    )


def _as_json(
    done: ConsumerReset,
    pruned: tuple[int, int] | None = None,
    skipped: list[int] | None = None,
) -> dict[str, Any]:
    return {
        "stream": done.stream,
        "consumer": done.consumer,
        "target": done.target.describe(),
        "seq": done.seq,
        "dry_run": done.dry_run,
        "refusal": done.refusal,
        "clamped_from": done.clamped_from,
        "before": _state(done.before),
        "after": _state(done.after),
        "ledger_pruned": list(pruned) if pruned else None,
        "handed_back_skipped": skipped,
    }


@consumer_app.command("reset")
@cli_errors
@with_connect_options
def reset_command(
    stream: Stream,
    name: Name,
    to_seq: Annotated[
        int | None, typer.Option("--to-seq", metavar="N", help="Deliver from stream sequence N.")
    ] = None,
    to_time: Annotated[
        str | None,
        typer.Option(
            "--to-time",
            metavar="TIME",
            help="Deliver from the first message stored at or after TIME "
            "(ISO 8601 with a zone like 2026-11-22T15:00:00Z, or a duration ago like 10m).",
        ),
    ] = None,
    to_start: Annotated[
        bool, typer.Option("--to-start", help="Deliver everything the stream still holds.")
    ] = False,
    to_end: Annotated[
        bool,
        typer.Option("--to-end", help="Skip everything stored so far (deliver only new ones)."),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the target sequence; change nothing.")
    ] = False,
    force: Annotated[bool, typer.Option("--force", "-f", help="Do not ask.")] = False,
    ledger: Annotated[
        str | None,
        typer.Option(
            "--ledger",
            metavar="URL",
            help="The Processor's ledger: say which of the messages delivered again it has "
            "pruned (they count as done: acked, not applied again), and drop the failed "
            "messages it handed back that a reset forward skips from its record.",
        ),
    ] = None,
    as_json: Json = False,
    *,
    options: ConnectOptions,
) -> None:
    """Move consumer NAME of STREAM to another stream sequence (nats-server 2.14+).

    Give exactly one of --to-seq, --to-time, --to-start, --to-end. The consumer's
    pending and unacknowledged messages are dropped and it delivers from the new
    sequence on; its ack floor becomes that sequence - 1. A Processor's consumer
    moved back redelivers messages its ledger already has: they are acked, not
    applied again. Allowed for deliver policy all, and for a start sequence or
    time at or after the configured one; exits 1 when the server refuses.
    --to-seq past the stream's end is clamped to the end (last sequence + 1) and
    says so, as Kafka's reset does. With --ledger it also says which of them the
    ledger has pruned: those count as done too (its prune horizon), even one that
    was never applied; and the failed messages the Processor handed back that the
    reset skips are dropped from the ledger's record of them, so that its next run
    skips them too (without --ledger it takes them as dropped by the server and
    dead-letters them).
    """
    given = [
        flag
        for flag, value in (
            ("--to-seq", to_seq is not None),
            ("--to-time", to_time is not None),
            ("--to-start", to_start),
            ("--to-end", to_end),
        )
        if value
    ]
    if len(given) != 1:
        got = f"got {' and '.join(given)}" if given else "got none"
        raise ConfigError(f"consumer reset: give exactly one of {_TARGETS} ({got})")
    if to_seq is not None and to_seq < 1:
        raise ConfigError(f"--to-seq must be a stream sequence >= 1, got {to_seq}")
    if to_time is not None:
        parse_time("--to-time", to_time)  # names the value and the forms allowed
    if ledger is not None and not ledger.strip():
        raise ConfigError("--ledger must be the Processor's ledger URL or path, got ''")
    target = ResetTarget(seq=to_seq, time=to_time, start=to_start, end=to_end)

    async def plan() -> ConsumerReset:
        async with await connect(options) as conn:
            return await reset_consumer(conn, stream, name, target, dry_run=True)

    planned = run_async(plan())
    pruned = _pruned(read_horizons(ledger, stream, name), planned.seq) if ledger else None
    if pruned and not as_json:
        err_console.print(f"note: {_pruned_note(stream, name, pruned)}", markup=False)
    if dry_run:
        skipped = _handed_back_below(ledger, stream, name, planned.seq) if ledger else None
        if skipped and not as_json:
            err_console.print(
                f"note: {_skipped_note(stream, name, skipped, dry_run=True)}", markup=False
            )
        if as_json:
            print_json(_as_json(planned, pruned, skipped))
            return
        state = _state(planned.before)
        console.print(
            f"dry run: would reset consumer {stream}/{name} to seq {planned.seq} "
            f"({target.describe()}){_clamp_note(planned)}; now delivered up to "
            f"{state['delivered_seq']}, "
            f"ack floor {state['ack_floor_seq']}, {state['pending']} pending, "
            f"{state['ack_pending']} unacked"
            + (f"; the server would refuse: {planned.refusal}" if planned.refusal else ""),
            highlight=False,
            markup=False,
        )
        return
    confirm(
        f"Reset consumer {stream}/{name} to seq {planned.seq}?",
        force=force,
        what=f"reset {stream}/{name}",
    )

    async def main() -> ConsumerReset:
        async with await connect(options) as conn:
            # The target again: --to-end / --to-time move with the stream meanwhile.
            return await reset_consumer(conn, stream, name, target)

    skipped = None
    if ledger:
        # Dropped before the reset: a failure then changes nothing, and a message left
        # out of the record while the server still holds it is just delivered again.
        skipped = _handed_back_below(ledger, stream, name, planned.seq)
        try:
            drop_handed_back(ledger, stream, name, skipped)
        except LedgerError as exc:
            raise LedgerError(
                f"{exc}. The reset was not made: the Processor had handed back seq "
                f"{', '.join(map(str, skipped[:10]))} below the target, which the reset skips; "
                "give --ledger a role that may delete from oncestream_handed_back, or reset "
                "without --ledger (the Processor's next run then dead-letters them)"
            ) from exc
    done = run_async(main())
    if skipped and not as_json:
        err_console.print(
            f"note: {_skipped_note(stream, name, skipped, dry_run=False)}", markup=False
        )
    if as_json:
        print_json(_as_json(done, pruned, skipped))
        return
    after = _state(done.after)
    console.print(
        f"reset consumer {stream}/{name} to seq {done.seq}{_clamp_note(done)}: "
        f"{after['pending']} pending",
        highlight=False,
        markup=False,
    )
