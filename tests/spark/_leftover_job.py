"""The job of tests/spark/test_checkpoint_leftovers.py, on a classic session or through
Spark Connect (``tests.spark._jobs``).

docs/spark-source.md, "A query that refuses to start after a kill in its first batch":
a driver killed while Spark wrote its first offset-log entry leaves Spark's hidden
temporary file (``offsets/.0.<uuid>.tmp`` and its ``.crc``); PySpark 4.1+ then refuse
every restart with ``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY`` (4.0 has no such check).
The job puts that leftover in a new checkpoint, starts the query, runs the function the
document gives (as written there) and starts the query again.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

from tests.spark._helpers import source_options

DOC = Path(__file__).resolve().parents[2] / "docs" / "spark-source.md"


def documented_function() -> Any:
    """``clear_first_batch_leftovers``, compiled from the document's code block."""
    text = DOC.read_text()
    (block,) = [
        b
        for b in re.findall(r"```python\n(.*?)```", text, re.S)
        if "clear_first_batch_leftovers" in b
    ]
    scope: dict[str, Any] = {}
    exec(compile(block, str(DOC), "exec"), scope)
    return scope["clear_first_batch_leftovers"]


def _start(spark: Any, url: str, stream: str, out: Path, checkpoint: Path) -> Any:
    return (
        spark.readStream.format("jetstream")
        .options(**source_options(url, stream, startingOffsets="earliest"))
        .load()
        .select("sequence")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def _run(query: Any) -> str | None:
    """The query's failure (None: it ran to its end)."""
    try:
        query.awaitTermination(120)
        failure = query.exception()
        return None if failure is None else str(failure)
    except Exception as exc:  # the query's failure, raised by awaitTermination
        return str(exc)
    finally:
        query.stop()


def checkpoint_leftover(spark: Any, url: str, stream: str, work: str) -> dict[str, Any]:
    """The refusal (or none), what the documented function removed, the rows read, and
    what the function does to a checkpoint with a planned batch."""
    out, checkpoint = Path(work) / "out", Path(work) / "ckpt"
    offsets = checkpoint / "offsets"
    offsets.mkdir(parents=True)
    leftover = offsets / f".0.{uuid.uuid4()}.tmp"
    leftover.write_text("v1\n")  # cut short, as by a SIGKILL before Spark's rename
    (offsets / f".{leftover.name}.crc").write_bytes(b"")
    refused = _run(_start(spark, url, stream, out, checkpoint))
    removed: list[str] = []
    again: str | None = None
    if refused is not None:
        removed = sorted(Path(p).name for p in documented_function()(str(checkpoint)))
        again = _run(_start(spark, url, stream, out, checkpoint))
    rows = sorted(r.sequence for r in spark.read.parquet(str(out)).collect())
    return {
        "refused": refused,
        "leftovers": sorted([leftover.name, f".{leftover.name}.crc"]),
        "removed": removed,
        "again": again,
        "rows": rows,
        "later": documented_function()(str(checkpoint)),
    }
