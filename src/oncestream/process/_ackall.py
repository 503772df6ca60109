"""Ack policy ``all``: the Processor owns its consumer, fenced in the ledger and reset to its floor.

With ack policy ``all`` one ack covers every message of the consumer below it,
whoever it was delivered to, so one Processor at a time may run on it
(:mod:`._ackfrontier` says what one ack may cover). When it starts,
:class:`AckAllOwner` fences the consumer in the ledger (a Processor that ran on it
before rolls its next batch back and stops: an ack of its would cover this one's
deliveries) and resets it to its ack floor (what is unacknowledged is delivered
again, and deliveries are numbered from 1, which the frontier counts on). Whenever
deliveries stop being contiguous it resets the consumer again.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable

from .._connection import Connection
from .._errors import ConfigError, OncestreamError
from .._retry import retrying
from ..ledger import LedgerTx
from ..streams import require_server
from ..streams._internal import RESET_SINCE
from ._ackfrontier import AckFrontier
from ._acking import Acknowledger
from ._bound import BoundConsumer
from ._ledgercalls import LedgerCalls
from ._options import ProcessorStats
from ._pinning import OwnerCheck, Superseded, reset_to_ack_floor, take_over
from ._pulls import Pulls

__all__ = ["AckAllOwner", "reanchor", "watch_ack_floor"]

log = logging.getLogger(__name__)


class AckAllOwner:
    """A Processor alone on an ack-all consumer: its fence, its frontier, its resets.

    Args:
        bound: the consumer.
        conn: the connection (consumer resets and info).
        calls: the ledger's calls (the fence is written through them).
        pulls: the consumer's pull, replaced by a reset.
        stats: counters (``resets``).
        fail: called with the error that must end the run (another Processor took over).
        stopping: whether a stop was requested (a reset's retries end).

    Example::

        owner = AckAllOwner(bound, conn, calls, pulls, stats, fail=..., stopping=...)
        await owner.start()  # fenced and reset: owner.frontier counts from delivery 1
    """

    def __init__(
        self,
        bound: BoundConsumer,
        conn: Connection,
        calls: LedgerCalls,
        pulls: Pulls,
        stats: ProcessorStats,
        *,
        fail: Callable[[OncestreamError], None],
        stopping: Callable[[], bool],
    ) -> None:
        self.bound = bound
        self.stream, self.consumer = bound.stream, bound.consumer
        self.conn = conn
        self.calls = calls
        self.pulls = pulls
        self.stats = stats
        self.fail = fail
        self.stopping = stopping
        self.check = OwnerCheck(calls.ledger, f"{bound.where}/ack all", uuid.uuid4().hex)
        #: What one ack may cover (counting from the reset of :meth:`start`).
        self.frontier = AckFrontier()

    async def start(self) -> None:
        """Fence the consumer in the ledger, then reset it to its ack floor.

        Raises:
            ConfigError: the server has no consumer reset (before 2.14).
        """
        require_server(
            self.conn,
            RESET_SINCE,
            "ack_policy 'all' (the Processor resets the consumer when it starts)",
        )
        await self.calls.db(take_over, self.calls.ledger, self.check.name, self.check.pin)
        await reset_to_ack_floor(self.conn, self.stream, self.consumer)

    def __call__(self, tx: LedgerTx) -> None:
        """The owner check: another Processor started on the consumer since this one did."""
        self.check(tx)

    def superseded(self, exc: Superseded) -> None:
        """Another Processor took the consumer over: this one stops, acking nothing more."""
        self.fail(
            ConfigError(
                f"consumer {self.bound.where} has ack policy 'all' (one ack per batch "
                f"covers every message before it, so one Processor at a time) and another "
                f"Processor started on it: this one stopped without acknowledging its "
                f"deliveries ({exc}). Run one Processor per consumer; to share a consumer "
                f"between several, create it with explicit acks and run them with "
                f"ack_policy 'explicit'"
            )
        )

    async def watch_floor(self) -> None:
        """Reset again when a late ack moved the consumer's ack floor past its deliveries
        (:func:`watch_ack_floor`; run until cancelled)."""
        await watch_ack_floor(self.conn, self.bound, self.frontier)

    async def reanchor(self, acks: Acknowledger) -> None:
        """Deliveries stopped being contiguous: drop what is buffered and reset the consumer."""
        await reanchor(self.bound, self.conn, self.pulls, self.frontier, acks, self.stats,
                       stopping=self.stopping, pin=None)  # fmt: skip


async def watch_ack_floor(
    conn: Connection,
    bound: BoundConsumer,
    frontier: AckFrontier,
    active: Callable[[], bool] = lambda: True,
) -> None:
    """Interrupt ``frontier`` when an ack from before the last reset moved the consumer's
    delivery floor past every delivery since (run until cancelled; checked while
    ``active()``: a pinned group's standby resets nothing).

    A reset numbers deliveries from 1; an ack sent before it (a Processor that was
    superseded or frozen, or this one's own unconfirmed ones) that arrives after it
    sets the floor to its old, higher delivery sequence, and the server then ignores
    every ack and nak below that floor (consumer.go ``processAckMsg``,
    ``processNak``): nothing is lost, but everything waits for redeliveries.
    """
    interval = min(max(bound.ack_wait / 4, 1.0), 10.0)
    while True:
        await asyncio.sleep(interval)
        if not active():
            continue
        try:
            info = await conn.consumer_info(bound.stream, bound.consumer)
        except OncestreamError as exc:
            log.debug("ack floor not checked: %s", exc)
            continue
        floor = int((info.get("ack_floor") or {}).get("consumer_seq", 0))
        delivered = int((info.get("delivered") or {}).get("consumer_seq", 0))
        if floor > delivered:
            frontier.interrupt(
                f"the consumer's ack floor is at delivery {floor}, past its last delivery "
                f"{delivered} (an ack sent before the consumer was reset arrived after it)"
            )  # the batch loop resets within a second, idle or not


async def reanchor(
    bound: BoundConsumer,
    conn: Connection,
    pulls: Pulls,
    frontier: AckFrontier,
    acks: Acknowledger,
    stats: ProcessorStats,
    *,
    stopping: Callable[[], bool],
    pin: str | None,
) -> None:
    """Deliveries stopped being contiguous: drop what is buffered, reset the consumer to
    its ack floor and pull again (under ``pin``, a pinned group's active one's)."""
    stream, consumer = bound.stream, bound.consumer
    pull = pulls.current
    assert pull is not None
    log.warning(
        "%s/%s: %s; resetting the consumer to its ack floor (what is unacknowledged is "
        "delivered again; the ledger suppresses what was applied)",
        stream,
        consumer,
        frontier.gap,
    )
    pull.halt()
    await pull.stop()  # nothing delivered before the reset reaches the new inbox
    pull.take_unprocessed()
    await acks.drain()  # acks decided before the reset reach the server first

    async def reset_failed(exc: BaseException) -> None:
        log.warning("%s/%s: consumer reset failed (%s); retrying", stream, consumer, exc)

    await retrying(
        lambda: reset_to_ack_floor(conn, stream, consumer),
        budget=max(bound.ack_wait, 5.0),
        what=f"resetting {stream}/{consumer} to its ack floor",
        retry_if=lambda exc: isinstance(exc, OncestreamError) and not stopping(),
        on_retry=reset_failed,
        log_retries=False,
        budget_source="the consumer's ack_wait (at least 5 s)",
    )
    frontier.restart()
    stats.resets += 1
    await pulls.renew(pin)
