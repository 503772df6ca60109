"""`dlq replay` of letters no one would apply, and two replays at once, against a real
nats-server.

- A letter's copy is applied by its consumer only. Before, a letter whose consumer was
  gone (renamed: billing -> billing_v2) or no longer took its subject (its filter
  edited) was replayed, deleted and reported replayed (exit 0): every consumer acked
  the copy without applying it, and the message was lost. Now it is kept and named
  (exit 1), and ``--consumer billing --as-consumer billing_v2`` replays it for the
  consumer that took over.
- Two replays at once: the one that came second to a letter failed with
  ``JetStreamError: sequence N not found (err_code=10043)`` deleting it (exit 1). A
  letter another replay deleted is done: reported as such, nothing replayed twice.
"""

from __future__ import annotations

import asyncio
import sqlite3
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


def _ids(path: Path) -> list[int]:
    with sqlite3.connect(path) as con:
        return sorted(row[0] for row in con.execute("SELECT id FROM effects"))


def test_a_letter_no_consumer_would_apply_is_kept_or_replayed_for_its_successor(
    nats_server, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
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
    assert "consumer ORDERS/billing does not exist any more" in said
    assert "consumers of ORDERS that take it now: billing_v2" in said
    assert "--consumer billing --as-consumer NAME" in said and "publish the message again" in said
    assert "consumer ORDERS/shipping does not take 'orders.eu' any more" in said
    assert [x["seq"] for x in cli_json(url, "dlq", "ls", DLQ)] == [billing["seq"], shipping["seq"]]

    replay = cli_json(
        url, "dlq", "replay", DLQ, "--consumer", "billing", "--as-consumer", "billing_v2", "-f"
    )
    assert (replay["replayed"], replay["kept"]) == ([billing["seq"]], {})
    copy = cli_json(url, "stream", "get", STREAM, "6")
    assert copy["headers"]["Oncestream-Replay-For"] == ["billing_v2"]
    stats = _run(url, tmp_path, "billing_v2", lambda s: s.applied, broken=set())
    assert stats.applied == 1 and _ids(tmp_path / "billing_v2.db") == [3]
    assert [x["seq"] for x in cli_json(url, "dlq", "ls", DLQ)] == [shipping["seq"]]

    # dlq ls says whose copy a letter's replay is (a letter of the consumer's own).
    assert (billing["consumer"], billing["per_consumer"], billing["copy_for"]) == (
        "billing", True, "billing",
    )  # fmt: skip
    bad = cli(url, "dlq", "replay", DLQ, "--as-consumer", "billing_v2", "--all", "-f")
    assert bad.exit_code == 2 and "--as-consumer billing_v2 needs --consumer" in bad.stderr


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
