"""The delivery limit alone: what a running Processor knows of its consumer's max_deliver.

:class:`DeliveryLimit` is built as the Processor builds it (a frozen record of the
consumer and a connection, here a fake answering ``CONSUMER.INFO``). The
integration tests (test_processor_max_deliver*.py) run it against a server.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from oncestream import MaxDeliverError, ProcessorOptions
from oncestream.process._bound import BoundConsumer
from oncestream.process._maxdeliver import DeliveryLimit


class FakeConn:
    def __init__(self, max_deliver: int = -1) -> None:
        self.max_deliver = max_deliver
        self.infos = 0

    async def consumer_info(self, stream: str, consumer: str) -> dict[str, Any]:
        self.infos += 1
        return {"config": {"max_deliver": self.max_deliver}}


def build(conn: FakeConn, *, dlq: str = "", **options: Any) -> DeliveryLimit:
    opts = ProcessorOptions(**options)
    bound = BoundConsumer(stream="S", consumer="C", options=opts, ack_wait=30.0, dlq_subject=dlq)
    return DeliveryLimit(bound, conn)  # type: ignore[arg-type]


def test_without_a_consumer_limit_the_processors_own_count_decides() -> None:
    limit = build(FakeConn(), max_deliver=5)
    assert limit.consumer_max == -1
    assert limit.attempts() == 5
    assert limit.failing(7, 4) is None


def test_a_lower_consumer_limit_dead_letters_before_the_servers_last_delivery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    limit = build(FakeConn(), dlq="DLQ.S", max_deliver=5)
    with caplog.at_level(logging.WARNING):
        assert limit.note({"max_deliver": 3}) is None
    assert limit.consumer_max == 3 and limit.attempts() == 2
    assert "max_deliver is 3 now (lower than the Processor's 5)" in caplog.text
    assert limit.failing(7, 2) is None  # a dead-letter stream takes it
    assert build(FakeConn(), dlq="DLQ.S").note({"max_deliver": 1}) is None
    one = build(FakeConn(), dlq="DLQ.S")
    one.note({"max_deliver": 1})
    assert one.attempts() == 1  # never fewer than one attempt


def test_a_limit_without_a_dead_letter_stream_is_the_error_that_ends_the_run() -> None:
    limit = build(FakeConn())
    error = limit.note({"max_deliver": 4})
    assert isinstance(error, MaxDeliverError)
    assert "consumer S/C has max_deliver 4 while this Processor runs" in str(error)
    assert "oncestream consumer edit S C --max-deliver -1" in str(error)
    assert error.max_deliver == 4
    failing = limit.failing(12, 2)
    assert isinstance(failing, MaxDeliverError)
    assert "S seq 12 failed (delivery 2 of 4)" in str(failing)
    assert "oncestream consumer reset S C --to-seq 12" in str(failing)
    assert "ack wait (30s)" in str(failing)


def test_no_limit_and_zero_mean_none() -> None:
    limit = build(FakeConn())
    for config in ({}, {"max_deliver": 0}, {"max_deliver": -1}, {"max_deliver": None}):
        assert limit.note(config) is None
        assert limit.consumer_max == -1


def test_refresh_reads_the_consumer_at_most_once_a_second_and_never_with_bind() -> None:
    async def main() -> None:
        conn = FakeConn(max_deliver=3)
        limit = build(conn, dlq="DLQ.S")
        await limit.refresh()
        await limit.refresh()  # within the second: not read again
        assert conn.infos == 1 and limit.consumer_max == 3
        bound = FakeConn(max_deliver=3)
        await build(bound, bind=True).refresh()
        assert bound.infos == 0

    asyncio.run(main())


def _dropped(bind: bool) -> Any:
    from oncestream.process._maxdeliver import DroppedMessages

    opts = ProcessorOptions(bind=bind, dead_letter_stream="DLQ")
    bound = BoundConsumer(stream="S", consumer="C", options=opts, ack_wait=30.0, dlq_subject="D")
    return DroppedMessages(
        bound,
        FailingConn(),
        None,
        None,
        None,
        fail=lambda _: None,
        moved=None,  # type: ignore[arg-type]
    )


class FailingConn:
    """A connection whose every API request fails (a reset back cannot be made)."""

    async def api(self, *_: Any, **__: Any) -> Any:
        from oncestream import OncestreamError

        raise OncestreamError("no server here")

    async def consumer_info(self, *_: Any) -> Any:
        from oncestream import OncestreamError

        raise OncestreamError("no server here")


@pytest.mark.parametrize("bind", [True, False], ids=["bind", "reset-failed"])
def test_a_stop_names_the_first_unsettled_drop_failed_ones_included(
    bind: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Seq 10's dead letter was refused (the run's error names --to-seq 10); 17 and 24 were
    still queued at the stop. The stop's own line must name 10 too: following a line that
    named 17 left seq 10 neither applied nor dead-lettered, for good."""

    async def main() -> None:
        drops = _dropped(bind)
        drops._failed.append(10)
        drops._drops.put_nowait((17, 3))
        drops._drops.put_nowait((24, 3))
        await drops._move_back_unsettled(FailingConn())

    with caplog.at_level(logging.ERROR):
        asyncio.run(main())
    assert "--to-seq 10`" in caplog.text, caplog.text
    assert "[10, 17, 24]" in caplog.text, caplog.text


@pytest.mark.parametrize(
    "error",
    ["timeout", "cluster-not-available"],
)
def test_a_drop_whose_settling_meets_a_transient_error_is_settled_later_not_failed(
    error: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading the dropped message timed out (its stream between leaders after a cluster
    restart; campaign seed 52, trial 15): the drop is queued again, as after a database
    error, instead of ending the run with a MaxDeliverError."""
    import oncestream.process._maxdeliver as maxdeliver
    from oncestream import JetStreamError, OperationTimeout

    monkeypatch.setattr(maxdeliver, "_LEDGER_RETRY", 0.01)
    transient = {
        "timeout": OperationTimeout("$JS.API.STREAM.MSG.GET.S: timed out"),
        "cluster-not-available": JetStreamError("unavailable", code=503, err_code=10008),
    }[error]
    failed: list[Any] = []
    calls: list[int] = []

    async def main() -> None:
        drops = _dropped(bind=False)
        drops.fail = failed.append
        settled = asyncio.Event()

        async def dropped(_conn: Any, seq: int, _deliveries: int, *, forgot: bool) -> None:
            calls.append(seq)
            if len(calls) == 1:
                raise transient
            settled.set()

        drops._dropped = dropped
        watch = asyncio.create_task(drops.watch())
        drops._drops.put_nowait((7, 3, False))
        await asyncio.wait_for(settled.wait(), timeout=5)
        watch.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watch

    asyncio.run(main())
    assert calls == [7, 7] and failed == []
