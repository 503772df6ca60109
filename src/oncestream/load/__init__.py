"""The exactly-once file loader: a JSONL or CSV file, a stream or records into a stream.

Each record gets a deterministic msg id (a field, or a hash of its content);
for a regular file, progress records kept in the server make a re-run add
nothing, however late, and resume after what an earlier run confirmed. It is
what ``oncestream publish`` runs.

Example::

    from oncestream.load import LoadOptions, load

    options = LoadOptions(stream="ORDERS", subject="orders.{region}", id_field="id")
    result = await load(conn, "orders.jsonl", options)
    print(result.stored, result.duplicates, result.skipped)
"""

from ._input import InputFormat, Source
from ._load import LoadObserver, LoadStart, load
from ._options import LoadOptions
from ._progress import PROGRESS_STREAM, ConcurrentRun
from ._result import LoadIncomplete, LoadResult

__all__ = [
    "PROGRESS_STREAM",
    "ConcurrentRun",
    "InputFormat",
    "LoadIncomplete",
    "LoadObserver",
    "LoadOptions",
    "LoadResult",
    "LoadStart",
    "Source",
    "load",
]
