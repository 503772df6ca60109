"""Producer sessions: exactly-once publishing that does not depend on the duplicate window.

Msg-id de-duplication only lasts ``duplicate_window``. A producer that
restarts later (after a crash, a deploy, a long outage) needs another way
to know what it already stored. A :class:`ProducerSession` owns one subject,
``<subject_prefix>.<producer_id>``, and writes its source position into
every message (header ``Oncestream-Source-Pos``). On :meth:`start` it reads
the last message of that subject back from the stream's leader
(``STREAM.MSG.GET``; a direct get may be answered by a replica behind it) and
resumes after its position.

Guarantee: every publish (or, with ``batch_size > 1``, every atomic batch)
carries ``Nats-Expected-Last-Subject-Sequence`` = the stream sequence of the
session's previous message, and only one publish or batch is in flight at a
time. The server therefore stores message *n* only if message *n-1* is the
newest one on the subject (a batch is stored whole or not at all), so the
positions on the subject always form a gap-free, duplicate-free, ordered
prefix of the input; the last one is the resume point. A second producer
using the same id (a zombie) fails its next publish with
``WrongLastSequence``. A re-send of the session's own message whose first
attempt was stored (ack lost) fails the same check; the session recognises
its own message at the end of the subject and carries on. A dead letter's copy
that ``oncestream dlq replay`` republished on the subject (it carries
``Oncestream-Replay-Of``) is no producer's record: :meth:`start` reads back past
such copies to the session's last record, and a publish refused because copies
followed its previous message is sent again after them. A stream deleted
and re-created under a running session fails its next publish with a
``WrongLastSequence`` that says so (the stream's ``created`` time, read by
:meth:`start`, changed); :meth:`start` then resumes from what the new stream
holds. Throughput: one
round trip per message, or per batch of up to 1000 (the stream needs
``allow_atomic``, nats-server >= 2.12). Use a
:class:`~oncestream.publish.Publisher` when restarts within the window
are all you need. ``docs/publishing.md`` explains why pipelining single
messages cannot keep the prefix property.

Example::

    session = ProducerSession(conn, stream="ORDERS", subject_prefix="orders.src",
                              producer_id="loader-1")
    resume = await session.start()          # last stored position, or None
    await session.run(read_input())         # (position, data) pairs; stored ones are skipped
    await session.close()
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import AsyncIterable, Iterable, Mapping
from dataclasses import replace

from .._connection import Connection
from .._errors import (
    ConfigError,
    ErrCode,
    JetStreamError,
    OncestreamError,
    PublishFailed,
    WrongLastSequence,
)
from .._headers import check_user_headers
from .._names import check_publish_subject
from ._batch import (
    MAX_BATCH,
    AtomicBatchSender,
    BatchRecord,
)
from ._publisher import PubAck, Publisher, PublisherOptions
from ._records import REPLAY_OF, REPLAYED_RESENDS, SubjectLog, why_refused

__all__ = ["SOURCE_POS_HEADER", "ProducerSession"]

log = logging.getLogger(__name__)

SOURCE_POS_HEADER = "Oncestream-Source-Pos"
PRODUCER_HEADER = "Oncestream-Producer"

_TOKEN_RE = re.compile(r"^[A-Za-z0-9_\-]+$")

#: The headers of a dead letter's replayed copy (``Oncestream-Replay-Of``...): a session
#: reads a message carrying one as a copy, never as its record, so its records may not.
_REPLAY_PREFIX = "oncestream-replay-"


class ProducerSession:
    """One producer's exactly-once stream of positioned records, across restarts.

    Args:
        conn: an open connection.
        stream: the stream that captures ``<subject_prefix>.<producer_id>``.
        subject_prefix: e.g. ``"orders.src"``.
        producer_id: stable id of this producer (letters, digits, ``_``, ``-``).
        options: retry settings (``stream`` is set to ``stream``; the window
            guard is off, since the sequence check makes retries safe).
        batch_size: 1 (default) sends one message per round trip; 2..1000 sends
            atomic batches of that many records (the stream needs
            ``allow_atomic``, nats-server >= 2.12), committed all-or-nothing.

    Raises:
        ConfigError: invalid prefix, producer id or batch size.
    """

    def __init__(
        self,
        conn: Connection,
        *,
        stream: str,
        subject_prefix: str,
        producer_id: str,
        options: PublisherOptions | None = None,
        batch_size: int = 1,
    ) -> None:
        check_publish_subject(subject_prefix, "subject_prefix")
        if not _TOKEN_RE.match(producer_id or ""):
            raise ConfigError(
                f"producer_id must be letters, digits, '_' or '-', got {producer_id!r}"
            )
        if isinstance(batch_size, bool) or not 1 <= batch_size <= MAX_BATCH:
            raise ConfigError(f"batch_size must be 1..{MAX_BATCH}, got {batch_size!r}")
        self.conn = conn
        self.stream = stream
        self.batch_size = batch_size
        self.producer_id = producer_id
        self.subject = f"{subject_prefix}.{producer_id}"
        base = options or PublisherOptions()
        # Every attempt carries the same sequence check, so at most one can be
        # stored whatever the duplicate window: the window guard does not apply.
        # Each record's stored sequence is the next one's expectation: PubAcks, no batches.
        self.options = replace(base, stream=stream, check_window=False, ingest="acks")
        self._publisher = Publisher(conn, self.options)
        # Where the session's records are: the last one read back, the next appended.
        # Read back with STREAM.MSG.GET, which the stream's leader answers: a direct get
        # may be answered by a replica (or a mirror with mirror_direct) that has not
        # applied the newest records, and a resume point read from it would re-send
        # stored positions, refused with WrongLastSequence as if a zombie wrote them.
        # Reads happen at start() and after a refusal only, never per publish. As
        # patient as a message's sends: a pause or an election at start() is ridden out.
        self._log = SubjectLog(
            conn,
            stream,
            self.subject,
            publisher=self._publisher,
            retry_budget=self.options.patience,
            skip_replayed=True,
        )
        self.position: int | None = None
        self.published = 0
        self.skipped = 0
        self._started = False
        self._created = ""  # the stream's creation time when start() read the resume point
        self._buffer: list[BatchRecord] = []
        self._batcher = AtomicBatchSender(
            conn, self.subject, producer_id, self.options, SOURCE_POS_HEADER, PRODUCER_HEADER
        )

    @property
    def last_seq(self) -> int:
        """The stream sequence the next publish expects as its subject's last message.

        The session's last stored record, or a dead letter's copy replayed on the
        subject after it (0: the subject is empty).
        """
        return self._log.last_seq

    @last_seq.setter
    def last_seq(self, seq: int) -> None:
        self._log.last_seq = seq

    def msg_id(self, position: int) -> str:
        """The deterministic msg id of ``position``."""
        return f"{self.producer_id}:{position}"

    async def start(self) -> int | None:
        """Read the last stored message of this producer's subject; return its position.

        The message is read from the stream's leader (``STREAM.MSG.GET``), never
        from a replica or mirror that may not have applied it yet; a read that
        times out or finds no leader is retried for ``options.patience`` (ack
        timeout x attempts). Replayed copies of dead letters at the end of the subject (header
        ``Oncestream-Replay-Of``) are read past to the session's last record; the
        next publish goes after the last copy. The subject must keep that record:
        copies alone (the records removed by ``max_msgs_per_subject`` or a purge)
        do not tell where the session stopped.

        Returns:
            The last stored source position, or None when the subject holds no record.

        Raises:
            StreamNotFound: the stream does not exist.
            ConfigError: the window guard fails, the last message has no position header,
                or the subject holds replayed copies but no record of the session.
            OperationTimeout: no answer came for that long.
            JetStreamError: the stream still had no leader then (err_code 10008).
        """
        info = await self.conn.stream_info(self.stream)
        if self.batch_size > 1:
            if not info.get("config", {}).get("allow_atomic"):
                raise ConfigError(
                    f"batch_size={self.batch_size} needs atomic batch publish: enable "
                    f"allow_atomic on stream {self.stream!r} (nats-server >= 2.12), or use "
                    "batch_size=1"
                )
            await self._batcher.start()
        await self._publisher.start()
        self._created = str(info.get("created") or "")
        found = await self._log.last()
        if found is None and self.last_seq:
            raise ConfigError(
                f"producer {self.producer_id!r}: {self.subject!r} in stream {self.stream!r} "
                f"holds replayed copies of dead letters ({REPLAY_OF}, the last at seq "
                f"{self.last_seq}) but no record of this session: its records were removed "
                "(by the stream's max_msgs_per_subject, max_age or a purge of the subject), so "
                "the session cannot tell where it stopped and would publish its input again "
                "from the beginning. Keep the session's records (no max_msgs_per_subject or "
                "max_age limit that copies or time can use up, no purge of the subject "
                "alone), then either restore the last record, or purge the subject "
                "completely (copies too) or use a new producer_id to start over on purpose"
            )
        if found is None:
            self.position = None  # an empty subject
        else:
            seq = found.seq
            raw = found.header(SOURCE_POS_HEADER)
            if raw is None or not raw.lstrip("-").isdigit():
                raise ConfigError(
                    f"the last message on {self.subject!r} (seq {seq}) has no integer "
                    f"{SOURCE_POS_HEADER} header: the subject is not owned by a ProducerSession"
                )
            self.position = int(raw)
        self._started = True
        log.info(
            "producer %s resumes after position %s (its subject ends at stream seq %d)",
            self.producer_id,
            self.position,
            self.last_seq,
        )
        return self.position

    async def publish(
        self, position: int, data: bytes, headers: Mapping[str, str] | None = None
    ) -> PubAck | None:
        """Store the record at ``position`` unless it is already stored.

        Positions must increase. Returns the PubAck, or None when ``position``
        is at or before the resume point (skipped).

        Raises:
            WrongLastSequence: another writer added to this subject (zombie producer),
                or the stream was deleted and re-created (the message says which).
            PublishFailed: no PubAck after every retry.
            ConfigError: ``start()`` not called (again, after any failed publish), or
                ``position`` not an int.
        """
        if not self._started:
            raise ConfigError("call ProducerSession.start() before publish()")
        if isinstance(position, bool) or not isinstance(position, int):
            raise ConfigError(f"position must be an int, got {position!r}")
        if headers:
            check_user_headers(headers)
            _refuse_replay_headers(headers)
        latest = self._buffer[-1][0] if self._buffer else self.position
        if latest is not None and position <= latest:
            self.skipped += 1
            return None
        if self.batch_size > 1:
            self._buffer.append((position, data, headers))
            if len(self._buffer) >= self.batch_size:
                return await self._commit()
            return None
        extra = {SOURCE_POS_HEADER: str(position), PRODUCER_HEADER: self.producer_id}
        if headers:
            extra = {**headers, **extra}
        expected = self.last_seq
        try:
            # An earlier attempt of this very record, stored with its PubAck lost, is
            # recognised by the log (its msg id is the subject's last): a duplicate ack.
            ack = await self._log.append(data, msg_id=self.msg_id(position), headers=extra)
        except BaseException as exc:
            # The stored state is unknown until start() reads the subject again.
            self._started = False
            if isinstance(exc, WrongLastSequence) and self._log.refused_in_flight:
                raise self._held_in_flight(position, exc) from exc
            if isinstance(exc, WrongLastSequence):
                raise await self._changed_behind(
                    exc,
                    self._log.refused_expected or expected,
                    resends=self._log.replayed_resends if self._log.refused_by_copies else 0,
                ) from exc
            raise
        self.position = position
        self.published += 1
        return ack

    async def flush(self) -> PubAck | None:
        """Commit the records buffered for the next atomic batch (batch mode only)."""
        if not self._buffer:
            return None
        return await self._commit()

    async def _commit(self) -> PubAck:
        records, self._buffer = self._buffer, []
        last_position = records[-1][0]
        duplicate = False
        resends = 0
        while True:
            expected = self.last_seq
            try:
                seq = await self._batcher.send(records, expected)
            except BaseException as exc:
                self._started = False
                if not isinstance(exc, JetStreamError) or not (
                    isinstance(exc, WrongLastSequence)
                    or exc.err_code == ErrCode.ATOMIC_DUPLICATE_MESSAGE
                ):
                    raise
                # The server checks the expected sequence before msg ids: a re-send of a
                # batch whose earlier attempt committed (ack lost) is refused too.
                why = await why_refused(self._log, expected, self.msg_id(last_position))
                if why.unchanged and isinstance(exc, WrongLastSequence):
                    # A write to the subject in flight (its leader without quorum), not
                    # another writer's record: the batch is not known stored.
                    raise self._held_in_flight(last_position, exc) from exc
                if why.stored is None and (not why.replayed or resends == REPLAYED_RESENDS):
                    raise await self._changed_behind(
                        exc, expected, resends=resends if why.replayed else 0
                    ) from exc
                self._started = True
                if why.stored is not None:  # last_seq: the subject's end, copies after it
                    seq, duplicate = why.stored.seq, True
                    break
                # Only replayed copies of dead letters followed the expected record: the
                # batch goes after the last of them (last_seq).
                resends += 1
                continue
            self.last_seq = seq
            break
        self.position = last_position
        self.published += len(records)
        return PubAck(self.stream, seq, duplicate, None)

    def _held_in_flight(self, position: int, exc: JetStreamError) -> PublishFailed:
        """The subject still ends where this session expects, but the append was refused
        (one record: for the whole patience of :class:`SubjectLog`): a write to it in
        flight (its leader without quorum), likely this session's own earlier attempt.
        Not another writer's record: the publish failed (``start()`` reads what is
        stored, then publish again)."""
        return PublishFailed(
            f"producer {self.producer_id!r}: position {position} on {self.subject!r} was "
            f"refused while the subject still ended where this session expected "
            f"(err_code {exc.err_code}: a "
            "write to it in flight, its leader without a quorum); it may be stored once the "
            "stream has a quorum again. Call start() again (it reads what is stored) and "
            "publish again",
            msg_id=self.msg_id(position),
        )

    async def _changed_behind(
        self, exc: JetStreamError, expected: int, *, resends: int = 0
    ) -> WrongLastSequence:
        """Why the subject's last message is not the one this session expects.

        The resume point lives in the stream, so the session's only state is where
        its last message is. A stream deleted and re-created under the same name
        (its creation time changed) makes that position meaningless; ``resends`` > 0:
        replayed copies kept arriving after each of that many re-sends (the last one
        expected ``expected``); otherwise another writer, a second producer with the
        same id, added to the subject.
        """
        created = ""
        with contextlib.suppress(OncestreamError):  # the zombie message stays true
            created = str((await self.conn.stream_info(self.stream)).get("created") or "")
        if created and self._created and created != self._created:
            text = (
                f"producer {self.producer_id!r}: stream {self.stream!r} was deleted and "
                f"re-created while this session ran (created {self._created} when the session "
                f"started, {created} now), so what the session stored before is gone with the "
                "old stream; call start() again to resume from what the new stream holds"
            )
        elif resends:
            text = (
                f"producer {self.producer_id!r}: replayed copies of dead letters ({REPLAY_OF}) "
                f"kept arriving on {self.subject!r}: the record was refused after {resends} "
                "re-sends after replayed copies (the last expected the subject's last message "
                f"at seq {expected}, and more copies followed it); nothing of this publish is "
                "stored. Call start() again and publish again, once the replay is over"
            )
        else:
            text = (
                f"producer {self.producer_id!r}: {self.subject!r} changed behind this "
                f"session (expected its last message at seq {expected}): another "
                "producer with the same id is writing; stop one of them"
            )
        return WrongLastSequence(text, code=exc.code, err_code=exc.err_code)

    async def run(
        self, records: Iterable[tuple[int, bytes]] | AsyncIterable[tuple[int, bytes]]
    ) -> int:
        """Publish ``(position, data)`` records in order; return how many were newly stored."""
        before = self.published
        if isinstance(records, AsyncIterable):
            async for position, data in records:
                await self.publish(position, data)
        else:
            for position, data in records:
                await self.publish(position, data)
        await self.flush()
        return self.published - before

    async def close(self) -> None:
        """Commit any buffered batch, then close the session's Publisher (not the connection)."""
        try:
            if self._started:
                await self.flush()
        finally:
            await self._batcher.close()
            await self._publisher.close()

    async def __aenter__(self) -> ProducerSession:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _refuse_replay_headers(headers: Mapping[str, str]) -> None:
    """Refuse ``Oncestream-Replay-*`` on a session's record (checked before anything is sent)."""
    for key in headers:
        if key.lower().startswith(_REPLAY_PREFIX):
            raise ConfigError(
                f"header {key!r} is not accepted on a ProducerSession's record: "
                f"{REPLAY_OF} and the other Oncestream-Replay-* headers mark a dead letter's "
                "copy that 'oncestream dlq replay' republished, and the session reads a "
                "message carrying one as such a copy, never as its own record (a restart "
                "would resume before it and store its positions again); drop it or rename it"
            )
