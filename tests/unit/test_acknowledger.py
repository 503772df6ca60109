"""The acknowledging part alone: what it tells the server after a batch (a fake connection).

:class:`Acknowledger` is built as the Processor builds it, with a frozen record of
the consumer (:class:`BoundConsumer`) and its collaborators; the connection is a
fake that records each write (``publish_many``) and each confirmed request. The
integration and kill tests run it against a server.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from oncestream import MaxDeliverError, Message, NoResponders, ProcessorOptions
from oncestream.process._ackfrontier import AckFrontier
from oncestream.process._acking import Acknowledger
from oncestream.process._bound import BoundConsumer
from oncestream.process._maxdeliver import DeliveryLimit
from oncestream.process._options import ProcessorStats

CREATED = "2026-11-29T10:00:00.123456789Z"


class _Reply:
    def __init__(self, data: bytes) -> None:
        self.data = data


class FakeConn:
    """What the Acknowledger and the delivery limit call on a Connection, recorded."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.writes: list[tuple[list[str], bytes]] = []
        self.requests: list[tuple[str, bytes]] = []
        self.infos = 0
        self.config = config or {}
        self.is_connected = True
        self.written = asyncio.Event()
        #: The stream's creation time (None: its info cannot be read).
        self.created: str | None = CREATED
        #: The dead-letter stream answers that it holds the letter already.
        self.duplicate = False
        self.headers: list[dict[str, str]] = []

    async def publish_many(self, subjects: list[str], payload: bytes) -> None:
        self.writes.append((list(subjects), payload))
        self.written.set()

    async def request(
        self, subject: str, payload: bytes = b"", timeout: float | None = None, **_: Any
    ) -> _Reply:
        self.requests.append((subject, payload))
        self.headers.append(dict(_.get("headers") or {}))
        if subject.startswith("DLQ."):
            ack = {"stream": "DLQ", "seq": len(self.requests)}
            return _Reply(orjson.dumps({**ack, "duplicate": True} if self.duplicate else ack))
        return _Reply(b"")

    async def consumer_info(self, stream: str, consumer: str) -> dict[str, Any]:
        self.infos += 1
        return {"config": self.config}

    async def stream_info(self, stream: str) -> dict[str, Any]:
        if self.created is None:
            raise NoResponders(f"no responders for $JS.API.STREAM.INFO.{stream}")
        return {"created": self.created}


def delivery(seq: int, dseq: int | None = None, delivered: int = 1) -> Message:
    """Message ``seq`` of stream S as consumer C delivers it (delivery ``dseq``)."""
    reply = f"$JS.ACK.S.C.{delivered}.{seq}.{dseq or seq}.1700000000000000000.0"
    return Message("s.x", reply, b"%d" % seq, None)


def build(
    conn: FakeConn, *, dlq: str = "", frontier: AckFrontier | None = None, **options: Any
) -> tuple[Acknowledger, ProcessorStats]:
    opts = ProcessorOptions(**({"backoff": (1.0, 5.0)} | options))
    bound = BoundConsumer(stream="S", consumer="C", options=opts, ack_wait=30.0, dlq_subject=dlq)
    stats = ProcessorStats()
    acks = Acknowledger(
        bound,
        conn,  # type: ignore[arg-type]
        stats,
        limit=DeliveryLimit(bound, conn),  # type: ignore[arg-type]
        frontier=frontier,
        stopping=lambda: False,
        buffered=list,
    )
    return acks, stats


def seqs(replies: list[str]) -> list[int]:
    return [int(r.split(".")[5]) for r in replies]


def test_explicit_acks_every_message_in_one_write_and_confirms_the_last() -> None:
    async def main() -> None:
        conn = FakeConn()
        acks, stats = build(conn)
        done = [delivery(s) for s in (1, 2, 3)]
        copy = delivery(2, 4)  # a second copy of 2 in the batch: acked too
        await acks.settle(done, [copy], [])
        await acks.drain()
        assert [(seqs(r), p) for r, p in conn.writes] == [([1, 2, 3], b"+ACK")]
        assert conn.requests == [(copy.reply, b"+ACK")]  # the last one, confirmed
        assert stats.double_acks == 1

    asyncio.run(main())


def test_without_double_ack_nothing_is_confirmed() -> None:
    async def main() -> None:
        conn = FakeConn()
        acks, stats = build(conn, double_ack=False)
        await acks.settle([delivery(1), delivery(2)], [], [])
        assert [(seqs(r), p) for r, p in conn.writes] == [([1, 2], b"+ACK")]
        assert conn.requests == [] and stats.double_acks == 0

    asyncio.run(main())


def test_a_failure_is_naked_with_the_backoff_of_its_attempt() -> None:
    async def main() -> None:
        conn = FakeConn()
        acks, stats = build(conn, double_ack=False)
        assert not await acks.failed(delivery(7, delivered=2), ValueError("bad"))
        assert conn.writes == [
            ([delivery(7).reply.replace(".1.7.", ".2.7.")], b'-NAK {"delay": 5000000000}')
        ]
        assert stats.failed == 1

    asyncio.run(main())


def test_the_last_attempt_is_dead_lettered_and_terminated() -> None:
    async def main() -> None:
        conn = FakeConn()
        acks, stats = build(conn, dlq="DLQ.S", max_deliver=3, double_ack=False)
        msg = delivery(9, delivered=3)
        assert await acks.failed(msg, ValueError("still bad"))
        assert [s for s, _ in conn.requests] == ["DLQ.S"]  # the dead letter, confirmed
        assert conn.writes == [([msg.reply], b"+TERM")]
        assert stats.dead_lettered == 1
        # It names the stream's life (its creation time): the letter of seq 9 of a stream
        # S created again is another letter.
        (letter,) = conn.headers
        assert letter["Nats-Msg-Id"] == "dlq:S:C:9:20261129100000123456789"
        assert letter["Oncestream-Stream-Created"] == CREATED

    asyncio.run(main())


def test_a_letter_the_dead_letter_stream_holds_already_is_finished_and_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A duplicate PubAck: this message's letter (same stream life, consumer and sequence)
    was stored before, e.g. by a delivery whose +TERM was lost. Before, nothing said so."""

    async def main() -> None:
        conn = FakeConn()
        conn.duplicate = True
        acks, stats = build(conn, dlq="DLQ.S", max_deliver=3, double_ack=False)
        msg = delivery(9, delivered=3)
        assert await acks.failed(msg, ValueError("still bad"))
        assert conn.writes == [([msg.reply], b"+TERM")] and stats.dead_lettered == 1

    with caplog.at_level("WARNING", logger="oncestream.process._acking"):
        asyncio.run(main())
    (said,) = [r.getMessage() for r in caplog.records if "stored before" in r.getMessage()]
    assert "dlq:S:C:9:20261129100000123456789" in said and "unknown" not in said


def test_without_the_streams_info_a_letter_waits_unless_the_processor_is_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The letter names the stream's life: a Processor that cannot read it now retries the
    letter later; a bound one (no API calls at set-up; a cross-account import may not
    reach STREAM.INFO) writes it without, and a duplicate then says it cannot tell."""

    async def main() -> None:
        conn = FakeConn()
        conn.created = None
        acks, stats = build(conn, dlq="DLQ.S", max_deliver=3, double_ack=False)
        msg = delivery(9, delivered=3)
        assert not await acks.failed(msg, ValueError("still bad"))
        assert conn.requests == [] and stats.dead_lettered == 0
        assert isinstance(acks.dead_letter_error, NoResponders)
        assert conn.writes == [([msg.reply], b'-NAK {"delay": 5000000000}')]

        conn = FakeConn()
        conn.created, conn.duplicate = None, True
        acks, stats = build(conn, dlq="DLQ.S", max_deliver=3, double_ack=False, bind=True)
        assert await acks.failed(msg, ValueError("still bad"))
        (letter,) = conn.headers
        assert letter["Nats-Msg-Id"] == "dlq:S:C:9" and "Oncestream-Stream-Created" not in letter

    with caplog.at_level("WARNING", logger="oncestream.process._acking"):
        asyncio.run(main())
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "name no life" in said and "cannot be told from it" in said


def test_ack_policy_all_acks_once_up_to_a_failure_and_holds_the_rest() -> None:
    async def main() -> None:
        conn = FakeConn()
        acks, _ = build(conn, frontier=AckFrontier(), double_ack=False)
        batch = [delivery(s) for s in range(1, 6)]
        assert acks.admits(batch) and acks.gap == ""
        failed = batch[2]
        await acks.settle([m for m in batch if m is not failed], [], [(failed, ValueError("x"))])
        acked = [(seqs(r), p) for r, p in conn.writes if p == b"+ACK"]
        assert acked == [([2], b"+ACK")]  # one ack: 1 and 2; 4 and 5 wait behind 3
        again = delivery(3, 6, delivered=2)
        assert acks.admits([again])
        await acks.settle([again], [], [])
        assert [(seqs(r), p) for r, p in conn.writes if p == b"+ACK"][-1] == ([5], b"+ACK")

    asyncio.run(main())


def test_ack_policy_all_refuses_a_batch_after_a_delivery_gap() -> None:
    conn = FakeConn()
    acks, _ = build(conn, frontier=AckFrontier())
    assert acks.admits([delivery(1), delivery(2)])
    assert not acks.admits([delivery(5)])
    assert "deliveries 3..4 did not reach this Processor" in acks.gap


def test_ack_policy_all_does_not_terminate_a_dead_letter() -> None:
    """A +TERM acks every message below it on such a consumer: the batch's ack covers it."""

    async def main() -> None:
        conn = FakeConn()
        acks, _ = build(conn, dlq="DLQ.S", max_deliver=1, frontier=AckFrontier(), double_ack=False)
        msg = delivery(1)
        assert acks.admits([msg])
        await acks.settle([], [], [(msg, ValueError("x"))])
        assert [p for _, p in conn.writes] == [b"+ACK"]  # the ack through it, no +TERM

    asyncio.run(main())


def test_a_limit_lowered_under_it_without_a_dead_letter_stream_ends_the_run() -> None:
    async def main() -> None:
        conn = FakeConn({"max_deliver": 3})
        acks, _ = build(conn, double_ack=False)
        with pytest.raises(MaxDeliverError, match=r"S seq 4 failed \(delivery 1 of 3\)"):
            await acks.failed(delivery(4), ValueError("x"))
        assert conn.writes == [([delivery(4).reply], b'-NAK {"delay": 1000000000}')]
        conn.writes.clear()
        with pytest.raises(MaxDeliverError):  # its last delivery: left to the server
            await acks.failed(delivery(4, delivered=3), ValueError("x"))
        assert conn.writes == []

    asyncio.run(main())


def test_acks_written_while_disconnected_are_reported_at_a_stop() -> None:
    async def main() -> None:
        conn = FakeConn()
        conn.is_connected = False
        acks, _ = build(conn, double_ack=False)
        await acks.settle([delivery(s) for s in (3, 4)], [], [])
        report = acks.unsent.report(5, acks.ack_wait)
        assert "the acks of 2 applied messages (stream sequences 3..4)" in report
        assert "5 pulled messages were not started" in report
        await acks.unsent.reconnected()
        assert "no ack was written" in acks.unsent.report(0, 30.0)

    asyncio.run(main())


def test_a_batch_in_flight_longer_than_half_the_ack_wait_is_kept_alive() -> None:
    async def main() -> None:
        conn = FakeConn()
        opts = ProcessorOptions(ack_wait=1.0)
        bound = BoundConsumer(stream="S", consumer="C", options=opts, ack_wait=1.0)
        stats = ProcessorStats()
        acks = Acknowledger(
            bound,
            conn,  # type: ignore[arg-type]
            stats,
            limit=DeliveryLimit(bound, conn),  # type: ignore[arg-type]
            stopping=lambda: False,
            buffered=lambda: ["$JS.ACK.S.C.1.9.9.1700000000000000000.0"],
        )
        acks.begin_batch([delivery(1)])
        task = asyncio.create_task(acks.keep_alive())
        try:
            async with asyncio.timeout(5):
                await conn.written.wait()
        finally:
            task.cancel()
        replies, payload = conn.writes[0]
        assert payload == b"+WPI" and seqs(replies) == [1, 9]  # the batch and its buffer
        assert stats.in_progress_acks == 2

    asyncio.run(main())
