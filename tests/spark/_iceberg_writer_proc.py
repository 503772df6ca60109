"""One of several processes writing one Iceberg table at once (tests/spark/test_iceberg.py).

Usage: python -m tests.spark._iceberg_writer_proc WAREHOUSE QUERY FIRST BATCHES ROWS GO

Waits until the file GO exists (so the processes start writing together), then
commits batches ``0..BATCHES-1`` of query QUERY through the writer's own commit
path (``IcebergBatchWriter.write_arrow``: what a foreachBatch call does once it
has the rows), each of ROWS rows numbered from FIRST + batch * ROWS. Two processes
given the same QUERY race for every batch (a zombie driver and its successor):
both start batch ``k`` together (a barrier of files beside GO: without it, the one
ahead makes the other's next batch an older one than the table holds, which the
writer refuses as stale), one commits it, the other must skip it. Prints
``SKIPPED <ids>``.
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
        _barrier(os.path.join(os.path.dirname(go), f"barrier-{query}-{batch}"))
        start = int(first) + batch * int(rows)
        ids = pa.array(range(start, start + int(rows)), pa.int64())
        writer.write_arrow(pa.table({"id": ids, "query": [query] * int(rows)}), query, batch)
    print("SKIPPED", " ".join(map(str, writer.skipped or [])), flush=True)


def _barrier(folder: str, peers: int = 2) -> None:
    """Return once ``peers`` processes reached ``folder`` (each leaves a file named by its pid)."""
    os.makedirs(folder, exist_ok=True)
    open(os.path.join(folder, str(os.getpid())), "w").close()
    deadline = time.monotonic() + 60
    while len(os.listdir(folder)) < peers:  # other processes' files: polled, bounded
        if time.monotonic() > deadline:
            raise SystemExit(f"barrier {folder}: the other writer never came")
        time.sleep(0.002)


if __name__ == "__main__":
    main()
