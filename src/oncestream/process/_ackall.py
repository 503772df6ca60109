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

__all__ = ["AckAllOwner"]

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
        """Reset again when an ack from before the last reset moved the consumer's delivery
        floor past every delivery since (run until cancelled).

        A reset numbers deliveries from 1; an ack sent before it (a Processor that was
        superseded or frozen, or this one's own unconfirmed ones) that arrives after it
        sets the floor to its old, higher delivery sequence, and the server then ignores
        every ack and nak below that floor (consumer.go ``processAckMsg``,
        ``processNak``): nothing is lost, but everything waits for redeliveries.
        """
        interval = min(max(self.bound.ack_wait / 4, 1.0), 10.0)
        while True:
            await asyncio.sleep(interval)
            try:
                info = await self.conn.consumer_info(self.stream, self.consumer)
            except OncestreamError as exc:
                log.debug("ack floor not checked: %s", exc)
                continue
            floor = int((info.get("ack_floor") or {}).get("consumer_seq", 0))
            delivered = int((info.get("delivered") or {}).get("consumer_seq", 0))
            if floor > delivered:
                self.frontier.interrupt(
                    f"the consumer's ack floor is at delivery {floor}, past its last delivery "
                    f"{delivered} (an ack sent before the consumer was reset arrived after it)"
                )  # the batch loop resets within a second, idle or not

    async def reanchor(self, acks: Acknowledger) -> None:
        """Deliveries stopped being contiguous: drop what is buffered and reset the consumer."""
        pull = self.pulls.current
        assert pull is not None
        log.warning(
            "%s/%s: %s; resetting the consumer to its ack floor (what is unacknowledged is "
            "delivered again; the ledger suppresses what was applied)",
            self.stream,
            self.consumer,
            self.frontier.gap,
        )
        pull.halt()
        await pull.stop()  # nothing delivered before the reset reaches the new inbox
        pull.take_unprocessed()
        await acks.drain()  # acks decided before the reset reach the server first
        conn = self.conn

        async def reset_failed(exc: BaseException) -> None:
            log.warning(
                "%s/%s: consumer reset failed (%s); retrying", self.stream, self.consumer, exc
            )

        await retrying(
            lambda: reset_to_ack_floor(conn, self.stream, self.consumer),
            budget=max(self.bound.ack_wait, 5.0),
            what=f"resetting {self.stream}/{self.consumer} to its ack floor",
            retry_if=lambda exc: isinstance(exc, OncestreamError) and not self.stopping(),
            on_retry=reset_failed,
            log_retries=False,
            budget_source="the consumer's ack_wait (at least 5 s)",
        )
        self.frontier.restart()
        self.stats.resets += 1
        await self.pulls.renew(None)
