"""How long a Publisher keeps its fast-ingest batch open between publishes (``linger``).

The server starts every new batch on a flow window of one message, so a bulk
writer whose calls come with short gaps (a Spark sink task, one Arrow batch at a
time) keeps its batch open longer than the 2 ms a lone publish needs.
"""

from __future__ import annotations

import asyncio

from oncestream.publish import AckTally, Publisher, PublisherOptions
from oncestream.spark._sink_options import TASK_LINGER, SinkOptions
from tests.unit.test_publisher_frames import FakeConnection, _stop

SINK = {"servers": "nats://127.0.0.1:4222", "stream": "OUT"}


class _EobWatch(FakeConnection):
    """The fake connection, noting when the batch's end-of-batch message is written."""

    def __init__(self) -> None:
        super().__init__(allow_batched=True)
        self.ended = asyncio.Event()

    def write_now(self, frames: list[bytes]) -> None:
        super().write_now(frames)
        if any(frame.split(b" ", 3)[2].endswith(b".3.$FI") for frame in frames):  # op 3: EOB
            self.ended.set()


async def _seconds_until_eob(options: PublisherOptions) -> float:
    conn = _EobWatch()
    pub = Publisher(conn, options)  # type: ignore[arg-type]
    await pub.start()
    assert pub.ingest == "fast"
    loop = asyncio.get_running_loop()
    try:
        await pub.publish_many(["s.a"] * 3, [b"x"] * 3, ["1", "2", "3"], tally=AckTally())
        published = loop.time()
        async with asyncio.timeout(5):
            await conn.ended.wait()
        return loop.time() - published
    finally:
        await _stop(pub)


async def test_the_batch_stays_open_for_the_linger() -> None:
    options = PublisherOptions(stream="S", ingest="fast", linger=0.3)
    assert await _seconds_until_eob(options) >= 0.25


def test_sink_tasks_linger_longer_than_a_lone_publish() -> None:
    opts = SinkOptions.from_spark_options(SINK)
    assert opts.publisher.linger == TASK_LINGER == 0.25
    # At most half the ack timeout: unconfirmed messages must not time out first.
    assert SinkOptions.from_spark_options({**SINK, "ackTimeout": "200ms"}).publisher.linger == 0.1
    atomic = SinkOptions.from_spark_options({**SINK, "ingest": "atomic"})
    assert atomic.publisher.linger == TASK_LINGER
