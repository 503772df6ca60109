"""One core-NATS publish confirmed by its JetStream PubAck, retried with the same headers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import orjson

from .._connection import Connection
from .._errors import JetStreamError, NoResponders, PublishFailed, jetstream_error
from .._headers import MSG_ID

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
    delay = 0.1
    last: Exception | None = None
    for attempt in range(1, attempts + 1):
        try:
            reply = await conn.request(subject, data, timeout=timeout, headers=headers)
            ack: dict[str, Any] = orjson.loads(reply.data) if reply.data else {}
            if "error" in ack:
                raise jetstream_error(ack["error"])
            return ack
        except NoResponders as exc:  # the stream may be between leaders: retry
            last = exc
        except JetStreamError:
            raise
        except Exception as exc:
            last = exc
            log.debug("%s attempt %d to %s failed: %s", what, attempt, subject, exc)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)
    raise PublishFailed(failure(last), msg_id=headers.get(MSG_ID), attempts=attempts) from last
