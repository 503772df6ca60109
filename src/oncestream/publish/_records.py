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

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .._connection import Connection
from .._errors import MessageNotFound, PermissionDenied, WrongLastSequence
from .._options import parse_duration
from .._retry import retrying
from ..streams import Partitioning, StoredMessage, get_message, last_message
from ._options import PubAck, PublisherOptions
from ._publisher import Publisher

__all__ = [
    "REPLAYED_RESENDS",
    "REPLAY_OF",
    "Refusal",
    "SubjectLog",
    "is_replayed",
    "previous_message",
    "why_refused",
]

#: Seconds an append refused while the subject still ends where expected (another write
#: in flight) keeps asking, at least: a leader without quorum holds the write "in process"
#: until it commits or the leader steps down (the fault campaign's trial 21: 11 s). The
#: publisher's retry horizon when longer.
IN_FLIGHT_PATIENCE = 15.0

#: Re-sends of an append (or a ProducerSession's atomic batch) refused because replayed
#: copies of dead letters followed the expected record, before the refusal propagates.
REPLAYED_RESENDS = 8

#: The header of a dead letter's copy that ``oncestream dlq replay`` republished on the
#: letter's original subject: on an owner's subject such a copy is not the owner's record.
REPLAY_OF = "Oncestream-Replay-Of"


def is_replayed(msg: StoredMessage) -> bool:
    """Whether ``msg`` is a dead letter's replayed copy (it carries :data:`REPLAY_OF`)."""
    return msg.header(REPLAY_OF) is not None


@dataclass(frozen=True, kw_only=True)
class Refusal:
    """What a subject holds after ``expected`` once an exclusive append after it was refused.

    Attributes:
        stored: the refused record itself (its msg id), stored by an earlier attempt
            whose PubAck was lost.
        replayed: only replayed copies follow ``expected`` (a log with
            ``skip_replayed``): append after them, at the log's ``last_seq``.
        unchanged: the subject still ends at ``expected``: nothing was stored in
            between (a replicated stream refuses while another write is in flight).
        None of them: another writer stored a record of its own after ``expected``.
    """

    stored: StoredMessage | None = None
    replayed: bool = False
    unchanged: bool = False


async def previous_message(
    next_at: Callable[[int], Awaitable[StoredMessage | None]], before: int, floor: int = 0
) -> StoredMessage | None:
    """The subject's last message before sequence ``before`` and after ``floor`` (None: none).

    The leader's ``STREAM.MSG.GET`` reads a subject forward only (``next_by_subj``:
    ``next_at(s)`` is the subject's first message at or after ``s``, or None), so the
    search widens a window back from ``before`` (1, 2, 4... sequences) until it holds
    a message of the subject, then halves the part after that message: some
    2 x log2(distance) reads, one when the message is right before ``before``.
    """
    high, width = before, 1  # no message of the subject in [high, before)
    while True:
        start = max(before - width, floor + 1)
        if start >= high:
            return None
        found = await next_at(start)
        if found is not None and found.seq < before:
            break
        high, width = start, width * 2
    while found.seq + 1 < high:
        middle = (found.seq + high) // 2
        later = await next_at(middle)
        if later is not None and later.seq < before:
            found = later
        else:
            high = middle
    return found


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
        skip_replayed: a message carrying ``Oncestream-Replay-Of`` (a dead letter's
            copy that ``oncestream dlq replay`` republished on this subject) is not a
            record: :meth:`last` reads back past such copies to the last record, and an
            exclusive append refused because copies followed the expected record is
            stored after them. A message of another writer still refuses it.

    Attributes:
        last_seq: the stream sequence of the subject's last message read, or of the
            last record appended (0: none): what the next exclusive append expects.
        refused_expected: the sequence the last refused send of :meth:`append`
            expected (0: none refused yet).
        replayed_resends: how many times the last :meth:`append` was sent again
            because replayed copies followed the expected record.
        refused_by_copies: the last refusal of :meth:`append` propagated because
            copies kept arriving (:data:`REPLAYED_RESENDS` re-sends), not because of
            another writer.
        refused_in_flight: the last refusal of :meth:`append` propagated while the
            subject still ended where expected: a write to it stayed in flight (no
            quorum) for the whole patience, not another writer's record.
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
        skip_replayed: bool = False,
    ) -> None:
        self.conn = conn
        self.skip_replayed = skip_replayed
        self.retry_budget = parse_duration("SubjectLog retry_budget", retry_budget)
        self.stream = stream
        self.subject = subject
        self.direct = direct
        self.last_seq = 0
        self.refused_expected = 0
        self.replayed_resends = 0
        self.refused_by_copies = False
        self.refused_in_flight = False
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

    async def last(self, *, after: int = 0) -> StoredMessage | None:
        """The subject's last record (None: no record); remembers the subject's last sequence.

        With ``skip_replayed``, replayed copies at the end of the subject are read
        past (backwards, from the stream's leader) to the last record; the walk
        stops at sequence ``after``: None when only copies follow it. ``last_seq``
        is the subject's last message all the same, copy or not: an exclusive
        append goes after it.

        Raises:
            StreamNotFound: the stream does not exist.
        """
        stored = await self._subject()
        found = await retrying(
            lambda: last_message(self.conn, self.stream, stored, direct=self.direct),
            budget=self.retry_budget,
            what=f"reading the last record on {self.subject!r}",
        )
        self.last_seq = 0 if found is None else found.seq
        while found is not None and self.skip_replayed and is_replayed(found):
            found = await previous_message(self._next_at, found.seq, after)
        return found

    async def _subject(self) -> str:
        if self._stored is None:
            self._stored = await self._stored_subject()
        return self._stored

    async def _next_at(self, seq: int) -> StoredMessage | None:
        """The subject's first message at or after ``seq`` (``STREAM.MSG.GET``: the leader)."""
        stored = await self._subject()

        async def get() -> StoredMessage | None:
            try:
                return await get_message(self.conn, self.stream, seq=seq, next_by_subject=stored)
            except MessageNotFound:
                return None

        return await retrying(
            get, budget=self.retry_budget, what=f"reading {self.subject!r} from seq {seq}"
        )

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
                asked again for :data:`IN_FLIGHT_PATIENCE` seconds or the publisher's
                retry horizon, the longer (then :attr:`refused_in_flight` tells this
                case); one because replayed copies follow
                the expected record (``skip_replayed``) is sent again after the last
                copy, up to 8 times (:attr:`refused_by_copies` then tells this case).
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
        replayed = False  # the last refusal came from replayed copies: append after them
        in_flight_since: float | None = None
        patience = max(IN_FLIGHT_PATIENCE, self.publisher.options.retry_horizon)
        self.replayed_resends = 0
        self.refused_by_copies = False
        self.refused_in_flight = False

        async def once() -> PubAck:
            nonlocal expected, in_flight, replayed, in_flight_since
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
                self.refused_expected = expected
                why = await why_refused(self, expected, msg_id)
                if why.stored is not None:  # last_seq: the subject's end, copies after it
                    return PubAck(self.stream, why.stored.seq, True, None)
                # The subject still ends where it did: nothing was stored in between.
                # A replicated stream refuses (10164) while another write to the subject
                # is in flight, such as an earlier attempt of this very append: once it
                # is stored (then found above) or dropped, asking again settles it.
                if why.unchanged and in_flight_since is None:
                    in_flight_since = time.monotonic()
                in_flight = (
                    why.unchanged
                    and in_flight_since is not None
                    and time.monotonic() - in_flight_since < patience
                )
                self.refused_in_flight = why.unchanged and not in_flight
                # Copies of dead letters replayed on the subject are no writer's records:
                # the record goes after them, checked against the last one.
                replayed = why.replayed and self.replayed_resends < REPLAYED_RESENDS
                self.refused_by_copies = why.replayed and not replayed
                if replayed:
                    expected = self.last_seq
                    self.replayed_resends += 1
                raise
            self.last_seq = ack.seq
            return ack

        return await retrying(
            once,
            budget=None,
            what=f"appending to {self.subject!r}",
            retry_if=lambda exc: isinstance(exc, WrongLastSequence) and (in_flight or replayed),
            delay=lambda attempt: 0.0 if replayed else min(0.05 * 2 ** (attempt + 1), 1.0),
            log_retries=False,
        )

    async def close(self) -> None:
        """Close the log's own Publisher (one given to it is left open)."""
        if self._own:
            await self.publisher.close()


async def why_refused(log: SubjectLog, expected: int, msg_id: str) -> Refusal:
    """Why an exclusive append to ``log`` after ``expected`` (msg id ``msg_id``) was refused.

    The server checks ``Nats-Expected-Last-Subject-Sequence`` before
    de-duplicating msg ids, so a re-send of a record already stored is refused
    like a rival's write; reading the subject back tells the cases apart.
    Sets ``log.last_seq`` to the subject's last message.
    """
    found = await log.last(after=expected)
    if found is not None and found.msg_id == msg_id:
        return Refusal(stored=found)
    if log.last_seq == expected:
        return Refusal(unchanged=True)
    if found is None and log.last_seq > expected and log.skip_replayed:
        return Refusal(replayed=True)
    return Refusal()
