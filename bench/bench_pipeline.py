"""The whole exactly-once pipeline at full speed, then at a given rate for latency.

publish (the demo's Publisher-based producer, own process) -> ``ORDERS`` ->
Spark Structured Streaming (parse JSON, enrich, filter ``amount >= 20``) ->
``jetstream`` sink -> ``ORDERS_ENRICHED`` -> ``Processor`` with an SQLite ledger
(own process) inserting each order into a table. Spark and the Processor are
started and warmed up (a few thousand warm-up orders go through) before the
measured orders are published.

Reports (group "pipeline", bench/run.py's RESULT contract):

* ``throughput``: N orders with no rate limit; end-to-end orders/s from the
  producer's start to the Processor's last commit, and the sustained rate
  between 10% and 90% of the commits;
* ``latency`` (``--rate R``, or ``--latency-rate``): p50/p99/max from the order's
  creation (just before publish) to the commit of the Processor's transaction.

Each mode ends with an audit (``oncestream.audit._audit.compare``): every order of ``ORDERS``
that passes the filter is in the output table exactly once (0 missing, 0 duplicated,
0 unexpected). Env: BENCH_PIPELINE_ORDERS (default 1,000,000),
BENCH_PIPELINE_RATE (0: half the measured throughput; -1: skip the latency run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import selectors
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import fresh_server, report
from bench._cpu import CpuSampler

from oncestream import ConnectOptions, connect
from oncestream.audit._internal import compare
from oncestream.demo._internal import ORDER_SCHEMA, REGIONS
from oncestream.read import read_stream
from oncestream.streams import StreamSpec, delete_stream, ensure_stream

HERE = Path(__file__).resolve().parent
ROLES = HERE / "_pipeline_roles.py"
WARM = 2000
MIN_AMOUNT = Decimal(20)
# The fields the job uses: from_json then skips ``customer`` and ``items`` unparsed.
USED_SCHEMA = "order_id string, region string, amount decimal(12,2), ts long"


def _enrich(spark: Any, url: str, args: argparse.Namespace, checkpoint: str) -> Any:
    from pyspark.sql import functions as F

    names = F.create_map(*[F.lit(x) for k, (n, _) in REGIONS.items() for x in (k, n)])
    vat = F.create_map(*[F.lit(x) for k, (_, r) in REGIONS.items() for x in (k, r)])
    schema = USED_SCHEMA if args.parse == "used" else ORDER_SCHEMA
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(args.arrow_batch))
    reader = (
        spark.readStream.format("jetstream")
        .option("servers", url)
        .option("stream", "ORDERS")
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", args.max_per_trigger)
    )
    if args.partitions:  # 0: the source's own split (one partition per 100,000 sequences)
        reader = reader.option("minPartitions", args.partitions)
    orders = (
        reader.load()
        .select("sequence", F.from_json(F.col("data").cast("string"), schema).alias("o"))
        .select("sequence", "o.*")
        .where(F.col("amount") >= F.lit(MIN_AMOUNT))
    )
    out = orders.select(
        F.concat(F.lit("enriched.orders."), F.col("region")).alias("subject"),
        F.to_json(
            F.struct(
                "order_id",
                "region",
                names[F.col("region")].alias("region_name"),
                F.col("amount").cast("string").alias("amount"),
                F.round(F.col("amount") * vat[F.col("region")].cast("double"), 2).alias("vat"),
                F.when(F.col("amount") >= 100, "large").otherwise("small").alias("band"),
                "ts",
                F.col("sequence").alias("source_seq"),
            )
        ).alias("data"),
    )
    return (
        out.writeStream.format("jetstream")
        .queryName("pipeline")
        .option("servers", url)
        .option("stream", "ORDERS_ENRICHED")
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=f"{int(args.trigger * 1000)} milliseconds")
        .start()
    )


async def _setup(url: str) -> None:
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        for name in ("ORDERS", "ORDERS_ENRICHED"):
            try:
                await delete_stream(conn, name)
            except Exception:
                pass
        await ensure_stream(conn, StreamSpec(name="ORDERS", subjects=("orders.>",)))
        await ensure_stream(conn, StreamSpec(name="ORDERS_ENRICHED", subjects=("enriched.>",)))
        js = conn.nc.jetstream()
        for i in range(WARM):
            body = {"order_id": f"warm-{i}", "customer": "c", "region": "eu-west", "items": [],
                    "amount": "50.00", "ts": int(time.time() * 1000)}  # fmt: skip
            await js.publish("orders.eu-west", orjson.dumps(body), headers={"Nats-Msg-Id": f"w{i}"})


async def _expected(url: str) -> list[str]:
    """Order ids of ORDERS that pass the pipeline's filter (the audit's input side)."""
    keys = []
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        async for chunk in read_stream(conn, "ORDERS"):
            for record in chunk:
                order = orjson.loads(record.data)
                if Decimal(order["amount"]) >= MIN_AMOUNT:
                    keys.append(order["order_id"])
    return keys


def _count_expected(n: int) -> int:
    from oncestream.demo._internal import order_stream

    return sum(1 for _, _, _, amount in order_stream(n) if amount >= MIN_AMOUNT)


def _check_query(query: Any, proc: subprocess.Popen[str]) -> None:
    if not query.isActive:
        proc.kill()
        raise SystemExit(f"the Spark query stopped: {query.exception()}")


def _read_line(proc: subprocess.Popen[str], query: Any, timeout: float) -> str:
    """The processor's next stdout line, failing fast when the Spark query dies."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if sel.select(timeout=2.0):
                return proc.stdout.readline()
            _check_query(query, proc)
    proc.kill()
    raise SystemExit(f"no output from the processor in {timeout:.0f}s")


def run_mode(spark: Any, url: str, args: argparse.Namespace, rate: float) -> dict[str, Any]:
    """One pipeline run on a fresh pair of streams; its figures and its audit."""
    work = Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    try:
        asyncio.run(_setup(url))
        expected_n = _count_expected(args.orders)
        db = work / "out.db"
        proc = subprocess.Popen(
            [
                sys.executable,
                str(ROLES),
                "processor",
                "--url",
                url,
                "--stream",
                "ORDERS_ENRICHED",
                "--db",
                str(db),
                "--warm",
                str(WARM),
                "--expected",
                str(expected_n),
                "--batch",
                str(args.batch),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        query = _enrich(spark, url, args, str(work / "checkpoint"))
        line = _read_line(proc, query, args.timeout)
        if line.strip() != "WARM-DONE":
            raise SystemExit(f"processor failed before warm-up ended: {line!r}")
        sampler = CpuSampler().start()
        producer = subprocess.run(
            [
                sys.executable,
                str(ROLES),
                "producer",
                "--url",
                url,
                "--stream",
                "ORDERS",
                "--n",
                str(args.orders),
                "--rate",
                str(rate),
            ],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if producer.returncode != 0:
            raise SystemExit(f"producer failed: {producer.stderr[-2000:]}")
        prod = json.loads(producer.stdout.split("PRODUCER-JSON ", 1)[1])
        out = _read_line(proc, query, args.timeout)
        cpu = sampler.stop()
        proc.wait(timeout=60)
        if proc.returncode != 0 or "PROCESSOR-JSON " not in out:
            raise SystemExit(f"processor failed (exit {proc.returncode}): {out[-2000:]}")
        got = json.loads(out.split("PROCESSOR-JSON ", 1)[1])
        query.stop()
        expected = [k for k in asyncio.run(_expected(url)) if not k.startswith("warm-")]
        with sqlite3.connect(db) as con:
            found = [r[0] for r in con.execute("SELECT order_id FROM orders_out")]
        audit = compare("sqlite orders_out", expected, [k for k in found if k[:5] != "warm-"])
        seconds = got["last_commit"] - prod["start"]
        return {
            "orders": args.orders,
            "committed": got["committed"],
            "rate_limit": rate or None,
            "end_to_end": got["committed"] / seconds,
            "seconds": round(seconds, 2),
            "publish_seconds": round(prod["end"] - prod["start"], 2),
            "sustained_10_90": got["sustained_10_90"],
            "latency_ms": got["latency_ms"],
            "missing": audit.missing,
            "duplicated": audit.duplicated,
            "unexpected": audit.unexpected,
            "trigger_s": args.trigger,
            "max_per_trigger": args.max_per_trigger,
            "partitions": args.partitions,
            "processor_batch": args.batch,
            "arrow_batch": args.arrow_batch,
            "parse": args.parse,
            "cpu_seconds": cpu,
            "cpu_us_per_order": {k: round(v / args.orders * 1e6, 1) for k, v in cpu.items()},
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    env = os.environ.get
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=int(env("BENCH_PIPELINE_ORDERS", "1000000")))
    parser.add_argument(
        "--latency-rate",
        type=float,
        default=float(env("BENCH_PIPELINE_RATE", "0")),
        help="orders/s of the latency run (0: half the measured throughput, -1: skip)",
    )
    parser.add_argument("--trigger", type=float, default=0.5, help="seconds between triggers")
    parser.add_argument("--max-per-trigger", type=int, default=200_000)
    parser.add_argument(
        "--partitions",
        type=int,
        default=0,
        help="source minPartitions (0: the source's own split, one per 100,000 sequences)",
    )
    parser.add_argument("--batch", type=int, default=500, help="Processor batch")
    parser.add_argument(
        "--arrow-batch",
        type=int,
        default=10_000,
        help="spark.sql.execution.arrow.maxRecordsPerBatch (rows per Arrow batch to the sink)",
    )
    parser.add_argument(
        "--parse",
        choices=("used", "full"),
        default="used",
        help="from_json schema: only the fields the job uses, or the whole order",
    )
    parser.add_argument("--spark-memory", default="2g")
    parser.add_argument("--timeout", type=float, default=3600.0)
    args = parser.parse_args()

    from bench._scale_cases import spark_conf

    from oncestream.spark import local_session

    server = fresh_server()
    spark = local_session("bench-pipeline", conf=spark_conf(args.spark_memory))
    spark.sparkContext.setLogLevel("ERROR")
    results = []
    try:
        full = run_mode(spark, server.url, args, 0.0)
        results.append(full)
        report("pipeline", f"end to end, {args.orders:,} orders, no rate limit",
               full["end_to_end"], "orders/s", **full)  # fmt: skip
        rate = args.latency_rate or round(full["end_to_end"] / 2)
        if rate > 0:
            timed = run_mode(spark, server.url, args, rate)
            results.append(timed)
            report("pipeline", f"latency at {rate:,.0f} orders/s, p99 ms",
                   timed["latency_ms"]["p99"], "ms", **timed)  # fmt: skip
    finally:
        spark.stop()
        server.close()
    for r in results:
        print(json.dumps(r))
    out = HERE / "results" / time.strftime("pipeline-%Y%m%d-%H%M%S.json")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    bad = [r for r in results if r["missing"] or r["duplicated"] or r["unexpected"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
