"""Inspect and replay dead letters exactly once.

A :class:`~oncestream.Processor` with a dead-letter stream moves a message that
failed ``max_deliver`` times there, with headers saying where it came from
(``Oncestream-Stream``, ``-Sequence``, ``-Subject``, ``-Consumer``, ``-Attempts``,
``-Error``): one letter per consumer that gave up on the message.
:func:`replay_dead_letters` republishes selected ones to their original subject
(the subject it was published on: a partitioned stream stores it under
``<partition>.<subject>``, which the letter records) and then deletes them from
the dead-letter stream.

The copy names the consumer whose letter it is (``Oncestream-Replay-For``,
``-Replay-Stream``, ``-Replay-Sequence``, :mod:`oncestream.process._replayed`):
that consumer applies it once, every other consumer of the stream acks it
without applying it. A letter written before letters were per consumer
(``Nats-Msg-Id`` ``dlq:<stream>:<seq>``) is replayed without them: every consumer
applies its copy, as then. A consumer's letter is replayed only when that consumer
exists on its stream and takes the subject the copy is stored under (one
``CONSUMER.LIST`` per stream); otherwise no one would apply the copy, and the letter
is kept (:attr:`ReplayReport.kept`): publish the message again if it must still be
applied.

Exactly once, across crashes and re-runs: each republish carries the
deterministic ``Nats-Msg-Id`` ``replay:<dead-letter stream>:<seq>`` and an
``Oncestream-Replay-Of`` header. Before the first republish of a dead letter a
marker is stored in the dead-letter stream with the target stream's last
sequence at that moment. A re-run that finds a marker and the dead letter
still present (a crash between republish and delete) looks for the
``Oncestream-Replay-Of`` header in the target after that sequence instead of
trusting the duplicate window, which may have expired. Run one replay of a
dead-letter stream at a time.

A consumer's letter is not republished while a copy of its message for that
consumer is still to come: one stored after the message whose failure wrote the
letter (the sequence in the letter's ``Nats-Msg-Id``, the original's or a copy's
that failed in turn) and above the consumer's ack floor (the same
``Oncestream-Replay-For``, ``-Replay-Stream``, ``-Replay-Sequence`` and
``-Replay-Stream-Created``), or a scheduled replay of it not yet fired. Such a
second letter of a message (an earlier release dead-lettered a message again
after a consumer moved back past it) is deleted and reported as
:attr:`ReplayReport.already_replayed`. A copy at or below the ack floor may have
been applied or skipped, so the letter is replayed then (the copies share a
ledger key: applied once), as is a letter whose msg id names no life. The target
stream's messages on the copy's subject are read once per stream, subject and
replay, from the oldest such failure on.

Each republish carries ``Nats-Expected-Stream: <original stream>``: when the
subject moved to another stream since the message died, the replay is refused
(:class:`~oncestream.StreamMismatch`, naming the subject and both streams)
instead of storing it in a stream that never had it.

Scheduled replay (``at=``, nats-server 2.12+ message schedules): instead of the
republish, a schedule message is stored in the original stream on
``oncestream.schedule.<stream>.<dead-letter stream>.<seq>`` with
``Nats-Schedule: @at <time>`` and ``Nats-Schedule-Target: <original subject>``;
the server publishes the dead letter at that time, even if no client runs
then. The stream must allow message schedules and capture
``oncestream.schedule.<stream>.>``. The dead letter is deleted once the schedule
is stored (the same marker protocol covers a crash in between; a pending
schedule counts as replayed). The server copies the schedule's headers to the
message it publishes except ``Nats-Msg-Id``, ``Nats-Expected-*``, ``Nats-TTL``
and ``Nats-Rollup``, and adds ``Nats-Scheduler`` (the schedule subject) and
``Nats-Schedule-Next: purge``: the published message carries
``Oncestream-Replay-Of`` (and ``Oncestream-Msg-Id``) but not the replay's
``Nats-Msg-Id``. It is published once (the schedule is purged as it fires); a
consumer of the stream that does not filter out ``oncestream.schedule.>`` also
receives the schedule message itself.

Example::

    async with await connect(opts) as conn:
        report = await replay_dead_letters(conn, "ORDERS_DLQ")
        print(report.replayed, report.already_replayed)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime

from .._connection import Connection, translate_error
from .._errors import ConfigError, ConsumerNotFound, ErrCode, StreamMismatch, StreamNotFound
from .._headers import EXPECTED_STREAM, MSG_ID, SCHEDULE, SCHEDULE_TARGET, writable_headers
from .._names import check_consumer_name, check_stream_name, subject_matches
from .._options import parse_time
from ..publish._internal import REPLAY_OF
from ..read import iter_messages
from ..read._internal import LEADER_PATIENCE, led_stream_info
from ..streams import (
    Partitioning,
    StoredMessage,
    consumer_info,
    delete_message,
    last_message,
    list_consumers,
    require_server,
    stream_info,
)
from ._confirmed import publish_confirmed
from ._replayed import (
    REPLAY_CREATED,
    REPLAY_FOR,
    REPLAY_SEQUENCE,
    REPLAY_STREAM,
    STREAM_CREATED,
    ReplayTarget,
    is_consumer_letter,
    replay_target,
)
from ._setup import consumer_filters

__all__ = [
    "DeadLetter",
    "ReplayReport",
    "list_dead_letters",
    "replay_dead_letters",
    "subject_matches",
]

log = logging.getLogger(__name__)

MARKER = "Oncestream-Replay-Marker"
MARKER_AFTER = "Oncestream-Replay-After"
_DROP_PREFIX = "oncestream-"

#: Schedule messages of a scheduled replay live on ``<this>.<stream>.<dlq>.<seq>``.
SCHEDULE_PREFIX = "oncestream.schedule"
#: The first nats-server release with message schedules (``allow_msg_schedules``).
SCHEDULES_SINCE = (2, 12)


@dataclass(frozen=True, kw_only=True)
class DeadLetter:
    """A dead letter and where it came from.

    Attributes:
        seq, dlq_subject: its sequence and subject in the dead-letter stream.
        stream, sequence, subject: the original stream, sequence and subject.
        consumer: the consumer that gave up; attempts: how often it tried.
        error: the handler's last error (one line).
        msg_id: the original ``Nats-Msg-Id``, if it had one.
        per_consumer: the letter is ``consumer``'s own (its ``Nats-Msg-Id`` names the
            consumer): its replay is applied by that consumer only. False for a letter
            written before letters were per consumer: every consumer applies its replay.
        stream_created: the creation time of the stream the message was in (its life:
            a stream deleted and created again numbers other messages from 1), or None
            (a letter written before letters named it, or by a Processor that could
            not read it).
    """

    dlq_stream: str
    dlq_subject: str
    seq: int
    time: datetime
    stream: str
    sequence: int
    subject: str
    consumer: str
    attempts: int
    error: str
    msg_id: str | None
    headers: dict[str, list[str]]
    data: bytes
    per_consumer: bool = False
    stream_created: str | None = None

    @classmethod
    def from_message(cls, msg: StoredMessage) -> DeadLetter:
        """Read the ``Oncestream-*`` headers the Processor wrote."""
        stream = msg.header("Oncestream-Stream") or ""
        sequence = int(msg.header("Oncestream-Sequence") or 0)
        consumer = msg.header("Oncestream-Consumer") or ""
        own = sequence > 0 and is_consumer_letter(msg.header(MSG_ID), stream, consumer)
        return cls(
            dlq_stream=msg.stream,
            dlq_subject=msg.subject,
            seq=msg.seq,
            time=msg.time,
            stream=stream,
            sequence=sequence,
            subject=msg.header("Oncestream-Subject") or "",
            consumer=consumer,
            attempts=int(msg.header("Oncestream-Attempts") or 0),
            error=msg.header("Oncestream-Error") or "",
            msg_id=msg.header("Oncestream-Msg-Id"),
            headers=msg.headers,
            data=msg.data,
            per_consumer=own,
            stream_created=msg.header(STREAM_CREATED) or None,
        )

    @property
    def replay_id(self) -> str:
        """The deterministic ``Nats-Msg-Id`` of this dead letter's republish."""
        return f"replay:{self.dlq_stream}:{self.seq}"

    @property
    def replay_of(self) -> str:
        return f"{self.dlq_stream}:{self.seq}"

    @property
    def schedule_subject(self) -> str:
        """Where a scheduled replay of this dead letter stores its schedule message."""
        return f"{SCHEDULE_PREFIX}.{self.stream}.{self.dlq_stream}.{self.seq}"

    def replay_headers(self) -> dict[str, str]:
        """The original headers (first values) plus the replay id and origin, and for a
        consumer's own letter the consumer, stream, sequence and stream life the copy is
        for.

        Headers the server stamped on the dead letter or its original (``Nats-Stream-Source``,
        ``Nats-Scheduler``...) are not sent (``_headers.writable_headers``).
        """
        headers = {
            k: v[0]
            for k, v in writable_headers(self.headers).items()
            if v and not k.lower().startswith(_DROP_PREFIX) and k != MSG_ID
        }
        if self.msg_id:
            headers["Oncestream-Msg-Id"] = self.msg_id
        headers[REPLAY_OF] = self.replay_of
        if self.per_consumer:
            headers[REPLAY_FOR] = self.consumer
            headers[REPLAY_STREAM] = self.stream
            headers[REPLAY_SEQUENCE] = str(self.sequence)
            if self.stream_created:
                headers[REPLAY_CREATED] = self.stream_created
        headers[MSG_ID] = self.replay_id
        return headers


def letter_identity(letter: DeadLetter) -> ReplayTarget | None:
    """What a copy of ``letter`` is for (None: a letter written before letters were per
    consumer, which every consumer applies)."""
    if not letter.per_consumer:
        return None
    return ReplayTarget(
        letter.stream, letter.consumer, letter.sequence, letter.stream_created or ""
    )


def failed_at(letter: DeadLetter) -> tuple[int, str] | None:
    """The stored message whose failure wrote ``letter``, as its ``Nats-Msg-Id``
    (``dlq:<stream>:<consumer>:<seq>:<life>``) names it: its sequence (the original's, or
    that of a replayed copy that failed in turn) and the stream's life then (the digits
    of its creation time). None: the msg id names no life (the Processor could not read
    it), so no later copy can be told apart from an earlier life's."""
    prefix = f"dlq:{letter.stream}:{letter.consumer}:"
    own = (letter.headers.get(MSG_ID) or [""])[0]
    parts = own[len(prefix) :].split(":") if own.startswith(prefix) else []
    if len(parts) != 2 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return int(parts[0]), parts[1]


@dataclass
class ReplayReport:
    """What :func:`replay_dead_letters` did, by dead-letter sequence.

    Attributes:
        replayed: republished (or scheduled) and deleted.
        already_replayed: found republished by an earlier run that stopped before
            deleting them, or letters of a message whose earlier letter for the same
            consumer was replayed (its copy is in the target stream); deleted.
        deleted_by_another: deleted by another replay of the dead-letter stream running
            at the same time (done: replayed once, by whichever run).
        kept: not replayed, kept in the dead-letter stream: why, and what to do (the
            consumer the copy would be for no longer exists or no longer takes its
            subject, so no one would apply it).
        selected: how many letters were selected.
        scheduled_at: the time the server publishes them (a scheduled replay), or None.
    """

    replayed: list[int] = field(default_factory=list)
    already_replayed: list[int] = field(default_factory=list)
    selected: int = 0
    scheduled_at: datetime | None = None
    deleted_by_another: list[int] = field(default_factory=list)
    kept: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Marker:
    seq: int
    after: int


async def _scan(
    conn: Connection, dlq_stream: str, start_seq: int = 1, end_seq: int | None = None
) -> tuple[list[DeadLetter], dict[int, _Marker]]:
    letters: list[DeadLetter] = []
    markers: dict[int, _Marker] = {}
    async for msg in iter_messages(conn, dlq_stream, start_seq=start_seq, end_seq=end_seq):
        marker = msg.header(MARKER)
        if marker is not None:
            markers[int(marker)] = _Marker(msg.seq, int(msg.header(MARKER_AFTER) or 0))
        elif msg.header("Oncestream-Stream") is not None:
            letters.append(DeadLetter.from_message(msg))
    return letters, markers


def _select(
    letters: list[DeadLetter],
    *,
    first: int | None,
    last: int | None,
    subject: str | None,
    error: str | None,
    consumer: str | None = None,
) -> list[DeadLetter]:
    chosen = []
    for letter in letters:
        if first is not None and letter.seq < first:
            continue
        if last is not None and letter.seq > last:
            continue
        if subject and not subject_matches(subject, letter.subject):
            continue
        if error and error.lower() not in letter.error.lower():
            continue
        if consumer and letter.consumer != consumer:
            continue
        chosen.append(letter)
    return chosen


async def list_dead_letters(
    conn: Connection,
    dlq_stream: str,
    *,
    first: int | None = None,
    last: int | None = None,
    subject: str | None = None,
    error: str | None = None,
    consumer: str | None = None,
) -> list[DeadLetter]:
    """The dead letters in ``dlq_stream`` (sequences ``first..last``, original ``subject``
    pattern, ``error`` substring, written by ``consumer``), oldest first.

    ``subject`` matches the subject a letter records: the stored one, which on a
    partitioned stream is ``<partition>.<published subject>``.

    Raises:
        StreamNotFound: naming ``dlq_stream``.
        ConfigError: ``dlq_stream`` or ``consumer`` is not a valid name (``consumer``
            is one consumer's name: no wildcards, not empty).
    """
    _check_names(dlq_stream, consumer)
    await led_stream_info(conn, dlq_stream, LEADER_PATIENCE)
    letters, _ = await _scan(conn, dlq_stream, first or 1, last)
    return _select(letters, first=first, last=last, subject=subject, error=error, consumer=consumer)


async def unknown_consumer(conn: Connection, dlq_stream: str, consumer: str) -> str | None:
    """Why ``consumer`` selects nothing in ``dlq_stream`` because it names no consumer
    (a warning naming it and the consumers the letters name), or None: a letter names
    it, a stream its letters came from has a consumer of that name, or there are no
    letters (nothing to tell it by).
    """
    letters, _ = await _scan(conn, dlq_stream)
    if not letters or any(letter.consumer == consumer for letter in letters):
        return None
    streams = sorted({letter.stream for letter in letters if letter.stream})
    consumers = _Consumers(conn)
    for stream in streams:
        try:
            if consumer in await consumers.of(stream):
                return None
        except StreamNotFound:
            continue
    named = sorted({letter.consumer for letter in letters if letter.consumer})
    return (
        f"no consumer {consumer!r}: no letter in {dlq_stream} names it and the streams its "
        f"letters came from ({', '.join(streams) or 'none'}) have no consumer of that name; "
        f"the letters name {', '.join(named) or 'no consumer'}"
    )


def _check_names(dlq_stream: str, consumer: str | None) -> None:
    """Refuse a bad dead-letter stream or consumer name before anything is asked.

    Raises:
        ConfigError: naming the value and the rule.
    """
    check_stream_name(dlq_stream, "dead-letter stream")
    if consumer is not None:
        check_consumer_name(consumer, "consumer")


async def _publish(
    conn: Connection, subject: str, data: bytes, headers: dict[str, str], attempts: int = 5
) -> dict[str, object]:
    """Publish and wait for the PubAck, retrying with the same headers (same msg id)."""

    def failure(last: Exception | None) -> str:
        assert last is not None
        return (
            f"publish of {headers.get(MSG_ID)} to {subject!r} not confirmed after "
            f"{attempts} attempts: {translate_error(last, what=subject)}"
        )

    return await publish_confirmed(
        conn,
        subject,
        data,
        headers,
        what="replay publish",
        failure=failure,
        log=log,
        attempts=attempts,
    )


@dataclass(frozen=True)
class _Target:
    """Where a dead letter is republished: the subject it was published on, and the
    subject its copy is stored under (they differ on a partitioned stream)."""

    subject: str
    stored: str

    @classmethod
    def of(cls, letter: DeadLetter, layout: Partitioning | None) -> _Target:
        if layout is None:
            return cls(letter.subject, letter.subject)
        published = layout.published_subject(letter.subject)
        return cls(published, layout.stored_subject(published))


async def _layout(conn: Connection, stream: str) -> Partitioning | None:
    """The partitioning of ``stream`` (None: not partitioned, or gone: the check says so)."""
    try:
        config = (await stream_info(conn, stream)).get("config", {})
    except StreamNotFound:
        return None
    return Partitioning.from_config(config)


async def _already_in_target(
    conn: Connection, letter: DeadLetter, after: int, target: _Target | None = None
) -> bool:
    stored = target.stored if target is not None else letter.subject
    pending = await last_message(conn, letter.stream, letter.schedule_subject)
    if (
        pending is not None
        and pending.seq > after
        and pending.header(REPLAY_OF) == letter.replay_of
    ):
        return True  # a scheduled replay whose schedule has not fired yet
    async for msg in iter_messages(conn, letter.stream, start_seq=after + 1, subject=stored):
        if msg.header(REPLAY_OF) == letter.replay_of:
            return True
    return False


class _Copies:
    """The replayed copies in the target streams that their consumers are still to receive.

    Read once per stream and stored subject, from the oldest message a selected letter
    failed at; the consumers' ack floors once per replay.
    """

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._wanted: dict[tuple[str, str], list[DeadLetter]] = {}
        #: (stream, stored subject) -> what a copy is for -> the last copy's sequence
        self._held: dict[tuple[str, str], dict[ReplayTarget, int]] = {}
        #: stream -> what a schedule not yet fired is for (its copy comes at the end)
        self._scheduled: dict[str, set[ReplayTarget]] = {}
        self._floors: dict[tuple[str, str], int] = {}

    def want(self, letter: DeadLetter, target: _Target) -> None:
        """Note that ``letter``'s copy would go to ``target`` (before the first read)."""
        identity = letter_identity(letter)
        if identity is not None and identity.created and failed_at(letter):
            self._wanted.setdefault((letter.stream, target.stored), []).append(letter)

    async def holds(self, letter: DeadLetter, target: _Target) -> bool:
        """Whether ``letter``'s consumer is still to receive a copy of its message.

        That is a copy stored after the message whose failure wrote the letter and above
        the consumer's ack floor, or a scheduled replay not yet fired. False when it cannot
        be told (the letter names no life) or the copy may be past (at or below the ack
        floor: applied, or skipped by a reset forward): the letter is then replayed.
        """
        identity, failed = letter_identity(letter), failed_at(letter)
        if identity is None or not identity.created or failed is None:
            return False
        key = (letter.stream, target.stored)
        if key not in self._held:
            self._held[key] = await self._read(letter.stream, target.stored, self._wanted[key])
        if identity in self._scheduled.get(letter.stream, ()):
            return True
        last = self._held[key].get(identity, 0)
        # Sequences, not the stream's life: nats-server has rewritten a stream's creation
        # time without re-creating it (nats-io/nats-server#8449, #8470). Of a stream that
        # was created again this may replay a letter whose copy is there: applied once.
        return last > failed[0] and last > await self._floor(letter.stream, letter.consumer)

    def add(self, letter: DeadLetter, target: _Target, seq: int) -> None:
        """Record the copy this replay just stored at ``seq`` (a second letter of the same
        message in this selection is then not republished)."""
        key = (letter.stream, target.stored)
        identity = letter_identity(letter)
        if identity is not None and key in self._held:
            held = self._held[key]
            held[identity] = max(held.get(identity, 0), seq)

    async def _floor(self, stream: str, consumer: str) -> int:
        if (stream, consumer) not in self._floors:
            try:
                info = await consumer_info(self.conn, stream, consumer)
            except ConsumerNotFound:  # no one receives the copy: replay (or keep) the letter
                info = {"ack_floor": {"stream_seq": 1 << 62}}
            floor = info.get("ack_floor") or {}
            self._floors[(stream, consumer)] = int(floor.get("stream_seq") or 0)
        return self._floors[(stream, consumer)]

    async def _read(
        self, stream: str, stored: str, letters: list[DeadLetter]
    ) -> dict[ReplayTarget, int]:
        failed = [f[0] for f in map(failed_at, letters) if f is not None]
        held: dict[ReplayTarget, int] = {}
        start = min(failed) + 1 if failed else 1
        async for msg in iter_messages(self.conn, stream, start_seq=start, subject=stored):
            found = replay_target(msg.raw_headers)
            if found is not None:
                held[found] = max(held.get(found, 0), msg.seq)
        if stream not in self._scheduled:
            self._scheduled[stream] = set()
            config = (await stream_info(self.conn, stream)).get("config", {})
            if config.get("allow_msg_schedules"):
                pattern = f"{SCHEDULE_PREFIX}.{stream}.>"
                async for msg in iter_messages(self.conn, stream, subject=pattern):
                    found = replay_target(msg.raw_headers)
                    if found is not None:
                        self._scheduled[stream].add(found)
        return held


async def _holders(conn: Connection, subject: str) -> list[str]:
    reply = await conn.api("STREAM.NAMES", {"subject": subject})
    return [str(name) for name in reply.get("streams") or ()]


def _moved(letter: DeadLetter, holders: list[str], subject: str) -> str:
    now = (
        f"stream {', '.join(repr(h) for h in holders)} holds it now"
        if holders
        else "no stream captures it now"
    )
    return (
        f"cannot replay {letter.dlq_stream} seq {letter.seq}: subject {subject!r} "
        f"is not in its original stream {letter.stream!r} any more ({now}); nothing was "
        f"replayed there (Nats-Expected-Stream: {letter.stream})"
    )


async def _check_target(conn: Connection, letter: DeadLetter, subject: str) -> None:
    """Refuse a dead letter whose ``subject`` (where it is republished) moved to another
    stream (or whose stream is gone)."""
    holders = await _holders(conn, subject)
    if letter.stream not in holders:
        raise StreamMismatch(
            _moved(letter, holders, subject), code=400, err_code=ErrCode.STREAM_NOT_MATCH
        )


def _takes(filters: tuple[str, ...], subject: str) -> bool:
    """Whether a consumer with ``filters`` (none: every subject) takes ``subject``."""
    return not filters or any(subject_matches(f, subject) for f in filters)


class _Consumers:
    """The consumers of each stream, read once per replay (``CONSUMER.LIST``)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._filters: dict[str, dict[str, tuple[str, ...]]] = {}

    async def of(self, stream: str) -> dict[str, tuple[str, ...]]:
        """Consumer name -> its filter subjects (empty: every subject) on ``stream``."""
        if stream not in self._filters:
            infos = await list_consumers(self.conn, stream)
            self._filters[stream] = {
                str(info.get("name")): consumer_filters(info.get("config") or {}) for info in infos
            }
        return self._filters[stream]

    async def refusal(self, letter: DeadLetter, stored: str) -> str | None:
        """Why no one would apply ``letter``'s copy (stored under ``stored``), or None:
        its consumer exists on the letter's stream and takes it."""
        consumer = letter.consumer
        consumers = await self.of(letter.stream)
        filters = consumers.get(consumer)
        if filters is not None and _takes(filters, stored):
            return None
        takers = sorted(name for name, its in consumers.items() if _takes(its, stored))
        why = (
            f"consumer {letter.stream}/{consumer} does not exist"
            if filters is None
            else f"consumer {letter.stream}/{consumer} does not take {stored!r} any more "
            f"(its filters: {' '.join(filters)})"
        )
        now = (
            f"consumers of {letter.stream} that take it now: {', '.join(takers)}, which may "
            "already have applied the original"
            if takers
            else f"no consumer of {letter.stream} takes it now"
        )
        return (
            f"{letter.dlq_stream} seq {letter.seq} (the letter of {letter.stream} seq "
            f"{letter.sequence} of consumer {letter.consumer}) was kept: {why}, and its copy "
            f"would be applied by no one ({now}). If the message must still be applied, "
            "publish the message again"
        )


async def _check_schedules(conn: Connection, letter: DeadLetter) -> None:
    """Refuse a scheduled replay the server or the original stream cannot do."""
    require_server(conn, SCHEDULES_SINCE, "scheduled replay (message schedules)")
    config = (await stream_info(conn, letter.stream)).get("config", {})
    subjects = [str(x) for x in config.get("subjects") or ()]
    wanted = f"{SCHEDULE_PREFIX}.{letter.stream}.>"
    enable = (
        f"`oncestream stream edit {letter.stream} --allow-msg-schedules --subjects "
        f"'{','.join([*subjects, wanted])}'`"
    )
    if not config.get("allow_msg_schedules"):
        raise ConfigError(
            f"stream {letter.stream!r} does not allow message schedules "
            f"(allow_msg_schedules), which a scheduled replay needs; enable them with {enable} "
            "(they cannot be turned off again), or replay now without --at/--in"
        )
    if not any(subject_matches(pattern, letter.schedule_subject) for pattern in subjects):
        raise ConfigError(
            f"stream {letter.stream!r} does not capture {wanted!r}, where a scheduled replay "
            f"stores its schedules; add it with {enable}"
        )


async def _republish(
    conn: Connection,
    letter: DeadLetter,
    at: datetime | None,
    target: _Target | None = None,
) -> dict[str, object]:
    headers = {**letter.replay_headers(), EXPECTED_STREAM: letter.stream}
    subject = target.subject if target is not None else letter.subject
    if at is not None:
        headers[SCHEDULE] = f"@at {at.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"
        headers[SCHEDULE_TARGET] = subject
        subject = letter.schedule_subject
    try:
        return await _publish(conn, subject, letter.data, headers)
    except StreamMismatch as exc:  # the subject moved after the check
        holders = await _holders(conn, subject)
        moved = _moved(letter, holders, subject)
        raise StreamMismatch(moved, code=exc.code, err_code=exc.err_code) from exc


async def replay_dead_letters(
    conn: Connection,
    dlq_stream: str,
    *,
    first: int | None = None,
    last: int | None = None,
    subject: str | None = None,
    error: str | None = None,
    consumer: str | None = None,
    at: datetime | None = None,
) -> ReplayReport:
    """Republish the selected dead letters to their original subjects, exactly once, and
    delete each from ``dlq_stream`` once its republish is acknowledged.

    Each copy is applied by the consumer whose letter it is, once (see the module
    docs); select one consumer's letters with ``consumer``. A letter whose consumer
    no longer exists on its stream, or no longer takes the letter's subject (its
    filter changed, or the stream was partitioned anew), is kept and reported in
    :attr:`ReplayReport.kept`: its copy would be applied by no one. Publish the message
    again if it must still be applied.

    Args:
        at: schedule the republish for this time on the server (nats-server 2.12+
            message schedules; see the module docs) instead of publishing now: an
            aware datetime (a naive one is refused, as every time without a zone).

    Raises:
        StreamNotFound: naming the dead-letter stream.
        StreamMismatch: a dead letter's subject is not in its original stream any more
            (moved to another stream, or the stream is gone); the message names the
            subject and the streams. Nothing is replayed to another stream.
        ConfigError: ``dlq_stream`` or ``consumer`` is not a valid name; a message in
            the selection
            is not a dead letter written by oncestream; with ``at``: the server or the
            stream cannot schedule (the message says how to enable it), or ``at`` has
            no time zone.
        PublishFailed / JetStreamError: a republish failed (what was done so far stays
            done; a re-run continues without duplicates).
    """
    _check_names(dlq_stream, consumer)
    if at is not None:
        at = parse_time("at", at, ago=False)
    await led_stream_info(conn, dlq_stream, LEADER_PATIENCE)
    letters, markers = await _scan(conn, dlq_stream)
    present = {letter.seq for letter in letters}
    for seq, stale in list(markers.items()):
        if seq not in present:  # replayed and deleted; only the marker's delete was lost
            await delete_message(conn, dlq_stream, stale.seq)
            del markers[seq]
    chosen = _select(
        letters, first=first, last=last, subject=subject, error=error, consumer=consumer
    )
    report = ReplayReport(selected=len(chosen), scheduled_at=at)
    checked: set[tuple[str, str]] = set()
    layouts: dict[str, Partitioning | None] = {}
    targets: dict[int, _Target] = {}
    consumers = _Consumers(conn)
    copies = _Copies(conn)
    for letter in chosen:  # every check before the first replay
        if not letter.stream or not letter.subject:
            raise ConfigError(
                f"{dlq_stream} seq {letter.seq} has no Oncestream-Stream/-Subject headers"
            )
        if letter.stream not in layouts:
            layouts[letter.stream] = await _layout(conn, letter.stream)
        target = targets[letter.seq] = _Target.of(letter, layouts[letter.stream])
        copies.want(letter, target)
        if (letter.stream, target.subject) not in checked:
            await _check_target(conn, letter, target.subject)
            if at is not None:
                await _check_schedules(conn, letter)
            checked.add((letter.stream, target.subject))
        if letter.per_consumer:
            why = await consumers.refusal(letter, target.stored)
            if why is not None:
                report.kept[letter.seq] = why  # the caller reports it (CLI: exit 1)
                log.debug("%s", why)
    for letter in chosen:
        if letter.seq in report.kept:
            continue
        marker = markers.get(letter.seq)
        target = targets[letter.seq]
        if await copies.holds(letter, target) or (
            marker is not None and await _already_in_target(conn, letter, marker.after, target)
        ):
            done = report.already_replayed
        else:
            if marker is None:
                info = await stream_info(conn, letter.stream)
                after = int(info.get("state", {}).get("last_seq", 0))
                ack = await _publish(
                    conn,
                    letter.dlq_subject,
                    b"",
                    {
                        MARKER: str(letter.seq),
                        MARKER_AFTER: str(after),
                        MSG_ID: f"replay-marker:{dlq_stream}:{letter.seq}",
                        EXPECTED_STREAM: dlq_stream,
                    },
                )
                marker = _Marker(int(str(ack.get("seq", 0))), after)
            ack = await _republish(conn, letter, at, target)
            copies.add(letter, target, int(str(ack.get("seq", 0))))
            done = report.replayed
        if not await delete_message(conn, dlq_stream, letter.seq):
            # Another replay of this stream ran at the same time and deleted it after
            # republishing it: the copies carry the same msg id, so it is replayed once.
            done = report.deleted_by_another
            log.warning(
                "%s seq %d was deleted by another replay running at the same time (it "
                "replayed it); run one replay of a dead-letter stream at a time",
                dlq_stream, letter.seq,
            )  # fmt: skip
        done.append(letter.seq)
        if marker is not None:
            await delete_message(conn, dlq_stream, marker.seq)
        when = f" scheduled for {at.isoformat()}" if at is not None else ""
        log.info("replayed %s seq %d to %s%s", dlq_stream, letter.seq, target.subject, when)
    return report
