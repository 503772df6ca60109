"""Dead letters: a message that failed ``max_deliver`` times goes to a dead-letter stream."""

from __future__ import annotations

import logging

from .._connection import Connection, translate_error
from .._errors import OncestreamError
from .._headers import EXPECTED_STREAM, MSG_ID, MSG_TTL, ROLLUP, writable_headers
from .._message import Message
from ._confirmed import publish_confirmed
from ._replayed import letter_msg_id

__all__ = ["dead_letter_headers", "publish_dead_letter"]

log = logging.getLogger(__name__)

#: Headers of the original message that must not be replayed on the DLQ publish (the
#: write-time checks Nats-Expected-*/Nats-Batch-* are not in ``Message.headers`` at all).
_DROP = (MSG_ID, MSG_TTL, ROLLUP)


def dead_letter_headers(
    msg: Message, *, stream: str, consumer: str, seq: int, attempts: int, error: str
) -> dict[str, str]:
    """The headers of a dead letter: the original ones plus where and why it failed.

    Headers the server stamped on the original (``Nats-Stream-Source`` on a message of a
    sourced stream...) are not sent: the server refuses them (``_headers.writable_headers``).
    """
    headers = {k: v for k, v in writable_headers(msg.headers or {}).items() if k not in _DROP}
    original_id = msg.msg_id
    if original_id:
        headers["Oncestream-Msg-Id"] = original_id
    headers.update(
        {
            "Oncestream-Stream": stream,
            "Oncestream-Consumer": consumer,
            "Oncestream-Sequence": str(seq),
            "Oncestream-Subject": msg.subject,
            "Oncestream-Attempts": str(attempts),
            # One line, bounded: headers are not a place for a traceback.
            "Oncestream-Error": " ".join(error.split())[:1000] or "error",
            # Deterministic id: a retried dead-letter publish is de-duplicated; the
            # letter of another consumer that gives up on the message is not.
            MSG_ID: letter_msg_id(stream, consumer, seq),
        }
    )
    return headers


async def publish_dead_letter(
    conn: Connection,
    subject: str,
    msg: Message,
    headers: dict[str, str],
    *,
    timeout: float = 2.0,
    attempts: int = 5,
    expected_stream: str | None = None,
) -> int:
    """Publish one dead letter and wait for its PubAck; return its sequence in the DLQ stream.

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
    return int(ack.get("seq", 0))
