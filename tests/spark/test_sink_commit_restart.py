"""The streaming sink's commit of a micro-batch rides out a nats-server restart.

The CI run of ddbce31 stopped the demo's query with "Failed when Python streaming
data source perform commit" during its hard faults (a nats-server SIGKILL and
restart). "commit" is the action Spark 4.3 names for a streaming sink's commit
(its source runner says "commitSource"; javap of spark-sql). This test showed the
sink's commit failing on its first timeout while the server restarts; Spark then
stops the query. Recording is idempotent (the
record's msg id), so the commit now retries transient errors within the
Publisher's retry horizon. Real server, no SparkSession (the driver-side writer
is called directly).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

from pyspark.sql.types import BinaryType, StructField, StructType

from oncestream import ConnectOptions, connect
from oncestream.server import NatsServer
from oncestream.spark._commits import CommitStore
from oncestream.spark._sink import JetStreamStreamWriter, SinkCommit
from oncestream.streams import StreamSpec, ensure_stream

COMMITS = "SINK_COMMITS_RESTART"


class _Retried(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "retrying" in record.getMessage():
            self.seen.set()


async def _last_batch(url: str) -> int | None:
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        last = await CommitStore(conn, COMMITS).last("scope-r", "query-r")
    return None if last is None else last.batch_id


def test_commit_retries_while_the_server_restarts(nats_server: NatsServer) -> None:
    async def setup() -> None:
        async with await connect(ConnectOptions(servers=(nats_server.url,))) as conn:
            await ensure_stream(conn, StreamSpec(name="OUTR", subjects=("outr.>",)))

    asyncio.run(setup())
    options = {
        "servers": nats_server.url,
        "stream": "OUTR",
        "subject": "outr.x",
        "commitsStream": COMMITS,
        "ackTimeout": "2s",
    }
    schema = StructType([StructField("data", BinaryType())])
    writer = JetStreamStreamWriter(options, schema, overwrite=False)
    done = [SinkCommit(partition=0, batch_id=0, scope="scope-r", query_id="query-r")]
    writer.commit(done, 0)  # creates the records stream; the process's connection is up

    retried = _Retried()
    retry_log = logging.getLogger("oncestream._retry")
    level = retry_log.level
    retry_log.setLevel(logging.INFO)  # retrying() says so at INFO
    retry_log.addHandler(retried)
    errors: list[BaseException] = []

    def commit_batch_1() -> None:
        try:
            writer.commit([SinkCommit(partition=0, batch_id=1, scope="scope-r",
                                      query_id="query-r")], 1)  # fmt: skip
        except BaseException as exc:
            errors.append(exc)

    nats_server.kill()
    thread = threading.Thread(target=commit_batch_1)
    try:
        thread.start()
        deadline = time.monotonic() + 120
        while not retried.seen.wait(0.2):
            assert thread.is_alive(), f"the commit ended while the server was down: {errors}"
            assert time.monotonic() < deadline, "the commit neither ended nor retried"
        nats_server.start()
        thread.join(120)
    finally:
        retry_log.removeHandler(retried)
        retry_log.setLevel(level)
        if not nats_server.running():
            nats_server.start()
        thread.join(120)
    assert not thread.is_alive()
    assert errors == []
    assert asyncio.run(_last_batch(nats_server.url)) == 1
