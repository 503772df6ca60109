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
from collections.abc import Awaitable, Callable, Sequence

from .._connection import Connection
from .._errors import OncestreamError
from .._headers import MSG_ID
from .._logthrottle import LogThrottle
from .._message import Message
from .._retry import retrying
from ..tracing._internal import Tracer
from ._ackfrontier import AckFrontier
from ._bound import BoundConsumer
from ._deadletter import dead_letter_headers, publish_dead_letter
from ._deadrecord import LetterRecorder, LetterStored
from ._handedback import HandedBack
from ._maxdeliver import DeliveryLimit
from ._options import ProcessorStats

__all__ = ["Acknowledger", "UnsentAcks"]

log = logging.getLogger(__name__)

_ACK = b"+ACK"
_WPI = b"+WPI"
_TERM = b"+TERM"
_NAK = b"-NAK"
#: Seconds between two commits of a stored letter's ledger row while the ledger fails.
_OWED_RETRY = 1.0
#: Double-ack confirmations outstanding at once (they overlap the next batches).
_MAX_CONFIRMING = 4


def _confirm_delay(attempt: int) -> float:
    """Seconds before ack confirmation retry ``attempt`` (0-based): 0.05 doubling, at most 1."""
    return min(0.05 * float(2 ** min(attempt, 16)), 1.0)


def _nak_after(seconds: float) -> bytes:
    return b'-NAK {"delay": %d}' % int(seconds * 1e9)


class Acknowledger:
    """Sends a Processor's acks, naks, terms and in-progress acks.

    The ack policy is chosen here: without ``frontier`` every message is acked
    (``explicit``); with it, one confirmed ack covers what the frontier allows
    (``all``, see :mod:`._ackfrontier`).

    Args:
        bound: the consumer (stream and consumer for dead letters and logs, its ack
            wait, dead-letter subject and the options: ``double_ack*``,
            ``max_deliver``, ``backoff``).
        conn: where acks go.
        stats: counters to update.
        limit: the consumer's ``max_deliver`` as the Processor knows it.
        frontier: ack policy ``all``: what one ack may cover (None: every message is acked).
        tracer: spans of failed messages' outcomes (``retried``, ``dead_lettered``).
        stopping: whether the Processor is stopping (double-ack retries end sooner).
        buffered: reply subjects of the messages delivered behind the batch in
            flight (the pull's buffer): their ack wait runs as well while that
            batch is applied, so its in-progress acks cover them too.
        held: where the messages handed back (nak) and not finished since are kept
            (:mod:`._handedback`; a new one when not given).
        recorder: dead-letters a failed message with its ledger key claimed in the same
            transaction (:mod:`._deadrecord`); None: the letter alone.

    Example::

        acks = Acknowledger(bound, conn, stats, limit=DeliveryLimit(bound, conn),
                            stopping=lambda: False, buffered=list)
        await acks.settle(done, [], failures)
    """

    def __init__(
        self,
        bound: BoundConsumer,
        conn: Connection,
        stats: ProcessorStats,
        *,
        limit: DeliveryLimit,
        frontier: AckFrontier | None = None,
        tracer: Tracer | None = None,
        stopping: Callable[[], bool],
        buffered: Callable[[], list[str]],
        held: HandedBack | None = None,
        recorder: LetterRecorder | None = None,
    ) -> None:
        self.stream = bound.stream
        self.consumer = bound.consumer
        self.options = bound.options
        self.stats = stats
        self.stopping = stopping
        self.conn = conn
        #: Where dead letters go ("" = no dead-letter stream: keep retrying).
        self.dlq_subject = bound.dlq_subject
        #: Why the last dead-letter publish failed (e.g. the dead-letter stream is full).
        self.dead_letter_error: OncestreamError | None = None
        #: The stream's creation time, its life, which each dead letter names (read at
        #: the first one; "": unknown, see :meth:`_stream_created`).
        self._created: str | None = None
        #: Seconds the server waits for an ack.
        self.ack_wait = bound.ack_wait
        self._confirming: deque[asyncio.Task[None]] = deque()
        self._inflight: list[str] = []
        self._inflight_since = 0.0
        self.buffered = buffered
        self._failure_log = LogThrottle(log)  # identical failures: first 5, then a summary
        self.tracer = tracer
        #: ``time.time_ns()`` when the batch in flight began (its spans start there).
        self._started_ns = 0
        self.limit = limit
        self.frontier = frontier
        #: Acks written while the connection was down (what a stop then leaves unsent).
        self.unsent = UnsentAcks()
        #: The messages handed back and not finished since (the server may forget them).
        self.held = held if held is not None else HandedBack()
        #: Dead-letters a failed message with its ledger row (None: the letter alone).
        self.recorder = recorder

    # -- the ack policy ----------------------------------------------------------------

    def admits(self, msgs: Sequence[Message]) -> bool:
        """Whether a pulled batch may be applied: with ack policy ``all``, not after a gap
        in its deliveries (:attr:`gap` says why; the consumer is reset first)."""
        return self.frontier is None or self.frontier.delivered(msgs)

    @property
    def gap(self) -> str:
        """Why deliveries stopped being contiguous ("": they are, or ack policy ``explicit``)."""
        return self.frontier.gap if self.frontier is not None else ""

    async def settle(
        self,
        done: list[Message],
        extras: list[Message],
        failures: list[tuple[Message, BaseException]],
    ) -> None:
        """A batch was applied: ack what it finished, nak or dead-letter what failed.

        Args:
            done: applied, or found applied (sorted by sequence).
            extras: the batch's other deliveries, finished without a transaction (a
                second copy of a message, a stored message schedule).
            failures: the messages whose handler failed, with the error.
        """
        held = self.held
        if held:
            held.finished(m.seq for m in done)
            held.finished(m.seq for m in extras)
        frontier = self.frontier
        if frontier is not None:
            finished = done + _by_seq(extras) if extras else done
            if extras and done:
                finished.sort(key=_seq)
            await self._ack_through(frontier.settle(finished, [m for m, _ in failures]))
            for msg, error in failures:
                if await self.failed(msg, error):  # dead-lettered: finished
                    await self._ack_through(frontier.settle([msg], []))
        else:
            replies = [m.reply for m in done] + [m.reply for m in extras]
            if replies:
                await self.ack(replies)
            for msg, error in failures:
                await self.failed(msg, error)
        if done and not self.conn.is_connected:
            self.unsent.note([m.seq for m in done])

    async def give_back(self, msgs: list[Message], extras: list[Message]) -> None:
        """The ledger kept failing: hand ``msgs`` back for a redelivery in a second."""
        for msg in msgs:
            self.held.note(msg.seq, msg.metadata.num_delivered)
        await self.nak(msgs, delay=1.0)
        if self.frontier is not None:
            await self._ack_through(self.frontier.settle(_by_seq(extras), msgs))

    async def dropped(self, seq: int) -> None:
        """``seq`` was settled after the server stopped delivering it (dead-lettered from
        the stream, or found applied): with ack policy ``all`` the ack may move past it."""
        self.held.finished((seq,))
        reply = self.frontier.dropped(seq) if self.frontier is not None else None
        if reply is not None:
            await self.ack_through(reply)

    async def _ack_through(self, reply: str | None) -> None:
        if reply is not None:
            await self.ack_through(reply)

    # -- the batch being applied (for in-progress acks)

    def begin_batch(self, msgs: Sequence[Message], started_ns: int = 0) -> None:
        """``msgs`` are being applied (since ``started_ns``, ``time.time_ns()``: where the
        spans of their outcomes start): keep them alive while that takes long."""
        self._inflight = [m.reply for m in msgs]
        self._inflight_since = time.monotonic()
        self._started_ns = started_ns

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
                frontier.kept_alive(time.monotonic())

    # -- sending

    async def send(self, replies: Sequence[str], payload: bytes) -> None:
        """Publish ``payload`` to every reply subject with one buffered write."""
        if replies:
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
        """``msg`` failed (its handler, or it is owed its row): nak it with backoff, or
        dead-letter it.

        Returns:
            True when it was dead-lettered (finished), False when it will come again.
            On a consumer with ack policy ``all`` a dead letter is not terminated: a
            ``+TERM`` would ack every message below it as well, so the batch's ack
            covers it once everything below it is finished.

        ``error`` is :class:`LetterStored` for a message whose letter is stored and whose
        ledger row is owed (the handler was not called): only the row is committed.

        Raises:
            MaxDeliverError: the consumer has a ``max_deliver`` now and no dead-letter
                stream is configured (``msg`` is nak'ed first while it has deliveries
                left, and left to the server otherwise).
        """
        metadata = msg.metadata
        attempts, seq = metadata.num_delivered, metadata.stream_seq
        text = f"{type(error).__name__}: {error}"
        opts = self.options
        limit = self.limit
        owed = isinstance(error, LetterStored)
        if not owed:  # counted, and checked against the limit, when its handler failed
            self.stats.failed += 1
            await limit.refresh()  # lowered under this Processor? (at most once a second)
            stop = limit.failing(seq, attempts)
            if stop is not None:
                if attempts < limit.consumer_max:
                    await self.nak([msg], opts.backoff[min(attempts, len(opts.backoff)) - 1])
                # At its last delivery a nak would drop it at once; left alone it is
                # delivered again after the ack wait if the limit is lifted by then.
                raise stop
        if owed or attempts >= limit.attempts():
            if self.dlq_subject:
                recorder = self.recorder
                if await (
                    self._recorded(recorder, msg, seq, attempts, text)
                    if recorder is not None
                    else self.dead_letter(msg, seq, attempts, text)
                ):
                    self.held.finished((seq,))
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
        self.held.note(seq, attempts)
        await self.nak([msg], opts.backoff[min(attempts, len(opts.backoff)) - 1])
        self._trace(msg, "retried")
        return False

    async def _recorded(
        self, recorder: LetterRecorder, msg: Message, seq: int, attempts: int, text: str
    ) -> bool:
        """Dead-letter ``msg`` with its ledger row (:class:`LetterRecorder`); True when finished.

        A letter stored whose row could not be committed (the database failing) is kept
        here, in progress (also while a try runs), and its commit tried again every second
        (a third of the ack wait if that is shorter) until it succeeds or the Processor
        stops (after the try under way; then it is handed back). Handed back at once,
        another instance sharing the consumer (or a message with its msg id) would be
        handled while the letter waits for a replay. Meanwhile nothing else is applied
        here; the ledger is failing anyway. Any other refusal (a standby's fence, the
        registry row moved) hands it back; delivered here again it only has its row
        committed (:class:`~._deadrecord.Unrecorded`).
        """
        pause = min(_OWED_RETRY, self.ack_wait / 3)
        record = recorder(msg, seq, attempts, text, self.dead_letter)
        finished = await self._in_progress(msg.reply, record, pause)
        while not finished and recorder.commit_failed and not self.stopping():
            await self._still_working(msg.reply)
            await asyncio.sleep(pause)
            record = recorder(msg, seq, attempts, text, self.dead_letter)
            finished = await self._in_progress(msg.reply, record, pause)
        return finished

    async def _in_progress(self, reply: str, call: Awaitable[bool], every: float) -> bool:
        """Await ``call``, sending ``reply`` an in-progress ack every ``every`` seconds while
        it runs: a ledger call that hangs (a database failing over) must not let the ack
        wait run out, or another instance gets the message while its letter is stored."""
        task = asyncio.ensure_future(call)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=every)
                if done:
                    return task.result()
                await self._still_working(reply)
        finally:
            if not task.done():
                task.cancel()
                # The try's own error must not replace the cancellation being raised.
                await asyncio.gather(task, return_exceptions=True)

    async def _still_working(self, reply: str) -> None:
        """One in-progress ack, best effort: the connection may be down (then the ack
        wait may run out; the server delivers the message again, which the ledger
        suppresses once its row is committed)."""
        try:
            await self.send([reply], _WPI)
            self.stats.in_progress_acks += 1
        except Exception as exc:
            log.debug("in-progress ack of %s not sent: %s", reply, exc)

    def _trace(self, msg: Message, outcome: str) -> None:
        if self.tracer is not None:
            self.tracer.consumed(
                [msg], outcome, self._started_ns, stream=self.stream, consumer=self.consumer
            )

    async def dead_letter(self, msg: Message, seq: int, attempts: int, text: str) -> bool:
        """Publish ``msg`` (stream sequence ``seq``) to the dead-letter stream and wait for
        its PubAck; False when it was not stored (logged; the caller retries later).
        The caller terminates the original (``+TERM``) when it is still delivered.

        A PubAck that says ``duplicate`` means this message's letter is stored already
        (the letter names the stream's life, so it is not a letter of the same sequence
        of a stream deleted since): logged, and finished like a new one.
        """
        created = await self._stream_created()
        if created is None:
            return False
        headers = dead_letter_headers(
            msg, stream=self.stream, consumer=self.consumer, seq=seq, attempts=attempts,
            error=text, created=created,
        )  # fmt: skip
        try:
            stored = await publish_dead_letter(
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
        if stored.duplicate:
            log.warning(
                "%s seq %d: its dead letter was stored before (%s seq %d, msg id %s): the "
                "server de-duplicated this one%s",
                self.stream, seq, self.options.dead_letter_stream, stored.seq,
                headers.get(MSG_ID),
                "" if created else (
                    "; the stream's creation time is unknown, so a letter of the same "
                    "sequence of a stream of that name deleted within the dead-letter "
                    "stream's duplicate window cannot be told from it"
                ),
            )  # fmt: skip
            return True
        log.warning(
            "%s seq %d dead-lettered to %s after %d attempts: %s",
            self.stream,
            seq,
            self.dlq_subject,
            attempts,
            text,
        )
        return True

    async def _stream_created(self) -> str | None:
        """The stream's creation time for a dead letter ("": unknown), or None when it
        cannot be read now (the letter waits: logged, ``dead_letter_error``).

        A bound Processor (``bind``: its set-up makes no API calls, and a cross-account
        import may not reach ``STREAM.INFO``) writes letters without it instead, once
        the read failed (a warning says what that leaves open).
        """
        if self._created is not None:
            return self._created
        try:
            info = await self.conn.stream_info(self.stream)
        except OncestreamError as exc:
            if not self.options.bind:
                log.error(
                    "dead letter for %s not stored: cannot read the stream's creation time, "
                    "which the letter names (%s); retrying later", self.stream, exc,
                )  # fmt: skip
                self.dead_letter_error = exc
                return None
            log.warning(
                "cannot read stream %s's creation time (%s): its dead letters name no "
                "life. If the stream is deleted and created again, a letter of its new "
                "messages may be taken for an old one's (see docs/processing.md, "
                "'Dead letters across the lives of a stream')", self.stream, exc,
            )  # fmt: skip
            info = {}
        self._created = str(info.get("created") or "")
        return self._created


def _seq(msg: Message) -> int:
    return msg.seq


def _by_seq(msgs: list[Message]) -> list[Message]:
    return sorted(msgs, key=_seq)


class UnsentAcks:
    """Messages acked while the connection was down, since the last reconnect.

    nats-py buffers writes while it reconnects and sends them once it is back;
    a stop before that drops them, and the server redelivers those messages.
    """

    def __init__(self) -> None:
        self.count = 0
        self.first = 0
        self.last = 0

    def note(self, seqs: list[int]) -> None:
        """``seqs`` were acked while the connection was down."""
        if not seqs:
            return
        self.first = min(seqs) if not self.count else min(self.first, *seqs)
        self.last = max(self.last, *seqs)
        self.count += len(seqs)

    async def reconnected(self) -> None:
        """The connection is back: what was buffered is sent."""
        self.count = self.first = self.last = 0

    def report(self, not_started: int, ack_wait: float) -> str:
        """What a stop while the server is unreachable leaves unacknowledged."""
        unacked = (
            f"the acks of {self.count} applied messages (stream sequences "
            f"{self.first}..{self.last}) could not be sent"
            if self.count
            else "no ack was written after the connection was lost (acks sent just before "
            "may not have arrived)"
        )
        return (
            f"stopping while the server is unreachable: {unacked}, and {not_started} "
            f"pulled messages were not started. The server redelivers them after the ack "
            f"wait ({ack_wait:g}s); the ledger keeps the applied ones from being applied "
            "again. Nothing is lost."
        )
