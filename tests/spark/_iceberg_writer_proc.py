"""One of several processes writing one Iceberg table at once (tests/spark/test_iceberg.py).

Usage: python -m tests.spark._iceberg_writer_proc WAREHOUSE QUERY FIRST BATCHES ROWS GO

Waits until the file GO exists (so the processes start writing together), then
commits batches ``0..BATCHES-1`` of query QUERY through the writer's own commit
path (``IcebergBatchWriter.write_arrow``: what a foreachBatch call does once it
has the rows), each of ROWS rows numbered from FIRST + batch * ROWS. Two processes
given the same QUERY race for every batch (a zombie driver and its successor):
one commits it, the other must skip it. Prints ``SKIPPED <ids>``.
"""

from __future__ import annotations

import os
import sys
import time


def main() -> None:
    warehouse, query, first, batches, rows, go = sys.argv[1:7]
    import pyarrow as pa

    from oncestream.spark import iceberg

    writer = iceberg("lake.orders", warehouse=warehouse, query_name=query)
    deadline = time.monotonic() + 60
    while not os.path.exists(go):  # another process's file: no event to wait on
        if time.monotonic() > deadline:
            raise SystemExit("never told to start")
        time.sleep(0.01)
    for batch in range(int(batches)):
        start = int(first) + batch * int(rows)
        ids = pa.array(range(start, start + int(rows)), pa.int64())
        writer.write_arrow(pa.table({"id": ids, "query": [query] * int(rows)}), query, batch)
    print("SKIPPED", " ".join(map(str, writer.skipped or [])), flush=True)


if __name__ == "__main__":
    main()
