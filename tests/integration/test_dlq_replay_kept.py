"""`dlq replay` of letters no one would apply, and two replays at once, against a real
nats-server.

- A letter's copy is applied by its consumer only. Before, a letter whose consumer was
  gone (renamed: billing -> billing_v2) or no longer took its subject (its filter
  edited) was replayed, deleted and reported replayed (exit 0): every consumer acked
  the copy without applying it, and the message was lost. Now it is kept and named
  (exit 1), telling to publish the message again: a consumer that takes its subject
  now may already have applied the original (replaying the letter for it, as an
  unreleased ``--as-consumer`` did, applied the message twice).
- ``--consumer`` naming no consumer (no letter names it, no consumer of the letters'
  streams has it) said nothing: ``ls`` listed nothing, ``replay`` "replayed 0" (exit 0).
  Now ``ls`` warns (exit 0) and ``replay`` refuses (exit 2), naming the consumers the
  letters name.
- Two replays at once: the one that came second to a letter failed with
  ``JetStreamError: sequence N not found (err_code=10043)`` deleting it (exit 1). A
  letter another replay deleted is done: reported as such, nothing replayed twice.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from oncestream import Connection, ConnectOptions, Processor, ProcessorOptions, SQLiteLedger
from oncestream.process import _replay
from oncestream.read import iter_messages
from oncestream.streams import delete_message
from tests.handlers import record
from tests.integration._cli import cli, cli_json, publish, with_conn

STREAM, DLQ = "ORDERS", "ORDERS_DLQ"


def _handler(broken: set[int]) -> Any:
    def handle(msg: Any, tx: Any) -> None:
        if int(msg.data) in broken:
            raise ValueError(f"cannot handle {msg.data.decode()}")
        record(msg, tx)

    return handle


def _run(url: str, db: Path, consumer: str, until: Any, *, broken: set[int], **options: Any) -> Any:
    async def main() -> Any:
        opts = ProcessorOptions(
            batch=50, max_deliver=1, backoff=(0.1,), dead_letter_stream=DLQ, **options
        )
        processor = Processor(
            ConnectOptions(servers=(url,)), STREAM, consumer, _handler(broken),
            ledger=SQLiteLedger(db / f"{consumer}.db"), options=opts,
        )  # fmt: skip
        task = asyncio.create_task(processor.run())
        try:
            await processor.wait_until(until, 30)
        finally:
            await processor.stop()
            await task
        return processor.stats

    return asyncio.run(main())


def test_a_letter_no_consumer_would_apply_is_kept(nats_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    cli_json(url, "stream", "add", STREAM, "--subjects", "orders.>")
    publish(url, "orders.eu", [b"%d" % i for i in range(5)])  # data 3 at seq 4
    for consumer, options in (("billing", {}), ("shipping", {"filter_subject": "orders.eu"})):
        stats = _run(url, tmp_path, consumer, lambda s: s.dead_lettered, broken={3}, **options)
        assert (stats.applied, stats.dead_lettered) == (4, 1)
    billing, shipping = cli_json(url, "dlq", "ls", DLQ)
    # billing renamed billing_v2 (created after billing's ack floor), shipping's filter edited.
    cli_json(url, "consumer", "rm", STREAM, "billing", "--force")
    cli_json(url, "consumer", "add", STREAM, "billing_v2", "--deliver", "6")
    assert cli(url, "consumer", "edit", STREAM, "shipping", "--filter", "orders.us").exit_code == 0

    kept = cli(url, "dlq", "replay", DLQ, "--all", "--force")
    assert kept.exit_code == 1, kept.output  # before: 0, both letters deleted
    said = " ".join(kept.stderr.split())
    assert "2 dead letters of ORDERS_DLQ were kept" in said
    assert (
        f"ORDERS_DLQ seq {billing['seq']} (the letter of ORDERS seq 4 of consumer billing)" in said
    )
    assert "consumer ORDERS/billing does not exist," in said and "any more," not in said
    assert (
        "consumers of ORDERS that take it now: billing_v2, which may already have applied "
        "the original" in said
    )
    assert "If the message must still be applied, publish the message again" in said
    assert "--as-consumer" not in said
    assert "consumer ORDERS/shipping does not take 'orders.eu' any more" in said
    assert [x["seq"] for x in cli_json(url, "dlq", "ls", DLQ)] == [billing["seq"], shipping["seq"]]
    # The option that replayed a letter for another consumer is gone.
    gone = cli(url, "dlq", "replay", DLQ, "--consumer", "billing", "--as-consumer", "billing_v2")
    assert gone.exit_code == 2 and "--as-consumer" in gone.stderr, gone.stderr

    # dlq ls says whose copy a letter's replay is (a letter of the consumer's own).
    assert (billing["consumer"], billing["per_consumer"], billing["copy_for"]) == (
        "billing", True, "billing",
    )  # fmt: skip

    # A consumer no letter names and no consumer of ORDERS has: said, not "replayed 0".
    warned = cli(url, "dlq", "ls", DLQ, "--consumer", "nosuch", "--json")
    assert warned.exit_code == 0 and warned.stdout.strip() == "[]", warned.output
    named = (
        "no consumer 'nosuch': no letter in ORDERS_DLQ names it and the streams its letters "
        "came from (ORDERS) have no consumer of that name; the letters name billing, shipping"
    )
    assert "warning: " + named in " ".join(warned.stderr.split()), warned.stderr
    refused = cli(url, "dlq", "replay", DLQ, "--consumer", "nosuch", "-f")
    assert refused.exit_code == 2, refused.output  # before: 0, "replayed 0 dead letters"
    assert f"dlq replay: {named}; nothing was replayed" in " ".join(refused.stderr.split())
    # A consumer of the stream without letters, or billing (gone, but its letter names
    # it): nothing to say.
    for name in ("billing_v2", "billing"):
        assert cli(url, "dlq", "ls", DLQ, "--consumer", name, "--seq", "99").stderr == ""
    quiet = cli(url, "dlq", "replay", DLQ, "--consumer", "billing_v2", "-f")
    assert quiet.exit_code == 0 and "replayed 0 dead letters" in quiet.stdout, quiet.output


def test_a_letter_another_replay_deleted_is_done(
    nats_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    cli_json(url, "stream", "add", STREAM, "--subjects", "orders.>")
    publish(url, "orders.eu", [b"%d" % i for i in range(5)])
    _run(url, tmp_path, "billing", lambda s: s.dead_lettered >= 2, broken={2, 3})
    # The second letter: once deleted it lies between two messages, where nats-server
    # answers a second delete with 10043 (at the head of the stream, with 10057).
    first, letter = cli_json(url, "dlq", "ls", DLQ)
    republish = _replay._republish

    async def raced(conn: Connection, *args: Any, **kwargs: Any) -> Any:
        """Another replay, running at the same time, republished the letter (the same msg
        id: de-duplicated) and deleted it before this one could."""
        ack = await republish(conn, *args, **kwargs)
        assert await delete_message(conn, DLQ, letter["seq"])
        return ack

    monkeypatch.setattr(_replay, "_republish", raced)
    result = cli(url, "dlq", "replay", DLQ, "--seq", str(letter["seq"]), "--force")
    assert result.exit_code == 0, result.output  # before: 1, JetStreamError 10043
    said = " ".join(result.stdout.split())
    assert "replayed 0 dead letters from ORDERS_DLQ (1 were replayed and removed by another" in said
    assert "run one replay of a dead-letter stream at a time" in said

    async def left(conn: Connection) -> tuple[list[int], list[int]]:
        copies = [m.seq async for m in iter_messages(conn, STREAM, start_seq=6)]
        return copies, [m.seq async for m in iter_messages(conn, DLQ)]

    # One copy; the letter and its marker gone, the first letter left.
    assert with_conn(url, left) == ([6], [first["seq"]])
