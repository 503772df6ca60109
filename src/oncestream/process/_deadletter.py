"""Dead letters: a message that failed ``max_deliver`` times goes to a dead-letter stream."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .._connection import Connection, translate_error
from .._errors import OncestreamError
from .._headers import EXPECTED_STREAM, MSG_ID, MSG_TTL, ROLLUP, writable_headers
from .._message import Message
from ._confirmed import publish_confirmed
from ._replayed import REPLAY_PREFIX, STREAM_CREATED, letter_msg_id, replay_target

__all__ = ["Stored", "dead_letter_headers", "publish_dead_letter"]

log = logging.getLogger(__name__)

ORIGINAL_ID = "Oncestream-Msg-Id"
#: Headers of the original message that must not be replayed on the DLQ publish (the
#: write-time checks Nats-Expected-*/Nats-Batch-* are not in ``Message.headers`` at all),
#: and the letter's own, which a replayed copy that failed again carries from its letter.
_DROP = frozenset(
    name.lower()
    for name in (
        MSG_ID, MSG_TTL, ROLLUP, ORIGINAL_ID, STREAM_CREATED, "Oncestream-Stream",
        "Oncestream-Consumer", "Oncestream-Sequence", "Oncestream-Subject",
        "Oncestream-Attempts", "Oncestream-Error",
    )
)  # fmt: skip
_REPLAY_OF = "Oncestream-Replay-Of"


def dead_letter_headers(
    msg: Message,
    *,
    stream: str,
    consumer: str,
    seq: int,
    attempts: int,
    error: str,
    created: str = "",
) -> dict[str, str]:
    """The headers of a dead letter: the original ones plus where and why it failed.

    ``created`` is the stream's creation time (its life; "" when unknown). A replayed
    copy for ``consumer`` that failed again is recorded as the message it replays
    (its stream, sequence, life and msg id, from the copy's ``Oncestream-Replay-*``
    headers), so its replay is claimed under the first copy's ledger key; its msg id
    names the copy (``seq``), which differs from the first letter's.

    Headers the server stamped on the original (``Nats-Stream-Source`` on a message of a
    sourced stream...) are not sent: the server refuses them (``_headers.writable_headers``).
    """
    own = msg.headers or {}
    headers = {
        k: v
        for k, v in writable_headers(own).items()
        if k.lower() not in _DROP and not k.startswith(REPLAY_PREFIX)
    }
    target = replay_target(msg.raw_headers)
    # A replayed copy's own msg id is the replay's (replay:<dlq>:<seq>); the original's
    # is its Oncestream-Msg-Id.
    original_id = own.get(ORIGINAL_ID) if _REPLAY_OF in own else msg.msg_id
    origin = (stream, seq, created)
    if target is not None and target[:2] == (stream, consumer):
        origin = (target.stream, target.seq, target.created)
    if original_id:
        headers[ORIGINAL_ID] = original_id
    headers.update(
        {
            "Oncestream-Stream": origin[0],
            "Oncestream-Consumer": consumer,
            "Oncestream-Sequence": str(origin[1]),
            "Oncestream-Subject": msg.subject,
            "Oncestream-Attempts": str(attempts),
            # One line, bounded: headers are not a place for a traceback.
            "Oncestream-Error": " ".join(error.split())[:1000] or "error",
            # Deterministic id: a retried dead-letter publish is de-duplicated; the
            # letter of another consumer, or of the seq of a stream created again, is not.
            MSG_ID: letter_msg_id(stream, consumer, seq, created),
        }
    )
    if origin[2]:
        headers[STREAM_CREATED] = origin[2]
    return headers


@dataclass(frozen=True)
class Stored:
    """Where a dead letter is: its sequence in the dead-letter stream, and whether the
    server found it there already (``duplicate``: a letter with its msg id was stored
    within the stream's duplicate window)."""

    seq: int
    duplicate: bool = False


async def publish_dead_letter(
    conn: Connection,
    subject: str,
    msg: Message,
    headers: dict[str, str],
    *,
    timeout: float = 2.0,
    attempts: int = 5,
    expected_stream: str | None = None,
) -> Stored:
    """Publish one dead letter and wait for its PubAck; where it is in the DLQ stream.

    With ``expected_stream`` (the dead-letter stream) it carries ``Nats-Expected-Stream``:
    a dead-letter subject that another stream captures is refused, not stored there.

    Raises:
        PublishFailed: no PubAck after ``attempts`` tries (nothing was lost: the
            caller naks the original, which comes back).
        JetStreamError: the DLQ stream rejected the message.
    """

    def failure(last: Exception | None) -> str:
        error = translate_error(last, what=f"dead-letter publish to {subject}") if last else None
        return f"dead letter for {headers.get(MSG_ID)} not confirmed after {attempts} attempts" + (
            f": {error}" if isinstance(error, OncestreamError) else ""
        )

    if expected_stream:
        headers = {**headers, EXPECTED_STREAM: expected_stream}
    ack = await publish_confirmed(
        conn,
        subject,
        msg.data,
        headers,
        what="dead-letter publish",
        failure=failure,
        log=log,
        timeout=timeout,
        attempts=attempts,
    )
    return Stored(int(ack.get("seq", 0)), bool(ack.get("duplicate")))
