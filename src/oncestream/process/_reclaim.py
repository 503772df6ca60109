"""At start, taking back what an instance that is gone held unacknowledged.

A Processor that dies (SIGKILL, OOM, a lost node) leaves the messages
delivered to it unacknowledged. The server hands them out again only after
the consumer's ack wait, and behind every newer message: a plain restart
would stall for the ack wait and then break per-subject order. So a
Processor that starts looks at its consumer before it pulls. When messages
are held (``num_ack_pending``) and no client has a pull request waiting
(``num_waiting``; the server drops the requests of a closed connection), in
two looks ``SETTLE`` seconds apart with nothing delivered or acknowledged in
between, whoever held them is gone. It then resets the consumer to its ack
floor (``CONSUMER.RESET``, nats-server 2.14+; on older servers nothing
changes): the held messages come again at once and in stream order, and the
ledger acknowledges those already applied without applying them again.

A live instance keeps a pull request waiting, or receives or acknowledges
within the window: nothing is reset and its messages stay its own. What the
server cannot tell apart: an instance on a machine that vanished keeps its
connection, and its waiting requests, until the server's ping timeout (two
minutes by default), so its messages come back after the ack wait as
before; an instance blocked in one batch for longer than the window with
nothing requested looks gone, and the reset hands the messages buffered
there to the new instance as well (the ledger still applies each once).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .._connection import Connection
from .._errors import ConsumerNotFound, OncestreamError, StreamNotFound
from ..streams._internal import RESET_SINCE, server_version
from ._pinning import reset_to_ack_floor

__all__ = ["SETTLE", "Reclaimed", "reclaim_at_start", "reclaim_held"]

log = logging.getLogger(__name__)

#: Seconds between the two looks at the consumer (paid only when messages are held).
SETTLE = 1.0


class Reclaimed:
    """What :func:`reclaim_held` found and did.

    Attributes:
        held: messages held unacknowledged when the Processor started.
        reset_seq: the stream sequence delivery restarts from (0: not reset).
        why_not: why nothing was reset, in words ("" when reset or nothing held).
    """

    def __init__(self, held: int = 0, reset_seq: int = 0, why_not: str = "") -> None:
        self.held = held
        self.reset_seq = reset_seq
        self.why_not = why_not


def _activity(info: dict[str, Any]) -> tuple[Any, ...]:
    """What changes while any client works on the consumer: deliveries, acks, pending."""
    delivered = info.get("delivered") or {}
    floor = info.get("ack_floor") or {}
    return (
        delivered.get("stream_seq"),
        delivered.get("last_active"),
        floor.get("stream_seq"),
        floor.get("last_active"),
        info.get("num_ack_pending"),
        info.get("num_redelivered"),
    )


async def reclaim_held(
    conn: Connection, stream: str, consumer: str, *, settle: float = SETTLE
) -> Reclaimed:
    """Reset ``consumer`` to its ack floor if what it holds belongs to no live client.

    Call before this instance pulls (its own request would count as a live one).

    Raises:
        JetStreamError, OperationTimeout: asking the server failed (nothing was reset).
    """
    first = await conn.consumer_info(stream, consumer)
    held = int(first.get("num_ack_pending") or 0)
    if not held:
        return Reclaimed()
    if first.get("num_waiting"):
        return Reclaimed(held, why_not="another instance is pulling")
    found = server_version(conn)
    if found is not None and found[:2] < RESET_SINCE:
        return Reclaimed(
            held,
            why_not=f"the server ({'.'.join(map(str, found))}) has no consumer reset "
            f"(nats-server {RESET_SINCE[0]}.{RESET_SINCE[1]}+)",
        )
    await asyncio.sleep(settle)
    second = await conn.consumer_info(stream, consumer)
    if second.get("num_waiting") or _activity(second) != _activity(first):
        return Reclaimed(held, why_not="another instance is working on the consumer")
    return Reclaimed(held, await reset_to_ack_floor(conn, stream, consumer))


async def reclaim_at_start(conn: Connection, stream: str, consumer: str, ack_wait: float) -> int:
    """:func:`reclaim_held`, logged; a failed look only warns (the ack wait brings them back).

    Returns:
        How many held messages were taken back (0 when none, or when they were left alone).

    Raises:
        ConsumerNotFound, StreamNotFound: as the Processor's start would.
    """
    try:
        found = await reclaim_held(conn, stream, consumer)
    except (ConsumerNotFound, StreamNotFound):
        raise
    except OncestreamError as exc:
        log.warning(
            "%s/%s: could not check for messages a previous instance held (%s); any such "
            "come back after the ack wait (%gs)",
            stream,
            consumer,
            exc,
            ack_wait,
        )
        return 0
    if found.reset_seq:
        log.warning(
            "%s/%s: %d messages were held unacknowledged by an instance that is gone; "
            "consumer reset to its ack floor: delivered again from sequence %d now, in "
            "stream order, instead of after the ack wait (%gs)",
            stream,
            consumer,
            found.held,
            found.reset_seq,
            ack_wait,
        )
        return found.held
    if found.held:
        log.info(
            "%s/%s: %d messages are held unacknowledged and left alone (%s)",
            stream,
            consumer,
            found.held,
            found.why_not,
        )
    return 0
