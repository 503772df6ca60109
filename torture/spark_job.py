"""The Spark driver of a trial (the ``spark`` worker, SIGKILLed / SIGSTOPped by the nemesis).

Usage: ``python -m torture.spark_job CONFIG_JSON``

Two Structured Streaming queries read the processed stream with the ``jetstream``
source, derive the record key and its producer, and write

* ``to_stream``: the ``jetstream`` sink into the output stream (one JSON record per
  input record, ``{"id": key, "producer": ..., "source_seq": ...}``; message ids
  from the source's lineage, ``STREAM:SEQ``);
* ``to_db``: :func:`oncestream.spark.transactional` ``foreachBatch`` into a SQLite or
  the trial's PostgreSQL table without a unique key (a row written twice shows as two
  rows), or :func:`oncestream.spark.delta` into a Delta table (``cfg["spark_out"]``).

The sink and the source run their defaults; the sink is given option ``stream`` or
not (``cfg["sink_stream"]``); the driver runs the newest PySpark or the oldest the
package admits (the trial picks the interpreter).

The trial picks (``torture.spark.spark_mode``) the session, classic
(``local_session``) or Spark Connect (``cfg["connect"]``: a Connect server in this
process, as ``remote("local[...]")`` starts one), the sink's ``ingest``
(``cfg["ingest"]``: ``auto`` or ``atomic``), and whether the source reads the
headers and the sink writes them (``cfg["headers"]``, leaf trials: the hub's
sourced stream, stamped ``Nats-Stream-Source``).

Both keep their checkpoints under the trial directory, so a driver killed and
started again resumes where its last committed batch ended. A query that fails
(a killed Python worker can exhaust a task's retries, or kill the source's
planner) is started again in the same session from its checkpoint. SIGTERM stops
both queries and the session and exits 0.

The driver waits for the file ``cfg["go"]`` (the trial writes it once the streams
exist) before it starts the queries, so the JVM's start overlaps the servers'.
It writes ``cfg["ready"]`` once both queries started (the trial's fault clock
starts then; their first trigger may still be running).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

#: What ``spark.task.maxFailures`` is in ``local[N,F]`` (plain ``local[N]`` never retries).
TASK_FAILURES = 4
MAX_QUERY_RESTARTS = 50


def _log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} spark_job: {msg}", flush=True)


def _source(spark: Any, cfg: dict[str, Any]) -> Any:
    from pyspark.sql import functions as F

    reader = (
        spark.readStream.format("jetstream")
        .option("servers", ",".join(cfg["servers"]))
        .option("stream", cfg["stream"])
        .option("startingOffsets", "earliest")
    )
    if cfg.get("domain"):
        reader = reader.option("domain", cfg["domain"])
    if cfg.get("headers"):
        reader = reader.option("includeHeaders", "true")
    text = F.col("data").cast("string")
    key = F.when(text.startswith("{"), F.get_json_object(text, "$.id")).otherwise(text)
    return reader.load().select(
        "stream",
        "sequence",
        key.alias("key"),
        F.split(key, "-").getItem(0).alias("producer"),
        "headers",
    )


def _to_stream(spark: Any, cfg: dict[str, Any]) -> Any:
    from pyspark.sql import functions as F

    rows = _source(spark, cfg)
    record = F.struct(F.col("key").alias("id"), "producer", F.col("sequence").alias("source_seq"))
    columns = [
        "stream",
        "sequence",
        F.concat(F.lit(f"{cfg['out_subject']}."), F.col("producer")).alias("subject"),
        F.to_json(record).cast("binary").alias("data"),
    ]
    if cfg.get("headers"):
        # The hub's copies carry Nats-Stream-Source (server-stamped: the sink leaves it
        # out) and whatever the producers' writes left (write-time Nats-* checks the
        # sink refuses): every header but the latter goes to the sink as it was read.
        own = "NOT startswith(lower(k), 'nats-') OR lower(k) = 'nats-stream-source'"
        columns.append(F.expr(f"map_filter(headers, (k, v) -> {own})").alias("headers"))
    out = rows.select(*columns)
    # The sink's defaults (ack timeout, attempts, in flight), as users get them; with or
    # without option 'stream' as the trial drew (atomic chunks need it: 'auto' without).
    with_stream = cfg.get("sink_stream", "with") == "with"
    ingest = (cfg.get("ingest") or "auto") if with_stream else "auto"
    writer = (
        out.writeStream.format("jetstream")
        .queryName("to_stream")
        .option("servers", ",".join(cfg["servers"]))
        .option("commitsStream", cfg["commits_stream"])
        .option("taskMaxFailures", str(TASK_FAILURES))
        .option("ingest", ingest)
        .option("checkpointLocation", str(Path(cfg["checkpoints"]) / "to_stream"))
        .trigger(processingTime="500 milliseconds")
    )
    if with_stream:
        writer = writer.option("stream", cfg["out_stream"])
    if cfg.get("domain"):
        writer = writer.option("domain", cfg["domain"])
    return writer.start()


def _to_db(spark: Any, cfg: dict[str, Any]) -> Any:
    from pyspark.sql import functions as F

    from oncestream.spark import delta, transactional

    rows = _source(spark, cfg).select(
        "key", "producer", F.col("sequence").alias("source_seq"), F.col("stream")
    )
    checkpoint = str(Path(cfg["checkpoints"]) / "to_db")
    out = cfg.get("spark_out", "sqlite")
    if out == "delta":  # delta-rs, with the batch id in the same Delta commit
        write = delta(cfg["delta"], checkpoint_location=checkpoint)
    else:  # SQLite or the trial's PostgreSQL
        target = cfg["pg_url"] if out == "postgres" else cfg["db"]
        write = transactional(target, table=cfg["table"], checkpoint_location=checkpoint)
    return (
        rows.writeStream.queryName("to_db")
        .foreachBatch(write)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="500 milliseconds")
        .start()
    )


STARTERS = {"to_stream": _to_stream, "to_db": _to_db}


def _connect_session(master: str, conf: dict[str, str]) -> Any:
    """A Spark Connect session on a Connect server inside this process, as
    ``SparkSession.builder.remote("local[...]")`` makes one, but on a free port of
    127.0.0.1: ``remote("local")`` serves on the fixed 15002, which a driver restarted
    right after a kill, or another Connect server on the machine, may find taken."""
    import socket

    from pyspark.sql.connect.session import SparkSession as RemoteSession

    import oncestream.spark

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = {
        **conf,
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
    }
    os.environ["SPARK_LOCAL_REMOTE"] = "1"  # what remote("local[...]") sets
    RemoteSession._start_connect_server(master, settings)
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    # "localhost": the token remote("local") sets is sent over local credentials, not TLS
    spark: Any = RemoteSession.builder.remote(f"sc://localhost:{port}").getOrCreate()
    oncestream.spark.register(spark)
    return spark


def _wait_for(path: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)  # a file written by another process: nothing to await on
    return True


def run(cfg: dict[str, Any]) -> int:
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))

    conf = {
        "spark.driver.memory": "512m",
        "spark.sql.streaming.minBatchesToRetain": "20",
        "spark.sql.adaptive.enabled": "false",
    }
    # local-cluster: executors in JVMs of their own (the executor-kill fault's target);
    # spark.task.maxFailures is then Spark's default, TASK_FAILURES as well.
    master = cfg.get("master") or f"local[2,{TASK_FAILURES}]"
    if cfg.get("connect"):
        spark = _connect_session(master, conf)
    else:
        from oncestream.spark import local_session

        spark = local_session(f"torture-{cfg['name']}", master=master, conf=conf)
    _log(f"session up ({type(spark).__module__}, sink ingest {cfg.get('ingest') or 'auto'})")
    if not _wait_for(cfg["go"], 120.0):
        _log("no go file after 120 s")
        return 1
    cfg = {**cfg, **json.loads(Path(cfg["go"]).read_text())}  # the trial's PostgreSQL URL
    queries: dict[str, Any] = {}
    restarts = 0
    ready = False
    while not stopping:
        for name, start in STARTERS.items():
            query = queries.get(name)
            if query is not None and query.isActive:
                continue
            if query is not None:
                restarts += 1
                _log(f"query {name} ended: {query.exception()}; restart {restarts}")
                if restarts > MAX_QUERY_RESTARTS:
                    return 1
            try:
                queries[name] = start(spark, cfg)
            except Exception as exc:  # the servers may be down: try again next round
                _log(f"starting {name} failed: {type(exc).__name__}: {exc}")
                queries.pop(name, None)
                restarts += 1
        if not ready and len(queries) == len(STARTERS):
            Path(cfg["ready"]).write_text("ready\n")
            _log("ready")
            ready = True
        try:
            spark.streams.awaitAnyTermination(1)
        except Exception:
            pass  # a failed query: restarted above
        spark.streams.resetTerminated()
    _log(f"SIGTERM: stopping the queries ({restarts} restarts)")
    for query in queries.values():
        try:
            query.stop()
        except Exception as exc:
            _log(f"stopping {query.name}: {exc}")
    spark.stop()
    return 0


def main() -> int:
    return run(json.loads(sys.argv[1]))


if __name__ == "__main__":
    sys.exit(main())
