"""Watch a Structured Streaming query catch up: messages behind, per stream, while it runs.

Runs on its own embedded nats-server and a local Spark session:
``.venv/bin/python examples/spark_lag.py [MESSAGES]``. It publishes a backlog
into ``ORDERS``, starts a query ``ORDERS`` -> ``ORDERS_COPY`` (the sink creates
the output stream) reading at most 2,000 messages per micro-batch, and prints
``oncestream.spark.lag(query)`` every half second until the query is caught up.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time

import oncestream.spark
from oncestream import ConnectOptions, Publisher, PublisherOptions, connect
from oncestream.server import NatsServer
from oncestream.streams import StreamSpec, ensure_stream


async def publish_backlog(url: str, messages: int) -> None:
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        await ensure_stream(conn, StreamSpec(name="ORDERS", subjects=("orders.>",)))
        async with Publisher(conn, PublisherOptions(stream="ORDERS")) as pub:
            for i in range(messages):
                await pub.publish(f"orders.{i % 4}", b'{"id": %d}' % i, msg_id=f"o-{i}")


def run(messages: int = 20_000, per_batch: int = 2_000) -> list[dict[str, int]]:
    """Run the example; returns every lag reading it printed."""
    readings: list[dict[str, int]] = []
    with NatsServer() as server, tempfile.TemporaryDirectory() as work:
        asyncio.run(publish_backlog(server.url, messages))
        spark = oncestream.spark.local_session("oncestream-lag-example")
        query = (
            spark.readStream.format("jetstream")
            .option("servers", server.url)
            .option("stream", "ORDERS")
            .option("startingOffsets", "earliest")
            .option("maxMessagesPerTrigger", str(per_batch))
            .load()
            .selectExpr("concat('copy.', subject) AS subject", "data", "stream", "sequence")
            .writeStream.format("jetstream")
            .option("servers", server.url)
            .option("stream", "ORDERS_COPY")
            .option("createStream", "true")
            .option("createStreamSubjects", "copy.>")
            .option("checkpointLocation", f"{work}/chk")
            .trigger(processingTime="100 milliseconds")
            .start()
        )
        try:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                query.awaitTermination(0.5)  # returns after 0.5 s while the query runs
                behind = oncestream.spark.lag(query)
                if not behind:
                    continue  # no progress report yet
                readings.append(behind)
                print(f"batch {query.lastProgress['batchId']}: behind {behind}", flush=True)
                if behind == {"ORDERS": 0}:
                    break
            else:
                raise TimeoutError(f"not caught up in 180 s: {readings[-1:]}")
        finally:
            query.stop()
    return readings


if __name__ == "__main__":
    run(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000)
