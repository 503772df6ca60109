"""One core-NATS publish confirmed by its JetStream PubAck, retried with the same headers.

Why not ``publish.Publisher`` (which the layers would allow: ``process`` sits above
``publish``): a Publisher is a long-lived pipelined sender. Its ``start()`` subscribes a
reply inbox of its own (and, given a stream, asks ``STREAM.INFO``); its attempts,
backoff and ack timeout come from ``PublisherOptions``; its give-up error has its own
text. A dead letter or a replayed message is one request at a rare moment, over the
connection's request path, whose ``PublishFailed`` text the caller writes
(``failure``). A Publisher per message would add a subscription and a flush per
message and change the retry schedule and the error, so this stays, with its retry
loop on :func:`oncestream._retry.retrying`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import orjson

from .._connection import Connection
from .._errors import JetStreamError, NoResponders, PublishFailed, jetstream_error
from .._headers import MSG_ID
from .._retry import backoff, retrying

__all__ = ["publish_confirmed"]


async def publish_confirmed(
    conn: Connection,
    subject: str,
    data: bytes,
    headers: dict[str, str],
    *,
    what: str,
    failure: Callable[[Exception | None], str],
    log: logging.Logger,
    timeout: float = 2.0,
    attempts: int = 5,
) -> dict[str, Any]:
    """Publish ``data`` to ``subject`` and return the PubAck, retrying with the same
    headers (so the same ``Nats-Msg-Id``: a retry that landed twice is de-duplicated).

    No responders (a stream between leaders) and transport errors are retried with
    backoff (0.1 s doubling, at most 2 s); attempts that fail are logged at DEBUG on
    ``log`` as ``what``.

    Raises:
        JetStreamError: the stream rejected the message (not retried).
        PublishFailed: no PubAck after ``attempts`` tries; its message is
            ``failure(last error)``.
    """

    async def once() -> dict[str, Any]:
        reply = await conn.request(subject, data, timeout=timeout, headers=headers)
        ack: dict[str, Any] = orjson.loads(reply.data) if reply.data else {}
        if "error" in ack:
            raise jetstream_error(ack["error"])
        return ack

    def worth_retrying(exc: BaseException) -> bool:
        # No responders: the stream may be between leaders. Any other rejection is final.
        if isinstance(exc, NoResponders):
            return True
        if isinstance(exc, JetStreamError):
            return False
        log.debug("%s attempt to %s failed: %s", what, subject, exc)
        return True

    try:
        return await retrying(
            once,
            budget=None,
            what=f"{what} to {subject}",
            attempts=attempts,
            retry_if=worth_retrying,
            delay=backoff,
            log_retries=False,
        )
    except Exception as exc:
        if isinstance(exc, JetStreamError) and not isinstance(exc, NoResponders):
            raise
        raise PublishFailed(failure(exc), msg_id=headers.get(MSG_ID), attempts=attempts) from exc
