"""The consumer's ``max_deliver``: never what ends a message's retries without a trace.

After ``max_deliver`` deliveries the server stops delivering a message and moves
the consumer's ack floor past it: nothing pending, nothing unacknowledged, no
error. The Processor counts attempts itself and dead-letters before that, so the
consumer it creates has no limit (-1). An existing consumer with a limit is
checked at start (:func:`oncestream.process._setup.setup_consumer` refuses one
that would drop a message); a limit set or lowered while the Processor runs is
learnt when a message fails (``CONSUMER.INFO``, at most once a second) and at each
pruning round:

- with a dead-letter stream, the Processor dead-letters after
  ``min(max_deliver, consumer's max_deliver - 1)`` attempts: before the server's
  last delivery, which stays spare for a crash during the dead-lettering;
- without one, the run fails with :class:`~oncestream.MaxDeliverError`, naming the fix.

If the server drops a message all the same (a limit set between two checks, a
``bind`` Processor that cannot read the consumer), its advisory
``$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<consumer>`` (sent by
nats-server ``consumer.go`` when a delivery would exceed the limit, to subscribers
only) is handled: a message the ledger holds was applied (its ack was late); any
other is dead-lettered from the stream, in a ledger transaction that records it,
or, without a dead-letter stream, the run fails with ``MaxDeliverError`` naming
its sequence. Either way it is counted (``ProcessorStats.exhausted``) and logged
as an error; it is never counted as applied. When its dead letter is refused (a
full dead-letter stream), the Processor moves the consumer back to it before the
run fails: the server forgets a dropped message, and only that makes the next
run deliver it again (``MaxDeliverError`` says so, or names the reset to run).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from .._connection import Connection
from .._errors import (
    LedgerError,
    LedgerUnusable,
    MaxDeliverError,
    MessageNotFound,
    OncestreamError,
)
from .._headers import msg_id_key
from .._message import Message
from .._nats import FrameSubscription
from .._retry import is_transient
from ..ledger import LedgerEntry
from ..streams import ResetTarget, get_message, reset_consumer
from ._applying import Applier, RegistryMoved
from ._bound import BoundConsumer
from ._deadrecord import Unrecorded, claiming
from ._options import ProcessorOptions, ProcessorStats
from ._pinning import Superseded
from ._replayed import replay_entry, replay_target

__all__ = ["DeadLetters", "DeliveryLimit", "DroppedMessages", "advisory_subject", "refusal"]

log = logging.getLogger(__name__)

#: Seconds between two ``CONSUMER.INFO`` reads on failures (a poison flood costs one a second).
_REFRESH = 1.0
#: Seconds before a dropped message whose settling the ledger failed is settled again.
_LEDGER_RETRY = 1.0

#: Seconds a stop waits for a drop being settled to finish (its dead letter published,
#: its ledger row committing) before it leaves the drop to the move back.
_FINISH_ON_STOP = 30.0


def advisory_subject(stream: str, consumer: str) -> str:
    """The server's advisory for a message that reached the consumer's ``max_deliver``."""
    return f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{stream}.{consumer}"


def _fix(stream: str, consumer: str) -> str:
    return (
        f"`oncestream consumer edit {stream} {consumer} --max-deliver -1` (the Processor "
        "counts attempts itself), or run the Processor with a dead-letter stream "
        "(--dead-letter-stream)"
    )


def refusal(
    config: dict[str, Any], stream: str, consumer: str, opts: ProcessorOptions
) -> str | None:
    """Why a Processor with ``opts`` must not start on a consumer with ``config``, or None."""
    limit = int(config.get("max_deliver", -1) or -1)
    if limit <= 0:
        return None
    where = f"consumer {stream}/{consumer}"
    if not opts.dead_letter_stream:
        return (
            f"{where} has max_deliver {limit} and no dead-letter stream is configured: the "
            f"server would stop delivering a message that failed {limit} times, and it would "
            f"be neither applied nor dead-lettered. Fix: {_fix(stream, consumer)}"
        )
    if limit <= opts.max_deliver:
        return (
            f"{where} has max_deliver {limit}; with a dead-letter stream it must be "
            f"-1 or > the Processor's max_deliver ({opts.max_deliver}), otherwise "
            f"the server stops redelivering before the message is dead-lettered. Fix: "
            f"`oncestream consumer edit {stream} {consumer} --max-deliver -1`, or a lower "
            f"--max-deliver for the Processor"
        )
    return None


class DeliveryLimit:
    """What a running Processor knows of its consumer's ``max_deliver``.

    Args:
        bound: the consumer (its dead-letter subject, ack wait and options).
        conn: where its config is read again (``CONSUMER.INFO``).

    Example::

        limit = DeliveryLimit(bound, conn)
        stop = limit.failing(seq, delivered)  # a MaxDeliverError to end the run, or None
    """

    def __init__(self, bound: BoundConsumer, conn: Connection) -> None:
        self.bound = bound
        self.conn = conn
        self.stream, self.consumer = bound.stream, bound.consumer
        self.options = bound.options
        #: The consumer's max_deliver as last read (-1: none, or not known: ``bind``).
        self.consumer_max = -1
        self._read_at = -_REFRESH

    # -- what the consumer's limit is -------------------------------------------------

    def note(self, config: dict[str, Any]) -> MaxDeliverError | None:
        """A consumer config read anywhere (a failure's refresh, a pruning round); the
        error that must end the run when its limit would drop a message, else None."""
        limit = int(config.get("max_deliver", -1) or -1)
        limit = limit if limit > 0 else -1
        changed, self.consumer_max = limit != self.consumer_max, limit
        if limit > 0 and not self.bound.dlq_subject:
            return self._error("seen by a pruning round, before any message failed", limit)
        if changed and 0 < limit <= self.options.max_deliver:
            log.warning(
                "%s/%s: the consumer's max_deliver is %d now (lower than the Processor's %d): "
                "failed messages are dead-lettered after %d attempts, before the server's "
                "last delivery",
                self.stream,
                self.consumer,
                limit,
                self.options.max_deliver,
                self.attempts(),
            )
        return None

    async def refresh(self) -> None:
        """Read the consumer's config again, at most once a second (never with ``bind``)."""
        if self.options.bind or time.monotonic() - self._read_at < _REFRESH:
            return
        self._read_at = time.monotonic()
        try:
            info = await self.conn.consumer_info(self.stream, self.consumer)
        except OncestreamError as exc:  # the next failure asks again; the advisory stays
            log.debug("consumer info for max_deliver not read: %s", exc)
            return
        self.note(info.get("config") or {})  # the failure itself says what to do

    def attempts(self) -> int:
        """Attempts after which a failed message is dead-lettered."""
        limit = self.consumer_max
        if limit <= 0:
            return self.options.max_deliver
        return min(self.options.max_deliver, max(limit - 1, 1))

    def failing(self, seq: int, delivered: int) -> MaxDeliverError | None:
        """The error that ends the run when message ``seq`` failed and the consumer's limit
        would drop it (no dead-letter stream); None when it is safe to retry."""
        if self.consumer_max <= 0 or self.bound.dlq_subject:
            return None
        return self._error(
            f"{self.stream} seq {seq} failed (delivery {delivered} of {self.consumer_max})",
            self.consumer_max,
            failed=seq,
        )

    def _error(self, what: str, limit: int, *, failed: int | None = None) -> MaxDeliverError:
        where = f"{self.stream}/{self.consumer}"
        # Unacked at its last delivery, the failed message is dropped by the server once
        # the ack wait passes (the max-deliveries advisory); a reset back to it is then
        # the only way it is delivered again.
        back = f"`oncestream consumer reset {self.stream} {self.consumer} --to-seq " + (
            f"{failed}`" if failed is not None else "N` (N: the sequence it names)"
        )
        subject = f"seq {failed}" if failed is not None else "a failed message"
        return MaxDeliverError(
            f"consumer {where} has max_deliver {limit} while this Processor runs ({what}), and "
            f"no dead-letter stream is configured: the server stops delivering a message after "
            f"{limit} deliveries, and it would be neither applied nor dead-lettered. Fix: "
            f"{_fix(self.stream, self.consumer)}; then start the Processor again. Deadline: "
            f"the consumer's ack wait ({self.bound.ack_wait:g}s) after {subject}'s last "
            f"delivery; after it the server stops delivering it (nothing pending, no error): "
            f"then, after the edit and before the Processor starts, {back} (the messages "
            "after it that were applied are in the ledger: acked, not applied again)",
            stream=self.stream,
            consumer=self.consumer,
            max_deliver=limit,
        )


class DeadLetters(Protocol):
    """What :class:`DroppedMessages` needs of the acknowledging part (:mod:`._acking`)."""

    #: Why the last dead-letter publish failed (e.g. the dead-letter stream is full).
    dead_letter_error: OncestreamError | None

    async def dead_letter(self, msg: Message, seq: int, attempts: int, text: str) -> bool:
        """Publish a dead letter; False when it was not stored."""
        ...

    async def dropped(self, seq: int) -> None:
        """``seq`` was settled after the server stopped delivering it."""
        ...


class DroppedMessages:
    """Settles each message the server stopped delivering at the consumer's ``max_deliver``.

    Args:
        bound: the consumer (its dead-letter subject).
        conn: where the advisories arrive and the message is read back from the stream.
        stats: counters (``exhausted``).
        applier: the applying part (the ledger, its lock, the fence and the claim).
        acks: the acknowledging part (dead letters, and the ack once one is settled).
        fail: called with the :class:`MaxDeliverError` that must end the run.
        moved: after :class:`RegistryMoved` in a drop's transaction: True to try it
            again (the registry's re-check; it stops the run when it returns False).
        settled: called after each drop is settled (the run's progress: what
            ``Processor.wait_until`` re-checks on).
        unrecorded: the letters stored whose ledger row is owed, shared with the
            acknowledging part's recorder (a new one when not given): such a drop's
            row is committed without its letter published again.
    """

    def __init__(
        self,
        bound: BoundConsumer,
        conn: Connection,
        stats: ProcessorStats,
        applier: Applier,
        acks: DeadLetters,
        *,
        fail: Callable[[MaxDeliverError], None],
        moved: Callable[[RegistryMoved, list[Message]], Awaitable[bool]],
        settled: Callable[[], None] = lambda: None,
        unrecorded: Unrecorded | None = None,
    ) -> None:
        self.bound = bound
        self.unrecorded = unrecorded if unrecorded is not None else Unrecorded()
        self.conn = conn
        self.stats = stats
        self.applier = applier
        self.acks = acks
        self.fail = fail
        self.moved = moved
        self.settled = settled
        self.stream, self.consumer = bound.stream, bound.consumer
        #: (stream sequence, deliveries, whether the server forgot it handed back).
        self._drops: asyncio.Queue[tuple[int, int, bool]] = asyncio.Queue()
        #: The drops counted in ``exhausted`` (a settling the ledger failed is retried).
        self._counted: set[int] = set()
        #: Drops whose settling the ledger failed, to be queued again (:meth:`_later`).
        self._pausing: set[tuple[int, int, bool]] = set()
        self._sub: FrameSubscription | None = None
        #: The sequence this run moved the consumer back to (a drop it could not settle).
        self._moved_back: int | None = None
        #: The drop being settled (not finished if the run stops meanwhile).
        self._settling: int | None = None
        #: Drops whose settling failed (their dead letter refused): still owed a move back.
        self._failed: list[int] = []
        #: Drops an error of this run named already (lost, or owed a move back).
        self._named: list[int] = []

    @property
    def options(self) -> ProcessorOptions:
        return self.bound.options

    async def subscribe(self) -> None:
        """Subscribe to the server's max-deliveries advisories of the consumer."""
        self._sub = await self.conn.subscribe_frames(
            advisory_subject(self.stream, self.consumer), self._on_advisory
        )

    async def watch(self) -> None:
        """Run until cancelled: settle each message an advisory names (after :meth:`subscribe`)."""
        conn = self.conn
        try:
            while True:
                seq, deliveries, forgot = await self._drops.get()
                self._settling = seq
                try:
                    settle = self._dropped(conn, seq, deliveries, forgot=forgot)
                    await self._finish(asyncio.ensure_future(settle))
                    self._settling = None
                except OncestreamError as exc:
                    database = isinstance(exc, LedgerError) and not isinstance(exc, LedgerUnusable)
                    if database or is_transient(exc):
                        # The database unreachable now (PostgreSQL restarted or killed), or
                        # the stream (between leaders after a cluster restart: its message
                        # read timed out): settled again once it answers (queued again
                        # after a pause, in which a stop moves the consumer back to it).
                        if database:
                            self.stats.ledger_errors += 1
                        log.warning(
                            "%s seq %d dropped by the server: not settled now (%s); "
                            "trying again in %g s", self.stream, seq, exc, _LEDGER_RETRY,
                        )  # fmt: skip
                        self._later((seq, deliveries, forgot))
                        self._settling = None
                        continue
                    self._settling = None
                    self._failed.append(seq)
                    log.error("%s seq %d dropped by the server: %s", self.stream, seq, exc)
                    back = await self._deliver_again(conn, seq)
                    self._named.append(seq)
                    self.fail(
                        MaxDeliverError(
                            f"the server stopped delivering {self.stream} seq {seq} "
                            f"{self._why(deliveries, forgot)} and it could not be "
                            f"dead-lettered: {exc}. {back}",
                            stream=self.stream,
                            consumer=self.consumer,
                            max_deliver=deliveries,
                            seqs=(seq,),
                        )
                    )
        finally:
            await self._move_back_unsettled(conn)
            if self._sub is not None:
                await self._sub.unsubscribe()
                self._sub = None

    async def _finish(self, settle: asyncio.Future[None]) -> None:
        """Await ``settle``; a stop meanwhile lets it finish first (bounded).

        Cut short, a drop whose dead letter is out and whose ledger row is committing
        would be reported as unsettled (a failed run naming a reset it does not need);
        finished, it is settled. Raises CancelledError after a stop either way.
        """
        try:
            await asyncio.shield(settle)
            return
        except asyncio.CancelledError:
            pass
        if not settle.done():
            log.info(
                "%s/%s: stopping; finishing the drop of seq %s first",
                self.stream, self.consumer, self._settling,
            )  # fmt: skip
            try:
                async with asyncio.timeout(_FINISH_ON_STOP):
                    await asyncio.shield(settle)
            except (TimeoutError, OncestreamError, OSError):
                settle.cancel()  # left to _move_back_unsettled: _settling still names it
                raise asyncio.CancelledError from None
        elif settle.cancelled() or settle.exception() is not None:
            raise asyncio.CancelledError  # not settled: _settling still names it
        self._settling = None  # finished, or done as the stop came
        raise asyncio.CancelledError

    def _later(self, drop: tuple[int, int, bool]) -> None:
        """Queue ``drop`` again in :data:`_LEDGER_RETRY` s; until then it counts as
        unsettled (a stop moves the consumer back to it)."""
        self._pausing.add(drop)

        def again() -> None:
            if drop in self._pausing:
                self._pausing.discard(drop)
                self._drops.put_nowait(drop)

        asyncio.get_running_loop().call_later(_LEDGER_RETRY, again)

    async def _move_back_unsettled(self, conn: Connection) -> None:
        """The run stops with drops not settled (queued, cut short, or failed): move the
        consumer back to the first of them, which the server no longer holds (a later drop
        may have moved it forward: never past one that came earlier). With ``bind`` the
        log names that first one, as the run's error does."""
        left = [seq for seq, *_ in self._queued()] + self._failed
        left += [seq for seq, *_ in self._pausing]
        self._pausing.clear()  # a stop: not queued again
        if self._settling is not None:
            left.append(self._settling)
            self._settling = None
        if not left:
            return
        # An earlier error of this run named a later drop: its reset would skip these.
        left = sorted({*left, *self._named})
        target = min(left)
        if self._moved_back is not None and self._moved_back <= target:
            return
        where = f"{self.stream} {self.consumer}"
        if self.options.bind:
            log.error(
                "%s/%s: stopped before settling seq %s, which the server stopped delivering: "
                "run `oncestream consumer reset %s --to-seq %d` before the next run",
                self.stream, self.consumer, left, where, target,
            )  # fmt: skip
            self._left_to_a_reset(left, target, "bind=True makes no consumer API call")
            return
        try:
            await reset_consumer(conn, self.stream, self.consumer, ResetTarget(seq=target))
        except (OncestreamError, OSError) as exc:
            log.error(
                "%s/%s: stopped before settling seq %s, which the server stopped delivering, "
                "and the reset back failed (%s): run `oncestream consumer reset %s --to-seq %d` "
                "before the next run",
                self.stream, self.consumer, left, exc, where, target,
            )  # fmt: skip
            self._left_to_a_reset(left, target, f"the reset back failed: {exc}")
            return
        self._moved_back = target
        log.warning(
            "%s/%s: stopped before settling seq %s, which the server stopped delivering: moved "
            "back to seq %d, the next run delivers them again",
            self.stream, self.consumer, left, target,
        )  # fmt: skip
        if self._named:  # the run's error named a reset that would now skip some of them
            self.fail(
                MaxDeliverError(
                    f"the server stopped delivering {self.stream} seq "
                    f"{', '.join(map(str, left))} (consumer {self.stream}/{self.consumer} "
                    f"max_deliver) and this run did not apply them: the consumer was moved "
                    f"back to seq {target}. Fix: {_fix(self.stream, self.consumer)}; then "
                    "start the Processor again (no reset needed; the messages after them "
                    "that were applied are in the ledger: acked, not applied again)",
                    stream=self.stream,
                    consumer=self.consumer,
                    seqs=tuple(left),
                )
            )

    def _left_to_a_reset(self, seqs: list[int], target: int, why: str) -> None:
        """End the run failed: what the server dropped comes back only by a reset.

        A stop may come while a drop waits to be settled; returning as if all went
        well would leave the message out of the next run too. ``seqs`` includes what
        an earlier error of the run named, so this one replaces it.
        """
        self.fail(
            MaxDeliverError(
                f"the run stopped before settling {self.stream} seq "
                f"{', '.join(map(str, seqs))}, which the server stopped delivering "
                f"(consumer {self.stream}/{self.consumer} max_deliver), and the consumer "
                f"was not moved back ({why}): run `oncestream consumer reset {self.stream} "
                f"{self.consumer} --to-seq {target}` before the next run"
                + (
                    ""
                    if self.bound.dlq_subject
                    else f"; so that it does not happen again: {_fix(self.stream, self.consumer)}"
                ),
                stream=self.stream,
                consumer=self.consumer,
                seqs=tuple(seqs),
            )
        )

    def forgotten(self, seq: int, attempts: int) -> None:
        """``seq``, handed back after ``attempts`` failures, is past the consumer's ack
        floor although this run never finished it (:mod:`._handedback`): settle it as a
        message the server stopped delivering."""
        self._drops.put_nowait((seq, attempts, True))

    def _queued(self) -> list[tuple[int, int, bool]]:
        """Every drop waiting in the queue (taken out of it)."""
        taken = []
        while not self._drops.empty():
            taken.append(self._drops.get_nowait())
        return taken

    def _on_advisory(
        self, _subject: bytes, _reply: bytes, data: bytes | bytearray, _headers: bytes | None
    ) -> None:
        try:
            event = json.loads(bytes(data))
            seq, deliveries = int(event["stream_seq"]), int(event.get("deliveries", 0))
        except (ValueError, KeyError, TypeError):
            log.warning("unreadable max-deliveries advisory: %r", bytes(data)[:200])
            return
        self._drops.put_nowait((seq, deliveries, False))

    async def _deliver_again(self, conn: Connection, seq: int) -> str:
        """Move the consumer back to ``seq``, a message the server dropped and that could not
        be settled (its dead letter refused: the dead-letter stream full, say): the way back.

        Past its ``max_deliver`` the server forgets the message (its ack floor moves past
        it, nothing is pending), and neither the ledger nor the dead-letter stream holds
        it: a plain restart would find nothing to do. Moved back, the consumer holds it
        again, as the next message to deliver: the restart delivers it afresh, and the
        messages after it that were applied are in the ledger (acked, not applied again).
        Pruning has not passed it: a round prunes up to the ack floor seen
        ``prune_grace`` ago (120 s by default), below ``seq`` until the drop a moment ago.
        Never moved forward: after a move back to an earlier drop, a later one is left
        to that (both come again).

        Returns:
            What the error says to do: restart once there is room, or the reset to run
            (``bind``, a server without consumer reset, or the reset failed).
        """
        where = f"{self.stream} {self.consumer}"
        room = (
            f"make room in the dead-letter stream {self.options.dead_letter_stream} (its "
            f"limits: `oncestream stream info {self.options.dead_letter_stream}`)"
            if self.bound.dlq_subject
            else "fix what refused it"
        )
        manual = (
            f"Way back: {room}, then `oncestream consumer reset {where} --to-seq {seq}` before "
            "the Processor runs again (the messages after it that were applied are in the "
            "ledger: acked, not applied again); a plain restart would not deliver it again"
        )
        if self.options.bind:
            return manual
        if self._moved_back is not None and self._moved_back <= seq:
            # Never forward: a second drop settled after the first must not skip that one.
            return (
                f"The consumer was moved back to seq {self._moved_back}, before it: {room} and "
                "start the Processor again; it delivers both again"
            )
        try:
            await reset_consumer(conn, self.stream, self.consumer, ResetTarget(seq=seq))
        except OncestreamError as exc:
            log.error(
                "%s/%s: the reset back to seq %d failed: %s", self.stream, self.consumer, seq, exc
            )
            return f"{manual} (the Processor's own reset failed: {exc})"
        self._moved_back = seq
        log.warning(
            "%s/%s: moved back to seq %d, which the server dropped: a restart delivers it again",
            self.stream,
            self.consumer,
            seq,
        )
        return (
            f"The consumer was moved back to seq {seq} (a consumer reset): {room} and start the "
            f"Processor again; it delivers seq {seq} again (the messages after it that were "
            "applied are in the ledger: acked, not applied again)"
        )

    async def _dropped(
        self, conn: Connection, seq: int, deliveries: int, *, forgot: bool = False
    ) -> None:
        """Settle one message the server will not deliver again (``forgot``: one this run
        handed back, which the consumer's ack floor moved past: counted and reported only
        when it was not finished by another instance meanwhile)."""
        if not forgot and seq not in self._counted:  # once, however often it is retried
            self._counted.add(seq)
            self.stats.exhausted += 1
        why = self._why(deliveries, forgot)
        try:
            stored = await get_message(conn, self.stream, seq=seq)
        except MessageNotFound:
            log.error(
                "%s seq %d: the server stopped delivering it %s, and it is no longer in the "
                "stream",
                self.stream, seq, why,
            )  # fmt: skip
            if forgot:  # never finished, and gone (a purge, the stream's limits)
                self.stats.exhausted += 1
                self.stats.forgotten += 1
            await self.acks.dropped(seq)  # ack policy all: the acks go on past it
            self.settled()
            return
        msg = Message(stored.subject, "", stored.data, None, raw_headers=stored.raw_headers)
        target = replay_target(stored.raw_headers)
        if target is not None and target[:2] != (self.stream, self.consumer):
            # A replayed dead letter for another consumer: nothing to apply here.
            self.stats.replays_skipped += 1
            await self.acks.dropped(seq)
            self.settled()
            return
        if target is not None:  # a replayed copy for this consumer: its own key (_replayed)
            entry = replay_entry(*target)
        else:
            key = msg_id_key(stored.raw_headers) if self.applier.ledger.key == "msg_id" else None
            entry = LedgerEntry(self.stream, seq, key)
        while True:  # bounded by ``moved`` (a row that keeps moving stops the run)
            try:
                settled = await self._settle(msg, seq, entry, deliveries, why, forgot=forgot)
                break
            except RegistryMoved as moved:  # rolled back: nothing recorded or dead-lettered
                if not await self.moved(moved, [msg]):
                    return  # refused: the run stops (``moved`` says why); not settled
        if settled is None:  # forgotten, and no dead-letter stream: delivered again
            await self._forgotten_back(conn, seq, deliveries)
        elif settled:
            await self.acks.dropped(seq)  # with ack policy all the ack may move past it
        self.settled()

    def _why(self, deliveries: int, forgot: bool) -> str:
        """Why the server stopped delivering a message, for logs, letters and errors."""
        if forgot:
            return (
                f"after {deliveries} failed attempts: consumer {self.stream}/{self.consumer}'s "
                "ack floor moved past it while it waited for its redelivery (after a server "
                "restart; nats-io/nats-server#5727)"
            )
        return f"after {deliveries} deliveries (consumer {self.stream}/{self.consumer} max_deliver)"

    def _told_forgotten(self, seq: int, attempts: int) -> None:
        self.stats.exhausted += 1
        self.stats.forgotten += 1
        log.error(
            "%s/%s: the server stopped delivering seq %d %s; settling it as a dropped message",
            self.stream, self.consumer, seq, self._why(attempts, True),
        )  # fmt: skip

    async def _forgotten_back(self, conn: Connection, seq: int, attempts: int) -> None:
        """A forgotten message and no dead-letter stream: the consumer is moved back to it
        and the run fails saying so (it delivers the message again when started again)."""
        back = await self._deliver_again(conn, seq)
        self._named.append(seq)
        self.fail(
            MaxDeliverError(
                f"the server stopped delivering {self.stream} seq {seq} "
                f"{self._why(attempts, True)}; it was not applied. {back}",
                stream=self.stream,
                consumer=self.consumer,
                seqs=(seq,),
            )
        )

    async def _settle(
        self,
        msg: Message,
        seq: int,
        entry: LedgerEntry,
        deliveries: int,
        why: str,
        *,
        forgot: bool = False,
    ) -> bool | None:
        """One transaction for a dropped message (stream sequence ``seq``, ledger key
        ``entry``, dropped ``why``); True when it is finished, None when it was
        ``forgot``-ten and there is no dead-letter stream (it must be delivered again).

        Raises:
            RegistryMoved: the registry check in the transaction refused it.
        """
        try:
            async with claiming(self.applier, entry, msg) as claimed:
                if not claimed.fresh and forgot:  # finished by another instance of it
                    log.debug("%s seq %d was applied by another instance", self.stream, seq)
                    return True
                if forgot and seq not in self._counted:  # once, however often it is retried
                    self._counted.add(seq)
                    self._told_forgotten(seq, deliveries)
                if not claimed.fresh:
                    self.unrecorded.recorded(seq)
                    log.warning(
                        "%s seq %d: the server stopped delivering it %s, after it was applied "
                        "(its ack came too late): nothing lost",
                        self.stream, seq, why,
                    )  # fmt: skip
                    return True
                if not self.bound.dlq_subject:
                    if forgot:
                        return None
                    self._lost(seq, deliveries)
                    return False
                # Recorded with the dead letter: a copy still buffered is not applied too.
                text = f"MaxDeliverError: the server stopped delivering it {why}"

                def letter() -> Awaitable[bool]:
                    return self.acks.dead_letter(msg, seq, deliveries, text)

                # A replayed copy's key is the message's: recorded, the next replay of its
                # letter (which names the message) would be suppressed, never applied. A
                # letter stored before a failed commit is not published again.
                if entry.stream == self.stream:
                    stored = await self.unrecorded.settle(seq, letter, claimed)
                else:
                    stored = await letter()
                if not stored:
                    refused = self.acks.dead_letter_error
                    raise OncestreamError(
                        "the dead-letter publish was not confirmed"
                        + (f" ({refused})" if refused else "")
                    )
        except Superseded:  # a standby: the active instance settles it
            return False
        return True

    def _lost(self, seq: int, deliveries: int) -> None:
        where = f"{self.stream}/{self.consumer}"
        log.error(
            "%s seq %d: the server stopped delivering it after %d deliveries (consumer %s "
            "max_deliver) and it was not applied",
            self.stream,
            seq,
            deliveries,
            where,
        )
        # One error names every drop lost so far: a reset to a later one would skip the
        # earlier (this error replaces the run's first, see ConsumerLoop._fail).
        self._named.append(seq)
        seqs = sorted(set(self._named))
        which = (
            f"seq {seq} after {deliveries} deliveries"
            if len(seqs) == 1
            else (f"seq {', '.join(map(str, seqs))}")
        )
        self.fail(
            MaxDeliverError(
                f"the server stopped delivering {self.stream} {which} (consumer {where} "
                f"max_deliver {deliveries}) and no dead-letter stream is configured: "
                f"{'it was' if len(seqs) == 1 else 'they were'} not applied. Fix: "
                f"{_fix(self.stream, self.consumer)}; then `oncestream consumer reset "
                f"{self.stream} {self.consumer} --to-seq {seqs[0]}` before the Processor runs "
                "again (the messages after it that were applied are in the ledger: acked, "
                "not applied again)",
                stream=self.stream,
                consumer=self.consumer,
                max_deliver=deliveries,
                seqs=tuple(seqs),
            )
        )
