"""Inspect and replay dead letters exactly once.

A :class:`~oncestream.Processor` with a dead-letter stream moves a message that
failed ``max_deliver`` times there, with headers saying where it came from
(``Oncestream-Stream``, ``-Sequence``, ``-Subject``, ``-Attempts``, ``-Error``).
:func:`replay_dead_letters` republishes selected ones to their original subject
and then deletes them from the dead-letter stream.

Exactly once, across crashes and re-runs: each republish carries the
deterministic ``Nats-Msg-Id`` ``replay:<dead-letter stream>:<seq>`` and an
``Oncestream-Replay-Of`` header. Before the first republish of a dead letter a
marker is stored in the dead-letter stream with the target stream's last
sequence at that moment. A re-run that finds a marker and the dead letter
still present (a crash between republish and delete) looks for the
``Oncestream-Replay-Of`` header in the target after that sequence instead of
trusting the duplicate window, which may have expired. Run one replay of a
dead-letter stream at a time.

Example::

    async with await connect(opts) as conn:
        report = await replay_dead_letters(conn, "ORDERS_DLQ")
        print(report.replayed, report.already_replayed)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from .._connection import Connection, translate_error
from .._errors import ConfigError
from .._headers import MSG_ID
from .._names import subject_matches
from ..read import iter_messages
from ..streams import StoredMessage, delete_message, stream_info
from ._confirmed import publish_confirmed

__all__ = [
    "DeadLetter",
    "ReplayReport",
    "list_dead_letters",
    "replay_dead_letters",
    "subject_matches",
]

log = logging.getLogger("oncestream.deadletters")

MARKER = "Oncestream-Replay-Marker"
MARKER_AFTER = "Oncestream-Replay-After"
REPLAY_OF = "Oncestream-Replay-Of"
_DROP_PREFIX = "oncestream-"


@dataclass(frozen=True, kw_only=True)
class DeadLetter:
    """A dead letter and where it came from.

    Attributes:
        seq, dlq_subject: its sequence and subject in the dead-letter stream.
        stream, sequence, subject: the original stream, sequence and subject.
        consumer: the consumer that gave up; attempts: how often it tried.
        error: the handler's last error (one line).
        msg_id: the original ``Nats-Msg-Id``, if it had one.
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

    @classmethod
    def from_message(cls, msg: StoredMessage) -> DeadLetter:
        """Read the ``Oncestream-*`` headers the Processor wrote."""
        return cls(
            dlq_stream=msg.stream,
            dlq_subject=msg.subject,
            seq=msg.seq,
            time=msg.time,
            stream=msg.header("Oncestream-Stream") or "",
            sequence=int(msg.header("Oncestream-Sequence") or 0),
            subject=msg.header("Oncestream-Subject") or "",
            consumer=msg.header("Oncestream-Consumer") or "",
            attempts=int(msg.header("Oncestream-Attempts") or 0),
            error=msg.header("Oncestream-Error") or "",
            msg_id=msg.header("Oncestream-Msg-Id"),
            headers=msg.headers,
            data=msg.data,
        )

    @property
    def replay_id(self) -> str:
        """The deterministic ``Nats-Msg-Id`` of this dead letter's republish."""
        return f"replay:{self.dlq_stream}:{self.seq}"

    @property
    def replay_of(self) -> str:
        return f"{self.dlq_stream}:{self.seq}"

    def replay_headers(self) -> dict[str, str]:
        """The original headers (first values) plus the replay id and origin."""
        headers = {
            k: v[0]
            for k, v in self.headers.items()
            if v and not k.lower().startswith(_DROP_PREFIX) and k != MSG_ID
        }
        if self.msg_id:
            headers["Oncestream-Msg-Id"] = self.msg_id
        headers[REPLAY_OF] = self.replay_of
        headers[MSG_ID] = self.replay_id
        return headers


@dataclass
class ReplayReport:
    """What :func:`replay_dead_letters` did, by dead-letter sequence."""

    replayed: list[int] = field(default_factory=list)
    already_replayed: list[int] = field(default_factory=list)
    selected: int = 0


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
) -> list[DeadLetter]:
    """The dead letters in ``dlq_stream`` (sequences ``first..last``, original ``subject``
    pattern, ``error`` substring), oldest first.

    Raises:
        StreamNotFound: naming ``dlq_stream``.
    """
    await stream_info(conn, dlq_stream)
    letters, _ = await _scan(conn, dlq_stream, first or 1, last)
    return _select(letters, first=first, last=last, subject=subject, error=error)


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


async def _already_in_target(conn: Connection, letter: DeadLetter, after: int) -> bool:
    async for msg in iter_messages(
        conn, letter.stream, start_seq=after + 1, subject=letter.subject
    ):
        if msg.header(REPLAY_OF) == letter.replay_of:
            return True
    return False


async def replay_dead_letters(
    conn: Connection,
    dlq_stream: str,
    *,
    first: int | None = None,
    last: int | None = None,
    subject: str | None = None,
    error: str | None = None,
) -> ReplayReport:
    """Republish the selected dead letters to their original subjects, exactly once, and
    delete each from ``dlq_stream`` once its republish is acknowledged.

    Raises:
        StreamNotFound: naming the dead-letter or the original stream.
        ConfigError: a message in the selection is not a dead letter written by oncestream.
        PublishFailed / JetStreamError: a republish failed (what was done so far stays
            done; a re-run continues without duplicates).
    """
    await stream_info(conn, dlq_stream)
    letters, markers = await _scan(conn, dlq_stream)
    present = {letter.seq for letter in letters}
    for seq, stale in list(markers.items()):
        if seq not in present:  # replayed and deleted; only the marker's delete was lost
            await delete_message(conn, dlq_stream, stale.seq)
            del markers[seq]
    chosen = _select(letters, first=first, last=last, subject=subject, error=error)
    report = ReplayReport(selected=len(chosen))
    for letter in chosen:
        if not letter.stream or not letter.subject:
            raise ConfigError(
                f"{dlq_stream} seq {letter.seq} has no Oncestream-Stream/-Subject headers"
            )
        marker = markers.get(letter.seq)
        if marker is not None and await _already_in_target(conn, letter, marker.after):
            report.already_replayed.append(letter.seq)
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
                    },
                )
                marker = _Marker(int(str(ack.get("seq", 0))), after)
            await _publish(conn, letter.subject, letter.data, letter.replay_headers())
            report.replayed.append(letter.seq)
        await delete_message(conn, dlq_stream, letter.seq)
        await delete_message(conn, dlq_stream, marker.seq)
        log.info("replayed %s seq %d to %s", dlq_stream, letter.seq, letter.subject)
    return report
