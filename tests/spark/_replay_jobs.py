"""The replay job of tests/spark/test_sink_replay.py: every sink against a replayed batch.

Apache Paimon's regression trick (apache/paimon#9666): after a query has run, the
last entry of its checkpoint's commit log (``commits/<n>``) is deleted and the
query restarted, so Spark runs batch ``n`` again, as it does after a driver died
between the sink's commit and its own. No process is killed: the crash window in
seconds. Runs on a classic session or through Spark Connect (``tests.spark._jobs``).
"""

from __future__ import annotations

import os
from typing import Any

from tests.spark._batched_source import batched_read, run_until_caught_up

#: The sinks, and what their target argument is.
SINKS = ("jetstream", "sqlite", "postgres", "delta", "iceberg")


def _writer(sink: str, target: str, checkpoint: str) -> Any:
    import oncestream.spark as ospark

    if sink in ("sqlite", "postgres"):
        return ospark.transactional(target, table="orders", checkpoint_location=checkpoint)
    if sink == "delta":
        return ospark.delta(target, checkpoint_location=checkpoint)
    return ospark.iceberg("lake.orders", warehouse=target, checkpoint_location=checkpoint)


def _read_back(sink: str, url: str, target: str) -> list[str]:
    """The keys of the rows the sink's target holds, one per row: the orders' ids."""
    if sink == "jetstream":
        from harness import order_ids_on

        return list(order_ids_on(url, "OUT", "out.orders").elements())
    return [_order_id(data) for data in _table_data(sink, target)]


def _order_id(data: bytes | str) -> str:
    import json

    return str(json.loads(data)["order_id"])


def _table_data(sink: str, target: str) -> list[bytes]:
    if sink == "sqlite":
        import sqlite3

        with sqlite3.connect(target) as db:
            return [r[0] for r in db.execute("SELECT data FROM orders")]
    if sink == "postgres":
        import psycopg

        with psycopg.connect(target) as pg:
            return [bytes(r[0]) for r in pg.execute("SELECT data FROM orders")]
    if sink == "delta":
        from deltalake import DeltaTable

        return list(DeltaTable(target).to_pyarrow_table().column("data").to_pylist())
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("oncestream", uri=f"sqlite:///{target}/catalog.db", warehouse=target)
    scan = catalog.load_table("lake.orders").scan(selected_fields=("data",))
    return list(scan.to_arrow().column("data").to_pylist())


def replay_sink(
    spark: Any, sink: str, url: str, target: str, work: str, batch: int = 200
) -> dict[str, Any]:
    """IN -> ``sink`` to the end; ``commits/<last>`` deleted; again: what the target holds.

    ``sink``: one of :data:`SINKS`; ``target``: the SQL database URL, the Delta
    table's path or the Iceberg warehouse (unused for ``jetstream``: stream OUT,
    whose duplicate window must be short: the restart waits for it to pass, so
    that only the sink's batch-id check stands between the replay and a duplicate).
    """
    from pyspark.sql import functions as F

    checkpoint = f"{work}/chk"

    def run() -> str | None:
        df = batched_read(spark, url, "IN", batch)
        if sink == "jetstream":
            writer = (
                df.select(F.lit("out.orders").alias("subject"), "data", "stream", "sequence")
                .writeStream.format("jetstream")
                .option("servers", url)
                .option("stream", "OUT")
                .option("checkWindow", "false")  # the short window is the point here
            )
        else:
            function = _writer(sink, target, checkpoint)
            writer = df.select("stream", "sequence", "data").writeStream.foreachBatch(function)
        query = run_until_caught_up(writer.option("checkpointLocation", checkpoint))
        error = query.exception()
        return None if error is None else str(error)[:2000]

    first = run()
    commits = os.path.join(checkpoint, "commits")
    done = sorted(int(name) for name in os.listdir(commits) if name.isdigit())
    replayed = done[-1]
    os.remove(os.path.join(commits, str(replayed)))
    crc = os.path.join(commits, f".{replayed}.crc")
    if os.path.exists(crc):
        os.remove(crc)
    if sink == "jetstream":
        from tests.spark._sink_helpers import await_window_passed

        await_window_passed(url, "OUT", "out.probe")
    second = run()
    after = sorted(int(name) for name in os.listdir(commits) if name.isdigit())
    return {
        "first": first,
        "second": second,
        "batches": done,
        "replayed": replayed,
        "commits_after": after,
        "keys": sorted(_read_back(sink, url, target)),
    }
