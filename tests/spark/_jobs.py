"""Spark jobs of the guarantee tests, run on a classic session and on a Connect session.

Each job is ``job(spark, **kwargs) -> JSON-able result``. The ``spark_job``
fixture (tests/conftest.py) runs it in-process on the shared classic session,
or through :func:`tests.spark._connect_server.run_connect_job`, which runs this
module in a subprocess holding a Connect session to the shared Connect server:

    python -m tests.spark._jobs REMOTE NAME JSON_KWARGS

prints ``RESULT <json>``. The server's Python workers import this module (its
path is on theirs) for the ``foreachBatch`` functions below, which are pickled
by reference. Keep the imports light: no pytest.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oncestream import ConnectOptions, connect


def publish_messages(url: str, subject: str, count: int, start: int = 0) -> None:
    """Publish ``m<i>`` for ``i`` in ``start..start+count`` to ``subject`` (nats-py, acked)."""
    from harness import publish_n

    async def run() -> None:
        async with await connect(ConnectOptions(servers=(url,))) as conn:
            await publish_n(conn, subject, count, start=start, data=lambda i: b"m%d" % i)

    asyncio.run(run())


# --------------------------------------------------------------------------- source


def source_stop_restart(
    spark: Any, url: str, stream: str, subject: str, work: str
) -> dict[str, Any]:
    """A query stopped mid-stream, then restarted from its checkpoint after more arrived.

    Returns the sequences in the Parquet output after each run.
    """
    out, checkpoint = f"{work}/out", f"{work}/ckpt"

    def source(per_trigger: int) -> Any:
        return (
            spark.readStream.format("jetstream").option("servers", url).option("stream", stream)
            .option("startingOffsets", "earliest").option("maxMessagesPerTrigger", per_trigger)
            .load().select("stream", "sequence", "subject", "data")
        )  # fmt: skip

    def sequences() -> list[int]:
        return sorted(r.sequence for r in spark.read.parquet(out).select("sequence").collect())

    query = (
        source(10).writeStream.format("parquet").option("path", out)
        .option("checkpointLocation", checkpoint).trigger(processingTime="100 milliseconds")
        .start()
    )  # fmt: skip
    deadline = time.monotonic() + 120
    try:
        # Stop as soon as two micro-batches committed: mid-stream, messages unread.
        while time.monotonic() < deadline:
            progress = query.lastProgress
            if progress is not None and progress["batchId"] >= 1:
                break
            query.awaitTermination(0.2)
        else:
            raise AssertionError("the query made no progress in 120 s")
    finally:
        query.stop()
    first = sequences()
    publish_messages(url, subject, 15, start=60)
    query = (
        source(25).writeStream.format("parquet").option("path", out)
        .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination(180)
    if query.exception() is not None:
        raise AssertionError(f"query failed: {query.exception()}")
    return {"first": first, "final": sequences()}


# --------------------------------------------------------------------------- sink


def _sink_query(spark: Any, url: str, checkpoint: str, columns: list[str]) -> Any:
    """IN -> jetstream sink -> OUT, available-now, to the end."""
    query = (
        spark.readStream.format("jetstream").option("servers", url).option("stream", "IN")
        .option("startingOffsets", "earliest").option("maxMessagesPerTrigger", 1000).load()
        .selectExpr(*columns)
        .writeStream.format("jetstream").option("servers", url).option("stream", "OUT")
        .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination(120)
    if query.exception() is not None:
        raise AssertionError(f"query failed: {query.exception()}")
    return query


def sink_lineage_rerun(spark: Any, url: str, checkpoint: str) -> None:
    """Lineage ids; the query runs to the end, then again after 500 more inputs."""
    from harness import publish_orders

    columns = ["'out.orders' AS subject", "data", "headers", "stream", "sequence"]
    _sink_query(spark, url, checkpoint, columns)
    publish_orders(url, "IN", "in.orders", 500, start=3000)
    _sink_query(spark, url, checkpoint, columns)


def sink_reused_checkpoint(spark: Any, url: str, checkpoint: str) -> list[int]:
    """Position ids; run, delete the checkpoint, run again: OUT's size after each run."""
    from tests.spark._sink_helpers import stream_state

    sizes = []
    for _ in range(2):
        _sink_query(spark, url, checkpoint, ["'out.orders' AS subject", "data"])
        sizes.append(stream_state(url, "OUT")["messages"])
        shutil.rmtree(checkpoint)  # the user starts over: a new query id, batch ids from 0
    return sizes


def sink_batch_rerun(spark: Any, url: str) -> list[int]:
    """A batch write with a msg_id column, then the same write again: OUT's size after each."""
    from pyspark.sql import functions as F

    from tests.spark._sink_helpers import stream_state

    df = spark.range(0, 5000, numPartitions=3).select(
        F.concat(F.lit("out."), (F.col("id") % 4).cast("string")).alias("subject"),
        F.col("id").cast("string").alias("data"),
        F.concat(F.lit("k-"), F.col("id").cast("string")).alias("msg_id"),
        F.create_map(F.lit("X-Row"), F.col("id").cast("string")).alias("headers"),
    )
    sizes = []
    for _ in range(2):
        df.write.format("jetstream").option("servers", url).option("stream", "OUT").mode(
            "append"
        ).save()
        sizes.append(stream_state(url, "OUT")["messages"])
    return sizes


# --------------------------------------------------------------------------- foreachBatch


@dataclass
class CrashOnce:
    """A foreachBatch function: ``write``, then fail once after batch ``crash_batch``.

    What happened goes to files (the function may run in the Connect server):
    ``marker`` exists once it crashed; each call appends ``{"batch", "skipped"}``
    to ``log``.
    """

    write: Callable[[Any, int], None]
    crash_batch: int
    marker: str
    log: str

    def __call__(self, df: Any, batch_id: int) -> None:
        self.write(df, batch_id)
        skipped = list(getattr(self.write, "skipped", None) or [])
        with open(self.log, "a") as out:
            out.write(json.dumps({"batch": batch_id, "skipped": skipped}) + "\n")
        if batch_id == self.crash_batch and not os.path.exists(self.marker):
            Path(self.marker).touch()
            raise RuntimeError("planted crash between the DB commit and Spark's commit")


def _json_files(spark: Any, path: str, per_trigger: int = 1) -> Any:
    return (
        spark.readStream.schema("order_id string, amount double")
        .option("maxFilesPerTrigger", per_trigger)
        .json(path)
    )


def _run(df: Any, function: Any, checkpoint: str) -> str | None:
    """Run ``df`` into ``function`` available-now; None, or the query's error."""
    query = (
        df.writeStream.foreachBatch(function).option("checkpointLocation", checkpoint)
        .trigger(availableNow=True).start()
    )  # fmt: skip
    try:
        query.awaitTermination(120)
    except Exception as exc:
        return str(exc)
    error = query.exception()
    return None if error is None else str(error)


def transactional_crash_after_commit(
    spark: Any, target: str, source: str, work: str
) -> dict[str, Any]:
    """The query dies after the DB commit of batch 1, before Spark's; then restarts."""
    from oncestream.spark import transactional

    checkpoint = f"{work}/chk"
    write = transactional(
        target, table="orders", key_columns=["order_id"], checkpoint_location=checkpoint
    )
    crash = CrashOnce(write, 1, f"{work}/crashed", f"{work}/calls.jsonl")
    first = _run(_json_files(spark, source), crash, checkpoint)
    second = _run(_json_files(spark, source), crash, checkpoint)
    calls = [json.loads(line) for line in Path(crash.log).read_text().splitlines()]
    return {"first": first, "second": second, "calls": calls}


def transactional_two_queries(
    spark: Any, target: str, sources: list[str], work: str, scope: str
) -> dict[str, Any]:
    """Two queries, each with its own checkpoint, write one table through ``transactional``.

    ``scope``: ``default`` (neither ``query_name`` nor ``checkpoint_location``) or
    ``checkpoint`` (each query's ``checkpoint_location``). Returns each query's
    error (None) or, when ``transactional`` refuses at once, ``refused``.
    """
    from oncestream.spark import transactional

    errors = []
    for n, source in enumerate(sources):
        checkpoint = f"{work}/chk-{n}"
        kwargs = {"checkpoint_location": checkpoint} if scope == "checkpoint" else {}
        try:
            write = transactional(target, table="t", **kwargs)
        except Exception as exc:
            return {"refused": f"{type(exc).__name__}: {exc}"}
        errors.append(_run(_json_files(spark, source, per_trigger=10), write, checkpoint))
    return {"errors": errors}


def transactional_new_checkpoint(
    spark: Any, target: str, sources: list[str], work: str
) -> dict[str, Any]:
    """A query on a checkpoint; the checkpoint deleted; a query on new input there again."""
    from oncestream.spark import transactional

    checkpoint = f"{work}/chk"
    errors = []
    for source in sources:
        write = transactional(target, table="t", checkpoint_location=checkpoint)
        errors.append(_run(_json_files(spark, source, per_trigger=10), write, checkpoint))
        shutil.rmtree(checkpoint)
    return {"errors": errors}


def transactional_reused_name(
    spark: Any, target: str, sources: list[str], work: str, with_location: bool
) -> dict[str, Any]:
    """One-batch queries under one ``query_name`` (the breaker's QN0 and wrong checkpoint).

    Query 1 runs one batch; its checkpoint is deleted; query 2 runs on new input under
    the same name and path. Then query 3, on a checkpoint of its own, is handed query
    2's ``checkpoint_location`` (copied from the other job). Returns each query's error.
    """
    from oncestream.spark import transactional

    checkpoint = f"{work}/chk"
    scope = {"checkpoint_location": checkpoint} if with_location else {}
    errors = []
    for source in sources[:2]:
        shutil.rmtree(checkpoint, ignore_errors=True)
        write = transactional(target, table="t", query_name="orders", **scope)
        errors.append(_run(_json_files(spark, source, per_trigger=10), write, checkpoint))
    if with_location:
        copied = transactional(target, table="t", query_name="orders", **scope)
        errors.append(_run(_json_files(spark, sources[2], per_trigger=10), copied, f"{work}/c3"))
    return {"errors": errors}


@dataclass
class TwoWriters:
    """A foreachBatch function: two ``transactional`` writers into one table in one query.

    ``ins`` appends the batch; ``upd`` upserts it again with each amount doubled (the
    review's M3: ``upd``, scoped by the same query id, found each batch recorded).
    """

    target: str
    checkpoint: str

    def __call__(self, df: Any, batch_id: int) -> None:
        from oncestream.spark import transactional

        where = {"checkpoint_location": self.checkpoint, "key_columns": ["order_id"]}
        ins = transactional(self.target, table="events", query_name="ins", **where)
        upd = transactional(self.target, table="events", mode="upsert", query_name="upd", **where)
        ins(df, batch_id)
        upd(df.selectExpr("order_id", "amount * 2 AS amount"), batch_id)


@dataclass
class Recreated:
    """A foreachBatch function re-creating an identical ``transactional`` writer each batch."""

    target: str
    checkpoint: str
    skipped: list[int] | None = None

    def __call__(self, df: Any, batch_id: int) -> None:
        from oncestream.spark import transactional

        write = transactional(
            self.target, table="orders", key_columns=["order_id"],
            checkpoint_location=self.checkpoint,
        )  # fmt: skip
        write(df, batch_id)
        self.skipped = [*(self.skipped or []), *(getattr(write, "skipped", None) or [])]


def transactional_two_writers(spark: Any, target: str, source: str, work: str) -> dict[str, Any]:
    """Two writers into one table in one query; then one writer re-created every batch.

    Returns the two-writer query's error and the amounts it left, and the
    re-created writer's runs: crashed after the commit of batch 1, restarted.
    """
    import sqlite3

    checkpoint = f"{work}/chk-two"
    error = _run(_json_files(spark, source), TwoWriters(target, checkpoint), checkpoint)
    with sqlite3.connect(target) as db:
        amounts = sorted({row[0] for row in db.execute("SELECT amount FROM events")})
    checkpoint = f"{work}/chk-one"
    crash = CrashOnce(Recreated(target, checkpoint), 1, f"{work}/crashed", f"{work}/calls.jsonl")
    first = _run(_json_files(spark, source), crash, checkpoint)
    second = _run(_json_files(spark, source), crash, checkpoint)
    calls = [json.loads(line) for line in Path(crash.log).read_text().splitlines()]
    return {"error": error, "amounts": amounts, "first": first, "second": second, "calls": calls}


# --------------------------------------------------------------------------- the rest


def query_metrics(spark: Any, url: str, checkpoint: str) -> dict[str, Any]:
    """IN -> OUT to the end, then what ``instrument_query`` and ``lag`` say of the query."""
    from prometheus_client import CollectorRegistry

    from oncestream.spark import instrument_query, lag

    columns = ["'out.orders' AS subject", "data", "stream", "sequence"]
    query = _sink_query(spark, url, checkpoint, columns)
    metrics = instrument_query(
        query, options=ConnectOptions(servers=(url,)), registry=CollectorRegistry()
    )
    try:
        metrics.refresh()
        return {
            "source_rows": metrics.source_rows,
            "lag_messages": metrics.lag_messages,
            "sink_rows": {stream: totals.rows for stream, totals in metrics.sink.items()},
            "lag": lag(query),
        }
    finally:
        metrics.close()


def local_session_refused(spark: Any) -> str:
    """``local_session()`` in a process that holds a Connect session: the error, or "started"."""
    from oncestream import ConfigError
    from oncestream.spark import local_session

    try:
        local_session("not-here")
    except ConfigError as exc:
        return str(exc)
    return "started"


def read_limit_stage(spark: Any, url: str, stream: str, work: str) -> dict[str, Any]:
    """A stream read with ``maxMessagesPerTrigger`` into Parquet: where it failed, and why.

    ``stage`` is ``"load"`` or ``"start"`` when that call raised, ``"run"`` when the
    query started (``error``: its failure, or None; ``batches``: rows per batch).
    """
    stage = "load"
    try:
        df = (
            spark.readStream.format("jetstream").option("servers", url).option("stream", stream)
            .option("startingOffsets", "earliest").option("maxMessagesPerTrigger", "20").load()
        )  # fmt: skip
        stage = "start"
        query = (
            df.select("sequence").writeStream.format("parquet").option("path", f"{work}/out")
            .option("checkpointLocation", f"{work}/chk").trigger(availableNow=True).start()
        )  # fmt: skip
    except Exception as exc:
        return {"stage": stage, "error": str(exc)}
    try:
        query.awaitTermination(180)
    except Exception as exc:
        return {"stage": "run", "error": str(exc)}
    error = query.exception()
    # The property, not the key: under Connect the key is None and the property sums
    # the sources' counts.
    batches = [p.numInputRows for p in query.recentProgress if p.numInputRows > 0]
    return {"stage": "run", "error": None if error is None else str(error), "batches": batches}


from tests.spark._leftover_job import checkpoint_leftover  # noqa: E402
from tests.spark._replay_jobs import replay_sink  # noqa: E402

JOBS: dict[str, Callable[..., Any]] = {
    job.__name__: job
    for job in (
        source_stop_restart,
        sink_lineage_rerun,
        sink_reused_checkpoint,
        sink_batch_rerun,
        transactional_crash_after_commit,
        transactional_two_queries,
        transactional_new_checkpoint,
        transactional_reused_name,
        transactional_two_writers,
        query_metrics,
        local_session_refused,
        read_limit_stage,
        replay_sink,
        checkpoint_leftover,
    )
}


def main(remote: str, name: str, kwargs: str) -> None:
    from pyspark.sql import SparkSession

    import oncestream.spark

    spark = SparkSession.builder.remote(remote).getOrCreate()
    try:
        oncestream.spark.register(spark)
        result = JOBS[name](spark, **json.loads(kwargs))
        print("RESULT " + json.dumps(result), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    from tests._spark_start import install  # Spark's 10 s connect-back, met by a restart

    install()
    main(*sys.argv[1:4])
