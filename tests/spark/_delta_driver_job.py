"""Subprocess driver for the Delta kill tests: stream IN -> a Delta table, optionally killed.

Usage: python -m tests.spark._delta_driver_job URL TABLE CHECKPOINT SINK KILL [READ_AFTER]
  SINK  rs: ``foreachBatch(oncestream.spark.delta(TABLE))`` (delta-rs), in batches of
        500 messages where the PySpark has admission control (4.2+);
        spark: ``writeStream.format("delta")`` (delta-spark's own sink, jars from Maven
        Central via tests.spark._delta_spark), one batch per run
  KILL  none | first: SIGKILL the whole process group once the run's first micro-batch
        is committed to the Delta table, before Spark writes its commit log entry.
        With SINK spark (JVM code, no Python hook after Delta's commit) the source,
        while planning that batch, swaps the checkpoint's ``commits`` folder for a
        file (the folder goes to ``commits.hidden``), so Spark's commit fails right
        after Delta's; the job then kills itself. The test puts the folder back.

Each run reads IN from the earliest message with Trigger.AvailableNow and exits 0
when caught up. With ``READ_AFTER`` (a second table, written by delta-rs), a run that
ends then prints ``ROWS <path> <count>`` for TABLE and READ_AFTER, read by its own Spark
session (with SINK spark: delta-spark), so one driver both runs and reads. Run it in its
own session
(start_new_session=True): the kill takes the driver, the JVM and the Python workers
down at once.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any


def crash() -> None:
    os.killpg(int(os.environ["DELTA_JOB_PGID"]), signal.SIGKILL)  # driver + JVM
    os.killpg(os.getpgrp(), signal.SIGKILL)  # a Python worker, if this runs in one


def _commit_breaking_source(checkpoint: str) -> Any:
    """``jetstream`` whose planning of a batch leaves Spark no commit log to write to."""
    from oncestream.spark._datasource import JetStreamDataSource
    from oncestream.spark._source import JetStreamStreamReader

    class Reader(JetStreamStreamReader):
        def partitions(self, start: Any, end: Any) -> Any:
            commits = os.path.join(checkpoint, "commits")
            if start != end and os.path.isdir(commits):  # not the restart's (x, x) call
                os.rename(commits, commits + ".hidden")
                with open(commits, "w") as f:
                    f.write("not a folder: Spark's commit of this batch fails\n")
            return super().partitions(start, end)

    class Source(JetStreamDataSource):
        @classmethod
        def name(cls) -> str:
            return "jetstream_breaks_commit"

        def streamReader(self, schema: Any) -> Any:
            return Reader(dict(self.options), schema)

    return Source


def main() -> None:
    url, table, checkpoint, sink, kill = sys.argv[1:6]
    read_after = sys.argv[6] if len(sys.argv) > 6 else None
    os.environ["DELTA_JOB_PGID"] = str(os.getpgrp())

    from oncestream.spark import delta, local_session
    from oncestream.spark._compat import ADMISSION_CONTROL

    conf: dict[str, str] = {}
    if sink == "spark":
        from tests.spark._delta_spark import delta_spark_conf

        conf = delta_spark_conf()
    spark = local_session(f"delta-kill-{sink}", conf=conf)
    reader = (
        spark.readStream.format("jetstream")
        .option("servers", url)
        .option("stream", "IN")
        .option("startingOffsets", "earliest")
    )
    if sink == "rs" and ADMISSION_CONTROL:  # < 4.2 reads an AvailableNow run in one batch
        reader = reader.option("maxMessagesPerTrigger", 500)
    if sink == "spark" and kill == "first":
        spark.dataSource.register(_commit_breaking_source(checkpoint))
        reader = reader.format("jetstream_breaks_commit")
    df = reader.load().select("stream", "sequence", "subject", "data")
    writer = df.writeStream.option("checkpointLocation", checkpoint).trigger(availableNow=True)
    if sink == "rs":
        write = delta(table)

        def write_then_crash(batch: Any, batch_id: int) -> None:
            write(batch, batch_id)
            if kill == "first":
                crash()

        query = writer.foreachBatch(write_then_crash).start()
    else:
        query = writer.format("delta").start(table)
    try:
        query.awaitTermination()
    except Exception:
        if kill == "first":  # Spark's commit failed (no commits folder), after Delta's
            crash()
        raise
    if query.exception() is not None:
        raise SystemExit(f"query failed: {query.exception()}")
    if read_after is not None:
        for path in (table, read_after):
            print("ROWS", path, spark.read.format("delta").load(path).count(), flush=True)
    spark.stop()


if __name__ == "__main__":
    from tests._spark_start import install  # Spark's 10 s connect-back, met by a restart

    install()
    main()
