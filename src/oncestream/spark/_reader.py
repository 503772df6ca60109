"""Read a sequence range of a stream into Arrow record batches (runs on executors).

The reading itself is :class:`oncestream.read.RangeReader` (shared with the
audit and the sink); this module adds the Arrow conversion and the
retention check of the source's ``failOnDataLoss`` option.
"""

from __future__ import annotations

import logging

import pyarrow as pa

from .._connection import Connection
from .._errors import DataLossError
from .._options import ConnectOptions
from .._retry import leader_stream_info, retrying
from ..read import RangeReader
from ..read._internal import delete_consumer_later
from ._columns import ARROW_SCHEMA, to_batch
from ._connections import close_connections, get_connection
from ._offsets import RECREATED_FIX, created_of, recreated_text
from ._source_options import RETRY_BUDGET

__all__ = [
    "ARROW_SCHEMA",
    "PartitionReader",
    "check_retention",
    "close_connections",
    "delete_consumer_later",
    "source_connection",
]

log = logging.getLogger(__name__)


async def source_connection(options: ConnectOptions) -> Connection:
    """The source's connection for ``options`` in this process (shared by every partition)."""
    return await get_connection(options, name="oncestream-spark-source")


# --------------------------------------------------------------------------- retention


async def check_retention(
    conn: Connection,
    stream: str,
    first: int,
    last: int,
    *,
    fail_on_data_loss: bool,
    retry_timeout: float = 0.0,
    created: str | None = None,
) -> int:
    """Return where reading ``[first, last]`` can start, given the stream's retention.

    The stream's state comes from its leader; transient errors (a leader
    election) are retried for ``retry_timeout`` seconds. ``created`` is the
    creation time of the stream the range was planned in; when the stream on
    the server has another one (deleted and re-created since), the range names
    messages of a stream that is gone: nothing of it is read (``last + 1``).

    Raises:
        DataLossError: when ``fail_on_data_loss`` and sequences in the range
            were removed (max_age, max_msgs, max_bytes, purge) before being read,
            or the stream was re-created.
    """
    if first > last:
        return first
    info = await retrying(
        lambda: leader_stream_info(conn, stream),
        budget=retry_timeout,
        budget_source=RETRY_BUDGET,
        what=f"STREAM.INFO {stream!r}",
    )
    current = created_of(info)
    if created is not None and current is not None and created != current:
        text = recreated_text(stream, first - 1, created, info)
        if fail_on_data_loss:
            raise DataLossError(f"{text}; {RECREATED_FIX}")
        log.warning(
            "%s; not reading sequences %d..%d of the old stream (failOnDataLoss=false)",
            text,
            first,
            last,
        )
        return last + 1
    first_seq = int(info["state"].get("first_seq", 0))
    if first_seq <= first:
        return first
    gap_end = min(first_seq - 1, last)
    text = (
        f"stream {stream!r}: sequences {first}..{gap_end} were removed (retention limit or "
        f"purge; the stream now starts at {first_seq}) before they were read"
    )
    if fail_on_data_loss:
        raise DataLossError(
            f"{text}; set option failOnDataLoss=false to skip such gaps (the messages are lost)"
        )
    log.warning("%s; skipping them because failOnDataLoss=false", text)
    return gap_end + 1


# --------------------------------------------------------------------------- reader


class PartitionReader(RangeReader):
    """:class:`oncestream.read.RangeReader` yielding Arrow record batches of the source schema.

    Args:
        include_headers: fill the ``headers`` column.
        (the rest as for :class:`oncestream.read.RangeReader`)

    Example::

        reader = PartitionReader(conn, "ORDERS", 1, 1000, (), direct=True)
        while (batch := await reader.next_batch()) is not None:
            ...
    """

    def __init__(
        self,
        conn: Connection,
        stream: str,
        first: int,
        last: int,
        subjects: tuple[str, ...] = (),
        *,
        direct: bool,
        include_headers: bool = False,
        batch: int = 8192,
        retry_timeout: float = 30.0,
        replicated: bool = False,
    ) -> None:
        super().__init__(
            conn,
            stream,
            first,
            last,
            subjects,
            direct=direct,
            batch=batch,
            retry_timeout=retry_timeout,
            replicated=replicated,
            budget_source=RETRY_BUDGET,
        )
        self.include_headers = include_headers
        self._stream_name = pa.scalar(stream, pa.string())

    async def next_batch(self) -> pa.RecordBatch | None:
        """The next chunk as a RecordBatch, or None when the range is exhausted.

        Raises:
            OperationTimeout: the server did not answer within the retry budget.
            StreamNotFound: the stream does not exist (any more).
            JetStreamError: the server answered with an unexpected status.
        """
        while (chunk := await self.next_chunk()) is not None:
            batch, _ = to_batch(
                chunk,
                self._stream_name,
                last=self.last,
                direct=self.direct,
                include_headers=self.include_headers,
            )
            if batch is not None:
                return batch
        return None
