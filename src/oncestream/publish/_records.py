"""Records on one subject of a stream: read the last one back, append the next after it.

Three parts of oncestream keep their state in a stream instead of a local
file, one subject per owner: a :class:`~oncestream.ProducerSession` (its
resume position), ``oncestream publish`` (progress records of a file) and
the Spark sink (committed-batch records). :class:`SubjectLog` is what they
share: the last record is read back with ``STREAM.MSG.GET last_by_subj``, which
the stream's leader answers (a direct get, which a replica or a mirror behind
the leader may answer, only on request), and a record is appended with a
deterministic msg id, so a
re-sent append is stored once. An *exclusive* append also carries
``Nats-Expected-Last-Subject-Sequence``: it is stored only if the subject
still ends where this log last saw it, so two writers can never interleave
unnoticed.

Example::

    log = SubjectLog(conn, "PROGRESS", "progress.file-1")
    last = await log.last()                     # a StoredMessage, or None
    ack = await log.append(b"{...}", msg_id="run-1:7")
"""

from __future__ import annotations

from typing import Any

from .._connection import Connection
from .._errors import PermissionDenied, WrongLastSequence
from .._options import parse_duration
from .._retry import retrying
from ..streams import Partitioning, StoredMessage, last_message
from ._options import PubAck, PublisherOptions
from ._publisher import Publisher

__all__ = ["SubjectLog"]

#: Appends refused while the subject still ends where expected (another write in flight).
_IN_FLIGHT_RETRIES = 8


class SubjectLog:
    """The records of one subject of ``stream``, oldest first; this log appends at the end.

    Args:
        conn: an open connection.
        stream: the stream that captures ``subject``.
        subject: the owner's subject.
        publisher: the Publisher to append with (started on first use); default:
            one of the log's own, one record in flight, no window guard (the
            caller's record ids or the exclusive check make re-sends safe).
        ack_timeout, max_attempts: the retry settings of the log's own Publisher.
        direct: read the last record with a direct get (the stream needs
            ``allow_direct``) instead of ``STREAM.MSG.GET``. Any replica, or a
            mirror with ``mirror_direct``, may answer a direct get from state that
            lacks the newest records, so an exclusive append after such a read
            can be refused as if another writer had written: only for readers
            that a stale answer cannot mislead.
        retry_budget: seconds for which the log's own requests (reading the last
            record, the Publisher's start-up ``STREAM.INFO``) retry transient errors
            (a timeout, no stream leader); 0: none, except that an unstarted
            Publisher retries its ``STREAM.INFO`` for its own
            :attr:`~PublisherOptions.patience`. Permanent errors propagate at once.

    Attributes:
        last_seq: the stream sequence of the last record read or appended (0: none).
    """

    def __init__(
        self,
        conn: Connection,
        stream: str,
        subject: str,
        *,
        publisher: Publisher | None = None,
        direct: bool = False,
        ack_timeout: float = 2.0,
        max_attempts: int = 3,
        retry_budget: float = 0.0,
    ) -> None:
        self.conn = conn
        self.retry_budget = parse_duration("SubjectLog retry_budget", retry_budget)
        self.stream = stream
        self.subject = subject
        self.direct = direct
        self.last_seq = 0
        #: The subject the records are stored under (read once: a partitioned stream
        #: stores them under ``<partition>.<subject>``).
        self._stored: str | None = None
        self._own = publisher is None
        self.publisher = publisher or Publisher(
            conn,
            PublisherOptions(
                stream=stream,
                max_inflight=1,
                ack_timeout=ack_timeout,
                max_attempts=max_attempts,
                check_window=False,
                ingest="acks",  # a record's sequence and duplicate flag are read
            ),
        )

    async def last(self) -> StoredMessage | None:
        """The subject's last record (None: no record); remembers its sequence.

        Raises:
            StreamNotFound: the stream does not exist.
        """
        if self._stored is None:
            self._stored = await self._stored_subject()
        stored = self._stored
        found = await retrying(
            lambda: last_message(self.conn, self.stream, stored, direct=self.direct),
            budget=self.retry_budget,
            what=f"reading the last record on {self.subject!r}",
        )
        self.last_seq = 0 if found is None else found.seq
        return found

    async def _stored_subject(self) -> str:
        """The subject the server stores this log's records under.

        A partitioned stream maps each subject to ``<partition>.<subject>``, and the
        server checks ``Nats-Expected-Last-Subject-Sequence`` against that one; the
        last record is read back from it too. One ``STREAM.INFO`` (a user who may not read it
        gets the subject as published: a stream it cannot inspect is taken as
        unpartitioned).
        """
        try:
            info = await retrying(
                lambda: self.conn.stream_info(self.stream),
                budget=self.retry_budget,
                what=f"STREAM.INFO {self.stream}",
            )
        except PermissionDenied:
            return self.subject
        config: dict[str, Any] = info.get("config") or {}
        partitioning = Partitioning.from_config(config)
        return self.subject if partitioning is None else partitioning.stored_subject(self.subject)

    async def append(
        self,
        data: bytes,
        *,
        msg_id: str,
        headers: dict[str, str] | None = None,
        exclusive: bool = True,
    ) -> PubAck:
        """Store ``data`` as the subject's next record; return its PubAck.

        Args:
            msg_id: the record's deterministic id: an append sent again (a retry,
                a restarted writer) is stored once.
            exclusive: only after the record this log last read or appended
                (``Nats-Expected-Last-Subject-Sequence``).

        Raises:
            WrongLastSequence: (exclusive) another writer appended in between. When
                the subject's last record carries ``msg_id`` (this very append,
                stored by an earlier attempt whose PubAck was lost) it is not
                raised: the PubAck of that record is returned, ``duplicate`` set.
                A refusal while the subject still ends where expected (a replicated
                stream refuses while another write to it is in flight: 10164) is
                asked again, up to 8 times.
            PublishFailed: no PubAck after every retry.
        """
        expected = self.last_seq
        if not self.publisher.started and not self.retry_budget:
            await self.publisher.start()  # its STREAM.INFO retries for its own patience
        elif not self.publisher.started:
            # As patient as the reads, at one level: the whole start (its STREAM.INFO,
            # the reply subscription's flush) is retried here and none of it inside, so
            # a stalled lookup gives up after retry_budget, not after twice that.
            await retrying(
                lambda: self.publisher.start(retry_budget=0.0),
                budget=self.retry_budget,
                what=f"starting the publisher of {self.subject!r}",
            )
        in_flight = False  # the last refusal left the subject where it was

        async def once() -> PubAck:
            nonlocal in_flight
            future = await self.publisher.publish(
                self.subject,
                data,
                msg_id=msg_id,
                headers=headers,
                expected_stream=self.stream,
                expected_last_subject_seq=expected if exclusive else None,
            )
            try:
                ack = await future
            except WrongLastSequence:
                # The server checks the expected sequence before de-duplicating: a
                # re-send of a record already stored lands here, like a rival's write.
                found = await self.last()
                if found is not None and found.msg_id == msg_id:
                    return PubAck(self.stream, found.seq, True, None)
                # The subject still ends where it did: nothing was stored in between.
                # A replicated stream refuses (10164) while another write to the subject
                # is in flight, such as an earlier attempt of this very append: once it
                # is stored (then found above) or dropped, asking again settles it.
                in_flight = (found.seq if found else 0) == expected
                raise
            self.last_seq = ack.seq
            return ack

        return await retrying(
            once,
            budget=None,
            what=f"appending to {self.subject!r}",
            attempts=_IN_FLIGHT_RETRIES,
            retry_if=lambda exc: isinstance(exc, WrongLastSequence) and in_flight,
            delay=lambda attempt: min(0.05 * 2 ** (attempt + 1), 1.0),
            log_retries=False,
        )

    async def close(self) -> None:
        """Close the log's own Publisher (one given to it is left open)."""
        if self._own:
            await self.publisher.close()
