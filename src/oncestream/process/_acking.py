"""Acknowledging a batch: acks, the double ack of its tail, naks with backoff, dead letters.

After :mod:`oncestream.process._applying` committed a batch, :class:`Acknowledger`
tells the server: every applied (or already applied) message is acked in one
buffered write, the batch's last message with a confirmed ack (double ack)
whose round trip overlaps the next batches; a failed message is nak'ed with
the configured backoff, or, after ``max_deliver`` attempts, published to the
dead-letter stream and terminated. On a consumer with ack policy ``all`` one
confirmed ack covers the batch instead (:meth:`Acknowledger.ack_through`; what
it may cover is :mod:`oncestream.process._ackfrontier`'s), and a dead-lettered
message is not terminated (a ``+TERM`` acks everything below it there too).
While a batch is in flight for longer than half the ack wait, in-progress acks
keep the server from redelivering it and the messages buffered behind it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .._connection import Connection
from .._errors import OncestreamError
from .._logthrottle import LogThrottle
from .._message import Message
from .._retry import retrying
from ..tracing._internal import Tracer
from ._deadletter import dead_letter_headers, publish_dead_letter
from ._options import ProcessorOptions, ProcessorStats

if TYPE_CHECKING:
    from ._ackfrontier import AckFrontier
    from ._maxdeliver import DeliveryLimit

__all__ = ["Acknowledger"]

log = logging.getLogger("oncestream.processor")

_ACK = b"+ACK"
_WPI = b"+WPI"
_TERM = b"+TERM"
_NAK = b"-NAK"
#: Double-ack confirmations outstanding at once (they overlap the next batches).
_MAX_CONFIRMING = 4


def _confirm_delay(attempt: int) -> float:
    """Seconds before ack confirmation retry ``attempt`` (0-based): 0.05 doubling, at most 1."""
    return min(0.05 * float(2 ** min(attempt, 16)), 1.0)


def _nak_after(seconds: float) -> bytes:
    return b'-NAK {"delay": %d}' % int(seconds * 1e9)


class Acknowledger:
    """Sends a Processor's acks, naks, terms and in-progress acks.

    Args:
        stream, consumer: what is processed (for dead letters and logs).
        options: ``double_ack*``, ``max_deliver``, ``backoff``.
        stats: counters to update.
        stopping: whether the Processor is stopping (double-ack retries end sooner).
        buffered: reply subjects of the messages delivered behind the batch in
            flight (the pull's buffer): their ack wait runs as well while that
            batch is applied, so its in-progress acks cover them too.
    """

    def __init__(
        self,
        stream: str,
        consumer: str,
        options: ProcessorOptions,
        stats: ProcessorStats,
        stopping: Callable[[], bool],
        *,
        buffered: Callable[[], list[str]],
    ) -> None:
        self.stream = stream
        self.consumer = consumer
        self.options = options
        self.stats = stats
        self.stopping = stopping
        self.conn: Connection | None = None
        #: Where dead letters go ("" = no dead-letter stream: keep retrying).
        self.dlq_subject = ""
        #: Why the last dead-letter publish failed (e.g. the dead-letter stream is full).
        self.dead_letter_error: OncestreamError | None = None
        #: Seconds the server waits for an ack (the consumer's, once known).
        self.ack_wait = options.ack_wait
        self._confirming: deque[asyncio.Task[None]] = deque()
        self._inflight: list[str] = []
        self._inflight_since = 0.0
        self.buffered = buffered
        self._failure_log = LogThrottle(log)  # identical failures: first 5, then a summary
        #: Spans of failed messages' outcomes (``retried``, ``dead_lettered``).
        self.tracer: Tracer | None = None
        self.batch_started_ns = 0
        #: The consumer's max_deliver as the Processor knows it (None: only its own count).
        self.limit: DeliveryLimit | None = None
        #: With ack policy ``all``: what one ack may cover (None: every message is acked).
        self.frontier: AckFrontier | None = None

    # -- the batch being applied (for in-progress acks)

    def begin_batch(self, msgs: Sequence[Message]) -> None:
        """``msgs`` are being applied: keep them alive while that takes long."""
        self._inflight = [m.reply for m in msgs]
        self._inflight_since = time.monotonic()

    def end_batch(self) -> None:
        """The batch is no longer in flight."""
        self._inflight = []

    async def keep_alive(self) -> None:
        """Run forever: in-progress acks for a batch in flight longer than half the ack wait,
        and for finished messages an ack cannot cover yet (ack policy ``all``)."""
        interval = max(self.ack_wait / 2, 0.5)
        while True:
            await asyncio.sleep(interval / 2)
            inflight = self._inflight
            if inflight and time.monotonic() - self._inflight_since >= interval:
                waiting = inflight + self.buffered()
                await self.send(waiting, _WPI)
                self.stats.in_progress_acks += len(waiting)
                self._inflight_since = time.monotonic()
            frontier = self.frontier
            since = frontier.held_since if frontier is not None else 0.0
            if frontier is not None and since and time.monotonic() - since >= interval:
                # Held behind a failed message: redelivered, they would only be
                # suppressed (or a dead letter handled again).
                held = frontier.held_replies()
                await self.send(held, _WPI)
                self.stats.in_progress_acks += len(held)
                frontier.held_since = time.monotonic()

    # -- sending

    async def send(self, replies: Sequence[str], payload: bytes) -> None:
        """Publish ``payload`` to every reply subject with one buffered write."""
        if replies and self.conn is not None:
            await self.conn.publish_many(replies, payload)

    async def nak(self, msgs: Sequence[Message], delay: float | None = None) -> None:
        """Hand ``msgs`` back for redelivery (after ``delay`` seconds when given)."""
        await self.send([m.reply for m in msgs], _NAK if delay is None else _nak_after(delay))

    async def ack(self, replies: list[str]) -> None:
        """Ack every reply subject; with ``double_ack``, confirm the last one."""
        if not self.options.double_ack:
            await self.send(replies, _ACK)
            return
        await self.send(replies[:-1], _ACK)
        await self._confirm(replies[-1])

    async def ack_through(self, reply: str) -> None:
        """Ack ``reply`` alone, confirmed with ``double_ack``: on a consumer with ack policy
        ``all`` that acks every message of the consumer up to its stream sequence."""
        if not self.options.double_ack:
            await self.send([reply], _ACK)
            return
        await self._confirm(reply)

    async def _confirm(self, reply: str) -> None:
        # Confirmation round trips overlap the next batches; a few may be
        # outstanding (the ledger, not the confirmation, is the guarantee) and
        # shutdown waits for all of them.
        confirming = self._confirming
        while confirming and confirming[0].done():
            confirming.popleft()
        if len(confirming) >= _MAX_CONFIRMING:
            await confirming.popleft()
        confirming.append(asyncio.create_task(self._double_ack(reply)))

    async def drain(self) -> None:
        """Wait for every outstanding ack confirmation."""
        while self._confirming:
            try:
                await self._confirming.popleft()
            except Exception as exc:  # logged in _double_ack; the ledger still guards
                log.debug("ack confirmation ended with %s", exc)

    async def _double_ack(self, reply: str) -> None:
        conn = self.conn
        assert conn is not None
        failures = 0

        async def confirm() -> None:
            await conn.request(reply, _ACK, timeout=self.options.double_ack_timeout)

        def again(exc: BaseException) -> bool:
            nonlocal failures
            failures += 1
            log.debug("ack confirmation attempt %d failed: %s", failures, exc)
            return not (self.stopping() and failures >= 2)  # a stop waits for two at most

        try:
            await retrying(
                confirm,
                budget=None,
                what=f"ack confirmation of {reply}",
                attempts=self.options.double_ack_attempts,
                retry_if=again,
                delay=_confirm_delay,
                log_retries=False,
            )
        except Exception:  # each attempt was logged in again()
            # The ledger still makes a redelivery harmless; the ack stays sent.
            self.stats.double_ack_failures += 1
            log.warning("ack of %s not confirmed; a redelivery will be suppressed", reply)
            return
        self.stats.double_acks += 1

    # -- failures

    async def failed(self, msg: Message, error: BaseException) -> bool:
        """The handler failed for ``msg``: nak it with backoff, or dead-letter it.

        Returns:
            True when it was dead-lettered (finished), False when it will come again.
            On a consumer with ack policy ``all`` a dead letter is not terminated: a
            ``+TERM`` would ack every message below it as well, so the batch's ack
            covers it once everything below it is finished.

        Raises:
            MaxDeliverError: the consumer has a ``max_deliver`` now and no dead-letter
                stream is configured (``msg`` is nak'ed first while it has deliveries
                left, and left to the server otherwise).
        """
        self.stats.failed += 1
        metadata = msg.metadata
        attempts, seq = metadata.num_delivered, metadata.stream_seq
        text = f"{type(error).__name__}: {error}"
        opts = self.options
        limit = self.limit
        max_attempts = opts.max_deliver
        if limit is not None:
            await limit.refresh()  # lowered under this Processor? (at most once a second)
            stop = limit.failing(seq, attempts)
            if stop is not None:
                if attempts < limit.consumer_max:
                    await self.nak([msg], opts.backoff[min(attempts, len(opts.backoff)) - 1])
                # At its last delivery a nak would drop it at once; left alone it is
                # delivered again after the ack wait if the limit is lifted by then.
                raise stop
            max_attempts = limit.attempts()
        if attempts >= max_attempts:
            if self.dlq_subject:
                if await self.dead_letter(msg, seq, attempts, text):
                    if self.frontier is None:
                        await self.send([msg.reply], _TERM)
                    self._trace(msg, "dead_lettered")
                    return True
            else:
                self._failure_log.log(
                    logging.ERROR,
                    text,
                    "%s seq %d failed %d times and no dead-letter stream is configured; "
                    "it keeps being retried: %s",
                    self.stream,
                    seq,
                    attempts,
                    text,
                )
        else:
            self._failure_log.log(
                logging.INFO,
                text,
                "%s seq %d failed (attempt %d): %s",
                self.stream,
                seq,
                attempts,
                text,
            )
        await self.nak([msg], opts.backoff[min(attempts, len(opts.backoff)) - 1])
        self._trace(msg, "retried")
        return False

    def _trace(self, msg: Message, outcome: str) -> None:
        if self.tracer is not None:
            self.tracer.consumed(
                [msg], outcome, self.batch_started_ns, stream=self.stream, consumer=self.consumer
            )

    async def dead_letter(self, msg: Message, seq: int, attempts: int, text: str) -> bool:
        """Publish ``msg`` (stream sequence ``seq``) to the dead-letter stream and wait for
        its PubAck; False when it was not stored (logged; the caller retries later).
        The caller terminates the original (``+TERM``) when it is still delivered."""
        assert self.conn is not None
        headers = dead_letter_headers(
            msg, stream=self.stream, consumer=self.consumer, seq=seq, attempts=attempts, error=text
        )
        try:
            await publish_dead_letter(
                self.conn,
                self.dlq_subject,
                msg,
                headers,
                expected_stream=self.options.dead_letter_stream,
            )
        except OncestreamError as exc:
            log.error(
                "dead letter for %s seq %d not stored (%s); retrying later", self.stream, seq, exc
            )
            self.dead_letter_error = exc
            return False
        self.stats.dead_lettered += 1
        log.warning(
            "%s seq %d dead-lettered to %s after %d attempts: %s",
            self.stream,
            seq,
            self.dlq_subject,
            attempts,
            text,
        )
        return True
