"""Committed-batch records of the streaming ``jetstream`` sink, kept in a JetStream stream.

One subject per checkpoint location, ``oncestream.sink.commits.<records
stream, lower case>.<scope>`` (:meth:`CommitStore.subject`), in the
``ONCESTREAM_SINK_COMMITS`` stream; its last message says which micro-batch
the sink committed last. Spark commits micro-batches in order, so "batch N is
committed" is ``last.batch_id >= N``. Per partition, ``<subject>.p<N>`` holds
the attempt marker of the partition's latest batch, with the target stream's
last sequence when that batch's first attempt began: everything an attempt of
that batch wrote sits after it.

Every record and marker belongs to one query: it carries Spark's query id
(kept in the checkpoint, so stable across restarts) and its msg id contains
it. A new query on a reused checkpoint path (the old checkpoint deleted)
therefore neither reads the old query's records as its own nor has its own
dropped by the server as duplicates of the old query's. A ``duplicate``
PubAck on a control record is never taken as success: the store reads the
subject back and accepts it only when the stored record is this query's.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Self

import orjson

from .._connection import Connection
from .._errors import PublishError, StreamNotFound
from ..publish import PubAck, Publisher, PublisherOptions, SubjectLog
from ..streams import StreamSpec, create_stream_if_missing
from ..streams._internal import stream_exists
from ._connections import get_publisher

__all__ = [
    "COMMITS_STREAM",
    "COMMITS_SUBJECT",
    "AttemptMarker",
    "CommitRecord",
    "CommitStore",
    "last_seq",
    "tail_of",
]

log = logging.getLogger(__name__)

COMMITS_STREAM = "ONCESTREAM_SINK_COMMITS"
#: Subjects of the records: ``<COMMITS_SUBJECT>.<records stream, lower case>.<scope>``.
COMMITS_SUBJECT = "oncestream.sink.commits"


@dataclass(frozen=True, kw_only=True)
class _Json:
    """JSON of a record dataclass; unknown fields (a newer writer's) are ignored on reading."""

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def from_json(cls, data: bytes) -> Self:
        fields = orjson.loads(data)
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in fields.items() if k in known})


@dataclass(frozen=True, kw_only=True)
class CommitRecord(_Json):
    """What the sink knows about a query's last committed micro-batch.

    Args:
        batch_id: the micro-batch (-1: written by earlier oncestream versions when a query
            started; nothing committed yet).
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


@dataclass(frozen=True, kw_only=True)
class AttemptMarker(_Json):
    """A task of ``batch_id`` started writing its partition (stored before its first publish).

    Args:
        batch_id: the micro-batch.
        query_id: Spark's query id (None in markers of earlier oncestream versions).
        tail_seq: the target stream's last sequence before the attempt that
            stored the marker published anything (None in markers of
            earlier oncestream versions: the previous commit record's tail applies).
        target_created: the target stream's creation time then: ``tail_seq`` is a
            position in that stream, and says nothing about a re-created one.
    """

    batch_id: int
    query_id: str | None = None
    tail_seq: int | None = None
    target_created: str | None = None


def _ours(record: CommitRecord, query_id: str | None) -> bool:
    """Whether ``record`` is a commit record of query ``query_id``.

    Earlier oncestream versions wrote the start record (batch -1) without a
    query id; it holds no commit, only a tail, so it is taken as this query's.
    A committed batch without a query id is not trusted to be this query's.
    """
    if record.query_id is None:
        return record.batch_id < 0
    return record.query_id == query_id


class CommitStore:
    """Reads and appends :class:`CommitRecord` s and :class:`AttemptMarker` s of one query.

    Records are published through ``publisher`` (a task's own Publisher), or
    else through the process's cached commit-record Publisher on ``conn``.

    Example::

        store = CommitStore(conn)
        await store.ensure()
        last = await store.last(scope, query_id)
    """

    def __init__(
        self, conn: Connection, stream: str = COMMITS_STREAM, publisher: Publisher | None = None
    ) -> None:
        self.conn = conn
        self.stream = stream
        self.publisher = publisher

    def subject(self, scope: str) -> str:
        """The records subject of checkpoint scope ``scope``."""
        return f"{COMMITS_SUBJECT}.{self.stream.lower()}.{scope}"

    async def ensure(self) -> None:
        """Create the records stream if it does not exist (kept: the last 16 records per query)."""
        if await stream_exists(self.conn, self.stream):
            return
        spec = StreamSpec(
            name=self.stream,
            subjects=(f"{COMMITS_SUBJECT}.{self.stream.lower()}.>",),
            max_msgs_per_subject=16,
            duplicate_window=600.0,
            allow_batched=False,  # each record's PubAck (its duplicate flag) is read
        )
        await create_stream_if_missing(self.conn, spec)
        log.info("created stream %s for the sink's committed-batch records", self.stream)

    async def last(self, scope: str, query_id: str | None) -> CommitRecord | None:
        """The last record of query ``query_id`` on ``scope``; None when it has none.

        A last record of another query (a new query on a reused checkpoint path,
        whose batch ids restart at 0) is ignored, with a warning.
        """
        found = await self._last(scope)
        if found is not None and not _ours(found, query_id):
            log.warning(
                "ignoring the sink's commit records of query %s: this is query %s on the "
                "same checkpoint location (a new checkpoint starts at batch 0)",
                found.query_id,
                query_id,
            )
            return None
        return found

    async def _log(self, subject: str) -> SubjectLog:
        pub = self.publisher
        if pub is None:
            pub = await get_publisher(
                self.conn, PublisherOptions(stream=self.stream, check_window=False, ingest="acks")
            )
        return SubjectLog(self.conn, self.stream, subject, publisher=pub)

    async def _last(self, scope: str) -> CommitRecord | None:
        try:
            found = await (await self._log(self.subject(scope))).last()
        except StreamNotFound:
            return None
        return None if found is None else CommitRecord.from_json(found.data)

    async def _last_marker(self, subject: str) -> AttemptMarker | None:
        found = await (await self._log(subject)).last()
        return None if found is None else AttemptMarker.from_json(found.data)

    async def mark_attempt(
        self,
        scope: str,
        partition: int,
        marker: AttemptMarker,
        *,
        last: CommitRecord | None = None,
    ) -> AttemptMarker | None:
        """Note that a task of ``marker.batch_id`` starts writing ``partition``.

        Returns the marker of an earlier attempt of the same query and batch
        when there is one (that attempt may have stored rows: everything after
        its ``tail_seq``), else stores ``marker`` and returns None (no earlier
        attempt, nothing to read). ``last`` is the query's last commit record,
        needed only to trust a marker of earlier oncestream versions, which has no query id.

        Raises:
            PublishError: the server called the marker a duplicate but the
                subject does not hold it.
        """
        subject = f"{self.subject(scope)}.p{partition}"

        def earlier(found: AttemptMarker | None) -> bool:
            if found is None or found.batch_id != marker.batch_id:
                return False
            if (
                found.query_id is None
            ):  # an earlier version's: trusted only next to a record of this query
                return last is not None
            return found.query_id == marker.query_id

        found = await self._last_marker(subject)
        if earlier(found):
            return found
        msg_id = f"{scope}:{marker.query_id}:{marker.batch_id}:p{partition}"
        ack = await self._publish(subject, marker.to_json(), msg_id)
        if ack.duplicate:
            found = await self._last_marker(subject)
            if earlier(found):
                return found
            raise PublishError(
                f"the attempt marker of batch {marker.batch_id}, partition {partition} of "
                f"query {marker.query_id} (msg id {msg_id!r}) was dropped by {self.stream!r} "
                f"as a duplicate, but {subject!r} does not hold it (last: {found}); "
                "is another query running on the same checkpoint location?"
            )
        return None

    async def record(self, scope: str, record: CommitRecord) -> None:
        """Append ``record`` (idempotent: its msg id is the scope, query id and batch id).

        Raises:
            JetStreamError: the record cannot be stored.
            PublishError: the server called it a duplicate but the subject's last
                record is not this query's at ``record.batch_id`` or later.
        """
        msg_id = f"{scope}:{record.query_id}:{record.batch_id}"
        ack = await self._publish(self.subject(scope), record.to_json(), msg_id)
        if not ack.duplicate:
            return
        # An earlier attempt of this very record (a re-committed batch after a
        # restart, a Publisher re-send): fine if the subject shows it.
        found = await self._last(scope)
        if (
            found is not None
            and found.query_id == record.query_id
            and found.batch_id >= record.batch_id
        ):
            return
        raise PublishError(
            f"the commit record of micro-batch {record.batch_id} of query {record.query_id} "
            f"(msg id {msg_id!r}) was dropped by {self.stream!r} as a duplicate, but the "
            f"last record on {self.subject(scope)!r} is {found}: the batch is not recorded. "
            "Is another query running on the same checkpoint location?"
        )

    async def _publish(self, subject: str, data: bytes, msg_id: str) -> PubAck:
        return await (await self._log(subject)).append(data, msg_id=msg_id, exclusive=False)


async def last_seq(conn: Connection, stream: str) -> int:
    """The stream's current last sequence."""
    return (await tail_of(conn, stream))[0]


async def tail_of(conn: Connection, stream: str) -> tuple[int, str | None]:
    """The stream's current last sequence and its creation time."""
    info = await conn.stream_info(stream)
    return int(info["state"].get("last_seq", 0)), str(info.get("created") or "") or None
