"""One bench-peers case that runs in Python (oncestream, or Spark with either format).

Usage: ``python bench/peers/_cases.py CASE --format jetstream|kafka --target URL --n N
--server-pid PID``; prints one ``CASE-JSON {...}`` line: ``rate`` (msg/s over the
timed part), ``seconds``, ``client_cpu`` (CPU seconds of this process tree in the
timed part: driver, JVM, Python workers) and ``server_cpu`` (of PID, same window).

Cases (the same query for both formats; only the format's options differ):

- ``publisher``: oncestream ``Publisher`` with msg ids (jetstream only);
- ``processor``: oncestream ``Processor`` + SQLite ledger (jetstream only);
- ``spark-read``: ``spark.read`` of the N stored messages into Spark's ``noop`` sink,
  2 tasks (``minPartitions=2``), the second of two reads timed (JIT warm);
- ``spark-write``: ``df.write`` of N 128-byte rows from 2 tasks, each with an id
  (jetstream ``msg_id`` / Kafka ``key``; Kafka's producer is idempotent, acks=all),
  after a 100,000-row warm-up write elsewhere; the one subject / topic is an option,
  not a column;
- ``pipeline``: ``readStream`` of the N stored messages -> ``writeStream`` into another
  stream/topic (its one subject / topic an option; our rows keep ``stream`` and
  ``sequence``, the lineage ids), ``Trigger.AvailableNow``, N/10 per micro-batch,
  checkpointed; after the
  same query on another N/10 messages (JIT and Python workers warm), or with ``--cold``
  as the first query of the session (Spark's start-up of the source and sink included).

``--pre-change``: the jetstream cases on the settings before issue 40: the streams they
create without ``allow_batched`` (the sink then waits for a PubAck per row).

Env: ``PEERS_OUT_WINDOW`` (seconds): the pipeline's output stream's ``duplicate_window``
(the server's 120 s default otherwise); the sink's exactly once does not rest on it,
its retry horizon (27.3 s by default) bounds it from below.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench._cpu import CpuSampler, cpu_seconds
from bench._scale_cases import scale_spec

from oncestream import ConnectOptions, connect
from oncestream.streams import StreamSpec, ensure_stream

STREAM, SUBJECT, TOPIC = "SCALE", "scale.x", "scale"
CASES = ("publisher", "processor", "spark-read", "spark-write", "pipeline")


class Window:
    """Client (this tree) and server CPU seconds and wall time of the timed part."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid

    def __enter__(self) -> Window:
        self.sampler = CpuSampler(interval=0.2).start()
        self.server0 = cpu_seconds(self.server_pid)
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.t0
        self.server = cpu_seconds(self.server_pid) - self.server0
        self.client = sum(self.sampler.stop().values())

    def result(self, n: int, **extra: Any) -> dict[str, Any]:
        return {
            "rate": n / self.seconds,
            "seconds": round(self.seconds, 3),
            "client_cpu": round(self.client, 3),
            "server_cpu": round(self.server, 3),
            **extra,
        }


async def _ensure(url: str, spec: StreamSpec) -> None:
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        await ensure_stream(conn, spec)


async def _stored(url: str, stream: str) -> int:
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        return int((await conn.stream_info(stream))["state"]["messages"])


def _spark(fmt: str) -> Any:
    from oncestream.spark import local_session

    conf = {"spark.driver.memory": "2g", "spark.python.worker.memory": "256m"}
    if fmt == "kafka":
        from bench.peers.kafka import spark_kafka_jars

        conf["spark.jars"] = ",".join(str(p) for p in spark_kafka_jars()[1])
    spark = local_session(f"bench-peers-{fmt}", conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _source_options(fmt: str, target: str, name: str) -> dict[str, str]:
    if fmt == "kafka":
        return {
            "kafka.bootstrap.servers": target,
            "subscribe": name.lower(),
            "startingOffsets": "earliest",
        }
    return {"servers": target, "stream": name, "startingOffsets": "earliest"}


def _kafka_count(spark: Any, target: str, topic: str) -> int:
    return int(
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", target)
        .option("subscribe", topic)
        .load()
        .count()
    )


def spark_read(args: argparse.Namespace) -> dict[str, Any]:
    spark = _spark(args.format)
    opts = {**_source_options(args.format, args.target, STREAM), "minPartitions": "2"}

    def read() -> None:
        spark.read.format(args.format).options(**opts).load().select(
            "data" if args.format == "jetstream" else "value"
        ).write.format("noop").mode("overwrite").save()

    read()  # warm-up: the same read
    with Window(args.server_pid) as w:
        read()
    spark.stop()
    return w.result(args.n, tasks=2)


def spark_write(args: argparse.Namespace) -> dict[str, Any]:
    from pyspark.sql import functions as F

    spark = _spark(args.format)
    kafka = args.format == "kafka"
    batched = False if args.pre_change else None

    def frame(n: int, prefix: str) -> Any:
        data = F.expr("cast(lpad(cast(id as string), 128, 'x') as binary)")
        key = F.concat(F.lit(prefix), F.col("id").cast("string"))
        if kafka:
            return spark.range(0, n, numPartitions=2).select(key.alias("key"), data.alias("value"))
        return spark.range(0, n, numPartitions=2).select(data.alias("data"), key.alias("msg_id"))

    def write(df: Any, name: str, subject: str) -> None:
        if kafka:
            df.write.format("kafka").option("kafka.bootstrap.servers", args.target).option(
                "topic", name.lower()
            ).save()
        else:
            # One subject, named as an option (as Kafka's case names its topic).
            df.write.format("jetstream").option("servers", args.target).option(
                "stream", name
            ).option("subject", subject).mode("append").save()

    if not kafka:
        asyncio.run(_ensure(args.target, StreamSpec(name="WARM", subjects=("warm.>",))))
        spec = scale_spec(STREAM, duplicate_window=120, storage="file", batched=batched)
        asyncio.run(_ensure(args.target, spec))
    write(frame(100_000, "warm-"), "WARM", "warm.x")
    df = frame(args.n, "r-")
    with Window(args.server_pid) as w:
        write(df, STREAM, SUBJECT)
    stored = (
        _kafka_count(spark, args.target, TOPIC)
        if kafka
        else asyncio.run(_stored(args.target, STREAM))
    )
    spark.stop()
    if stored != args.n:
        raise SystemExit(f"stored {stored} of {args.n}")
    return w.result(args.n, tasks=2)


def pipeline(args: argparse.Namespace) -> dict[str, Any]:
    spark = _spark(args.format)
    kafka = args.format == "kafka"
    batched = False if args.pre_change else None  # None: as oncestream creates streams

    def query(source_name: str, out_name: str, n: int) -> Any:
        opts = _source_options(args.format, args.target, source_name)
        opts["maxOffsetsPerTrigger" if kafka else "maxMessagesPerTrigger"] = str(max(1, n // 10))
        source = spark.readStream.format(args.format).options(**opts).load()
        if kafka:
            out = (
                source.selectExpr("key", "value")
                .writeStream.format("kafka")
                .option("kafka.bootstrap.servers", args.target)
                .option("topic", out_name.lower())
            )
        else:
            window = os.environ.get("PEERS_OUT_WINDOW")
            spec = StreamSpec(
                name=out_name, subjects=(f"{out_name.lower()}.>",), allow_batched=batched,
                **({"duplicate_window": float(window)} if window else {}),
            )  # fmt: skip
            asyncio.run(_ensure(args.target, spec))
            # One output subject, named as an option (as Kafka's case names its topic).
            out = (
                source.selectExpr("data", "stream", "sequence")
                .writeStream.format("jetstream")
                .option("servers", args.target)
                .option("stream", out_name)
                .option("subject", f"{out_name.lower()}.x")
            )
        checkpoint = tempfile.mkdtemp(prefix="bench-peers-chk-")
        return out.option("checkpointLocation", checkpoint).trigger(availableNow=True)

    if not args.cold:
        # The same query on another N/10 messages first, as the other Spark cases warm
        # up: the timed query then runs on a warm JVM and warm Python workers.
        warm = max(1, args.n // 10)
        _fill_warm_up(spark, args, "WARMIN", warm)
        started = query("WARMIN", "WARMOUT", warm).start()
        started.awaitTermination()
        if started.exception() is not None:
            raise SystemExit(f"warm-up query failed: {started.exception()}")
    with Window(args.server_pid) as w:
        started = query(STREAM, "OUT", args.n).start()
        started.awaitTermination()
    if started.exception() is not None:
        raise SystemExit(f"query failed: {started.exception()}")
    stored = (
        _kafka_count(spark, args.target, "out")
        if kafka
        else asyncio.run(_stored(args.target, "OUT"))
    )
    spark.stop()
    if stored != args.n:
        raise SystemExit(f"pipeline wrote {stored} of {args.n}")
    return w.result(args.n, per_batch=max(1, args.n // 10), cold=args.cold)


def _fill_warm_up(spark: Any, args: argparse.Namespace, name: str, n: int) -> None:
    """``n`` 128-byte messages into stream / topic ``name`` (a batch write of Spark)."""
    from pyspark.sql import functions as F

    data = F.expr("cast(lpad(cast(id as string), 128, 'x') as binary)")
    df = spark.range(0, n, numPartitions=2)
    if args.format == "kafka":
        df.select(F.col("id").cast("string").alias("key"), data.alias("value")).write.format(
            "kafka"
        ).option("kafka.bootstrap.servers", args.target).option("topic", name.lower()).save()
        return
    asyncio.run(_ensure(args.target, StreamSpec(name=name, subjects=(f"{name.lower()}.>",))))
    df.select(
        F.lit(f"{name.lower()}.x").alias("subject"),
        data.alias("data"),
        F.concat(F.lit("w-"), F.col("id").cast("string")).alias("msg_id"),
    ).write.format("jetstream").option("servers", args.target).option("stream", name).mode(
        "append"
    ).save()


def publisher(args: argparse.Namespace) -> dict[str, Any]:
    from bench.bench_publish import measure_publisher_async

    with Window(args.server_pid) as w:
        asyncio.run(
            measure_publisher_async(args.target, args.n, STREAM, fresh=False, subject=SUBJECT)
        )
    return w.result(args.n)


def processor(args: argparse.Namespace) -> dict[str, Any]:
    from bench.bench_process import processor as run_processor
    from bench.bench_process import sqlite_ledger

    work = Path(tempfile.mkdtemp(prefix="bench-peers-"))

    async def run() -> int:
        async with await connect(ConnectOptions(servers=(args.target,))) as conn:
            ledger = sqlite_ledger(work)
            _, rows = await run_processor(
                conn, args.n, work, stream=STREAM, consumer="peers", ledger=ledger
            )
            return rows

    with Window(args.server_pid) as w:
        rows = asyncio.run(run())
    if rows != args.n:
        raise SystemExit(f"processor applied {rows} of {args.n}")
    return w.result(args.n)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("case", choices=CASES)
    parser.add_argument("--format", choices=("jetstream", "kafka"), default="jetstream")
    parser.add_argument("--target", required=True, help="NATS URL or Kafka bootstrap servers")
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--server-pid", type=int, required=True)
    parser.add_argument("--pre-change", action="store_true", help="the settings before issue 40")
    parser.add_argument("--cold", action="store_true", help="pipeline: no warm-up query")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    run = {
        "publisher": publisher,
        "processor": processor,
        "spark-read": spark_read,
        "spark-write": spark_write,
        "pipeline": pipeline,
    }[args.case]
    print("CASE-JSON " + json.dumps(run(args)), flush=True)


if __name__ == "__main__":
    main()
