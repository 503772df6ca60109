"""Committed-batch records of the streaming ``jetstream`` sink, kept in a JetStream stream.

One subject per query scope (``oncestream.sink.commits.<scope>``) in the
``ONCESTREAM_SINK_COMMITS`` stream; its last message says which micro-batch
the sink committed last and where the target stream ended at that moment.
Spark commits micro-batches in order, so "batch N is committed" is
``last.batch_id >= N``, and everything a later (possibly failed) attempt
wrote sits after ``last.tail_seq`` in the target stream.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

import orjson

from .._connection import Connection
from .._errors import JetStreamError, StreamNotFound
from ..publisher import Publisher, PublisherOptions
from ..reader import read_stream
from ..streams import StreamSpec, ensure_stream, last_message, stream_exists
from ._connections import get_publisher

__all__ = ["COMMITS_STREAM", "CommitRecord", "CommitStore", "last_seq", "stored_ids"]

log = logging.getLogger("oncestream.spark.sink")

COMMITS_STREAM = "ONCESTREAM_SINK_COMMITS"
_SUBJECT = "oncestream.sink.commits"


@dataclass(frozen=True, kw_only=True)
class CommitRecord:
    """What the sink knows about a query's last committed micro-batch.

    Args:
        batch_id: the micro-batch (-1: the query started, nothing committed yet).
        tail_seq: the target stream's last sequence when the record was made.
        written: messages stored by the batch.
        duplicates: publishes the server dropped as duplicates.
        skipped: rows not re-sent because a failed attempt had stored them.
        query_id: Spark's query id (kept in the checkpoint, so stable across
            restarts); a record of another query id is stale (a new query was
            started on a reused checkpoint path) and is ignored.
    """

    batch_id: int
    tail_seq: int
    stream: str
    written: int = 0
    duplicates: int = 0
    skipped: int = 0
    query_id: str | None = None

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def from_json(cls, data: bytes) -> CommitRecord:
        fields = orjson.loads(data)
        return cls(**{k: v for k, v in fields.items() if k in cls.__dataclass_fields__})


class CommitStore:
    """Reads and appends :class:`CommitRecord` s of one query scope.

    Records are published through ``publisher`` (a task's own Publisher), or
    else through the process's cached commit-record Publisher on ``conn``.

    Example::

        store = CommitStore(conn)
        await store.ensure()
        last = await store.last(scope)
    """

    def __init__(
        self, conn: Connection, stream: str = COMMITS_STREAM, publisher: Publisher | None = None
    ) -> None:
        self.conn = conn
        self.stream = stream
        self.publisher = publisher

    def subject(self, scope: str) -> str:
        return f"{_SUBJECT}.{self.stream.lower()}.{scope}"

    async def ensure(self) -> None:
        """Create the records stream if it does not exist (kept: the last 16 records per query)."""
        if await stream_exists(self.conn, self.stream):
            return
        spec = StreamSpec(
            name=self.stream,
            subjects=(f"{_SUBJECT}.{self.stream.lower()}.>",),
            max_msgs_per_subject=16,
            duplicate_window=600.0,
        )
        await ensure_stream(self.conn, spec)
        log.info("created stream %s for the sink's committed-batch records", self.stream)

    async def last(self, scope: str) -> CommitRecord | None:
        """The scope's last record, or None when the query never started."""
        try:
            found = await last_message(self.conn, self.stream, self.subject(scope))
        except StreamNotFound:
            return None
        return None if found is None else CommitRecord.from_json(found.data)

    async def mark_attempt(self, scope: str, partition: int, batch_id: int) -> bool:
        """Note that a task of ``batch_id`` starts writing ``partition``; True if one did before.

        The marker is stored before the task publishes anything, so when a
        replayed or retried task finds it, an earlier attempt may have stored
        rows of this batch; when it is absent, none did and nothing needs reading.
        """
        subject = f"{self.subject(scope)}.p{partition}"
        found = await last_message(self.conn, self.stream, subject)
        if found is not None and int(orjson.loads(found.data).get("batch_id", -2)) == batch_id:
            return True
        await self._publish(
            subject, orjson.dumps({"batch_id": batch_id}), f"{scope}:{batch_id}:p{partition}"
        )
        return False

    async def record(self, scope: str, record: CommitRecord) -> None:
        """Append ``record`` (idempotent: its msg id is the scope and batch id).

        Raises:
            JetStreamError: when the record cannot be stored.
        """
        await self._publish(self.subject(scope), record.to_json(), f"{scope}:{record.batch_id}")

    async def _publish(self, subject: str, data: bytes, msg_id: str) -> None:
        pub = self.publisher
        if pub is None:
            options = PublisherOptions(stream=self.stream, check_window=False)
            pub = await get_publisher(self.conn, options)
        future = await pub.publish(subject, data, msg_id=msg_id, expected_stream=self.stream)
        ack = await future
        if ack.stream != self.stream:
            raise JetStreamError(f"commit record stored in {ack.stream!r}, not {self.stream!r}")


async def last_seq(conn: Connection, stream: str) -> int:
    """The stream's current last sequence."""
    info = await conn.stream_info(stream)
    return int(info["state"].get("last_seq", 0))


async def stored_ids(conn: Connection, stream: str, after: int) -> set[str]:
    """Msg ids stored in ``stream`` after sequence ``after`` (what a failed attempt wrote)."""
    tail = await last_seq(conn, stream)
    if tail <= after:
        return set()
    ids: set[str] = set()
    async for chunk in read_stream(conn, stream, start_seq=after + 1):
        ids.update(r.msg_id for r in chunk if r.msg_id)
    log.info("stream %s: %d ids after sequence %d will not be re-sent", stream, len(ids), after)
    return ids
