"""Applying one durable consumer exactly once: set up, pull, apply in a ledger transaction, ack.

:class:`ConsumerLoop` keeps the order of the steps; each step is a part of its
own, built once the consumer is bound, with a frozen record of it
(:class:`~oncestream.process._bound.BoundConsumer`) and its collaborators, and
never written into afterwards:

- :class:`~oncestream.process._applying.Applier`: one ledger transaction per batch;
- :class:`~oncestream.process._acking.Acknowledger`: acks, naks, dead letters,
  in-progress acks, ack policy ``explicit`` or ``all`` (its frontier);
- :class:`~oncestream.process._maxdeliver.DeliveryLimit` and
  :class:`~oncestream.process._maxdeliver.DroppedMessages`: the consumer's
  ``max_deliver``;
- :class:`~oncestream.process._pinning.PinnedGroup`: a pinned priority group's
  fence, takeover and demotion; :class:`~oncestream.process._ackall.AckAllOwner`:
  ack policy ``all``'s fence and resets;
- :class:`~oncestream.process._registry.Registry`: the consumer in the ledger's registry.

It shares its connection and its ledger's calls (:class:`LedgerCalls`) with its
owner: a :class:`~oncestream.Processor` runs one, and a process applying several
consumers on one ledger (the partitions a member of a group owns) runs one per
consumer on the same connection and ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from dataclasses import dataclass

from .._connection import Connection
from .._errors import (
    JetStreamError,
    LedgerError,
    LedgerUnusable,
    MaxDeliverError,
    OncestreamError,
    OperationTimeout,
)
from .._headers import SCHEDULE, msg_id_key
from .._logthrottle import LogThrottle
from .._message import Message
from ..ledger import LedgerEntry
from ..read import MessageStream
from ..tracing._internal import Tracer
from ._ackall import AckAllOwner, reanchor, watch_ack_floor
from ._ackfrontier import AckFrontier
from ._acking import Acknowledger
from ._applying import Applier, BatchHandler, Handler
from ._bound import BoundConsumer
from ._deadrecord import LetterRecorder, LetterStored, Unrecorded
from ._handedback import HandedBack, HandedBackRecord, watch_forgotten
from ._ledgercalls import LedgerCalls
from ._maxdeliver import DeliveryLimit, DroppedMessages
from ._options import ProcessorOptions, ProcessorStats
from ._pinning import Fence, PinnedGroup, Superseded, require_reset
from ._pulls import Pulls
from ._reclaim import reclaim_at_start
from ._registry import Registry, RegistryMoved
from ._replayed import REPLAY_FOR_KEY, replay_entry, replay_target
from ._setup import FloorHistory, consumer_filters, setup_consumer

__all__ = ["ConsumerLoop"]

log = logging.getLogger(__name__)

_SCHEDULE = b"\r\n" + SCHEDULE.encode() + b":"
#: LedgerEntry(stream, seq) at half the cost of the NamedTuple's keyword-capable __new__.
_entry = functools.partial(tuple.__new__, LedgerEntry)


@dataclass(frozen=True)
class _Parts:
    """The parts, built once the consumer is bound."""

    bound: BoundConsumer
    applier: Applier
    acks: Acknowledger
    limit: DeliveryLimit
    #: What refuses a batch of an instance that may not apply (None: nothing does).
    fence: Fence | None
    #: Ack policy ``all``: the consumer's resets (None: ack policy ``explicit``).
    owner: AckAllOwner | None
    #: A pinned priority group's takeovers (None: not pinned).
    pins: PinnedGroup | None
    #: The letters stored whose ledger row is owed (their handler is not called again).
    unrecorded: Unrecorded


class ConsumerLoop:
    """Applies each message of one durable pull consumer exactly once, through a ledger.

    Args:
        conn: the connection (shared; not closed here).
        calls: the ledger's calls (shared; the ledger is opened and closed by the owner).
        stream, consumer: what is applied (names checked by the owner).
        handler: ``handler(msg, tx)``, or with ``batched`` ``batch_handler(msgs, tx)``.
        options: the Processor's options.
        stats: counters to update.
        progress: set after every batch and every change of role.
        tracer: spans of each message's outcome (None: no tracing).
        applier_type, acknowledger_type: the classes of those parts (the chaos
            tests' crashing Processor swaps them).

    Example::

        loop = ConsumerLoop(conn, calls, "ORDERS", "billing", handle, options=opts,
                            stats=stats, progress=asyncio.Event())
        try:
            await loop.run(running)  # until loop.request_stop()
        finally:
            await loop.close()
        if loop.fatal is not None:  # closing may have named more
            raise loop.fatal
    """

    def __init__(
        self,
        conn: Connection,
        calls: LedgerCalls,
        stream: str,
        consumer: str,
        handler: Handler | BatchHandler,
        *,
        batched: bool = False,
        options: ProcessorOptions,
        stats: ProcessorStats,
        progress: asyncio.Event,
        tracer: Tracer | None = None,
        applier_type: type[Applier] = Applier,
        acknowledger_type: type[Acknowledger] = Acknowledger,
    ) -> None:
        self.conn = conn
        self.calls = calls
        self.stream, self.consumer = stream, consumer
        self.options = options
        self.stats = stats
        self._handler = handler
        self._batched = batched
        self._progress = progress
        self._tracer = tracer
        self._applier_type, self._acknowledger_type = applier_type, acknowledger_type
        self._msg_ids = calls.ledger.key == "msg_id"
        self._registry = Registry(calls, stream, consumer)
        self._pulls = Pulls(conn, stream, consumer, options)
        self._floors = FloorHistory(options.prune_grace)
        self._pull_log = LogThrottle(log)  # repeated pull timeouts: first 5, then a summary
        self._tasks: list[asyncio.Task[None]] = []
        self._stop_requested = False
        #: What ends the run once it has stopped (a message dropped by max_deliver).
        self._fatal: OncestreamError | None = None
        #: Built once the consumer is bound (:meth:`run`).
        self._parts: _Parts | None = None

    # -- what the owner reads -------------------------------------------------------

    @property
    def ack_wait(self) -> float:
        """The consumer's ack wait in seconds (the configured one until it is set up)."""
        return self._parts.bound.ack_wait if self._parts is not None else self.options.ack_wait

    @property
    def pins(self) -> PinnedGroup | None:
        """The pinned group's part (None: not pinned, or not set up yet)."""
        return self._parts.pins if self._parts is not None else None

    @property
    def pull(self) -> MessageStream | None:
        """The pull being read (None before the consumer is set up)."""
        return self._pulls.current

    def stopping(self) -> bool:
        """Whether a stop was requested."""
        return self._stop_requested

    def request_stop(self) -> None:
        """Finish the in-flight batch and return from :meth:`run` (signal-handler safe)."""
        self._stop_requested = True
        self._pulls.halt()

    @property
    def fatal(self) -> OncestreamError | None:
        """The error that ends the run, if any (also one found while closing)."""
        return self._fatal

    def _fail(self, error: OncestreamError) -> None:
        """End the run with ``error`` (the in-flight batch is finished first).

        The first error is kept, but for a :class:`MaxDeliverError` naming every
        dropped message an earlier one named and more: its way back covers them all.
        """
        first = self._fatal
        if first is None or (
            isinstance(first, MaxDeliverError)
            and isinstance(error, MaxDeliverError)
            and set(first.seqs) < set(error.seqs)
        ):
            self._fatal = error
        self.request_stop()

    # -- the steps ------------------------------------------------------------------

    async def run(self, running: asyncio.Event) -> None:
        """Set the consumer up, build the parts, apply until :meth:`request_stop`.

        ``running`` is set once it pulls. The caller awaits :meth:`close` afterwards,
        whatever happened, then raises :attr:`fatal` if set: the error that ended the
        run, which closing may replace (a drop a stop left unsettled).

        Raises:
            As :meth:`oncestream.Processor.run` (the ledger's opening aside), while
            setting up; what ends the run later is :attr:`fatal`.
        """
        conn, opts, registry = self.conn, self.options, self._registry
        if opts.pinned:
            require_reset(conn, "a pinned priority group")
        if not opts.bind:  # refused before it creates the consumer
            await registry.check(conn, opts.filter_subject)
        bound = await setup_consumer(conn, self.stream, self.consumer, opts)
        if opts.bind:
            await registry.bind()
        else:
            await registry.register(conn)
        owner = pins = None
        held = HandedBack()  # shared: a demotion forgets what this instance handed back
        if opts.ack_all and not opts.pinned:
            owner = AckAllOwner(
                bound,
                conn,
                self.calls,
                self._pulls,
                self.stats,
                fail=self._fail,
                stopping=self.stopping,
            )
            await owner.start()
            self._tasks.append(asyncio.create_task(owner.watch_floor()))
        elif opts.pinned:
            # Ack policy all in a pinned group: the pin's takeover is the fence and the
            # reset that numbers deliveries from 1 (_ackall's owner is not needed).
            pins = PinnedGroup(
                bound,
                conn,
                self.calls,
                self._pulls,
                self.stats,
                stopping=self.stopping,
                progress=self._progress.set,
                frontier=AckFrontier() if opts.ack_all else None,
                held=held,
            )
            if pins.frontier is not None:
                active = functools.partial(_is_active, pins)
                watch = watch_ack_floor(conn, bound, pins.frontier, active)
                self._tasks.append(asyncio.create_task(watch))
        fence: Fence | None = owner or pins
        frontier = owner.frontier if owner is not None else pins.frontier if pins else None
        applier = self._applier_type(
            bound,
            self.calls,
            self._handler,
            self.stats,
            batched=self._batched,
            fence=fence,
            registered=registry.verify,
            tracer=self._tracer,
        )
        limit = DeliveryLimit(bound, conn)
        unrecorded = Unrecorded()
        acks = self._acknowledger_type(
            bound,
            conn,
            self.stats,
            limit=limit,
            frontier=frontier,
            tracer=self._tracer,
            stopping=self.stopping,
            buffered=self._pulls.buffered_replies,
            held=held,
            recorder=LetterRecorder(applier, unrecorded),
        )
        drops = DroppedMessages(
            bound,
            conn,
            self.stats,
            applier,
            acks,
            fail=self._fail,
            moved=lambda moved, msgs: registry.moved(conn, moved, msgs, self._fail),
            settled=self._progress.set,
            unrecorded=unrecorded,
        )
        self._parts = parts = _Parts(bound, applier, acks, limit, fence, owner, pins, unrecorded)
        await drops.subscribe()  # before the first pull: no drop goes unseen
        self._tasks.append(asyncio.create_task(drops.watch()))
        if not opts.bind:  # bind reads no consumer info: a forgotten nak goes unseen
            forgotten = watch_forgotten(
                conn,
                self.stream,
                self.consumer,
                acks.held,
                drops.forgotten,
                self._handed_back_record(pins),
            )
            self._tasks.append(asyncio.create_task(forgotten))
        # Ack policy all resets the consumer itself (AckAllOwner.start).
        if not (opts.pinned or opts.bind or opts.ack_all):
            self.stats.reclaimed += await reclaim_at_start(
                conn, self.stream, self.consumer, bound.ack_wait
            )
        conn.on_reconnect(acks.unsent.reconnected)
        pull = await self._pulls.begin()
        self._tasks.append(asyncio.create_task(acks.keep_alive()))
        if opts.prune_interval > 0 and not opts.bind:
            self._tasks.append(asyncio.create_task(self._prune_loop(parts)))
        if not opts.bind:  # pruning or not: a narrowing edit is recorded
            self._tasks.append(asyncio.create_task(registry.watch(conn, self._fail)))
        running.set()
        await self._loop_batches(pull, parts)

    async def _loop_batches(self, pull: MessageStream, parts: _Parts) -> None:
        batch = self.options.batch
        pins, acks = parts.pins, parts.acks
        while not self._stop_requested:
            pull = self._pulls.current or pull
            try:
                msgs = await pull.next_batch(batch, timeout=1.0)
            except OperationTimeout as exc:
                self.stats.heartbeat_errors += 1
                self._pull_log.log(logging.WARNING, str(exc), "%s", exc)
                continue
            # Delivered under a pin this instance does not apply under: a new pin (it
            # took over) or none any more (the pin moved on).
            if pins is not None and await pins.follow(pull):
                continue
            if msgs or acks.gap:
                await self._process(msgs, parts)

    async def _process(self, msgs: list[Message], parts: _Parts) -> None:
        began = time.perf_counter()
        registry = self._registry
        acks = parts.acks
        # No registered filters (every subject, or none recorded): no subject list.
        try:
            if registry.filters and not await registry.admit(
                self.conn, [m.subject for m in msgs], self._fail
            ):
                return  # the filter edited to overlap a neighbour: neither applied nor acked
        except LedgerUnusable:
            await acks.nak(msgs)  # nothing was applied: let the next worker have them
            raise
        except LedgerError as exc:
            await self._hand_back(msgs, acks, exc)
            return
        if not acks.admits(msgs):  # only ack policy all refuses a batch (a gap)
            await self._reanchor(parts)
            return
        started_ns = time.time_ns() if self._tracer is not None else 0
        by_seq: dict[int, Message] = {}
        extras: list[Message] = []
        #: Delivered again with their letter stored and their row owed: not handled.
        owed: dict[int, Message] = {}
        unrecorded = parts.unrecorded
        #: Replayed copies for this consumer: their sequence -> their ledger key.
        replays: dict[int, LedgerEntry] = {}
        for msg in msgs:
            try:
                seq = msg.seq
            except JetStreamError:
                log.error("dropping a message with a non-JetStream reply subject %r", msg.reply)
                continue
            if seq in by_seq or seq in owed:
                extras.append(msg)  # the same message delivered twice in one batch
            elif unrecorded and seq in unrecorded:
                owed[seq] = msg
            elif msg.raw_headers and _SCHEDULE in msg.raw_headers:
                # A stored message schedule (e.g. `dlq replay --in`): the server publishes
                # the message it schedules when it fires; the schedule itself is not data.
                extras.append(msg)
                self.stats.schedules_skipped += 1
            elif msg.raw_headers and REPLAY_FOR_KEY in msg.raw_headers:
                # A dead letter's replayed copy: applied by the consumer it names only.
                target = replay_target(msg.raw_headers)
                if target is None or target[:2] == (self.stream, self.consumer):
                    by_seq[seq] = msg
                    if target is not None:
                        replays[seq] = replay_entry(*target)
                else:
                    extras.append(msg)
                    self.stats.replays_skipped += 1
                    log.debug(
                        "%s seq %d is a replayed dead letter of %s/%s seq %d: acked, not applied",
                        self.stream, seq, target[0], target[1], target[2],
                    )  # fmt: skip
            else:
                by_seq[seq] = msg
        seqs = sorted(by_seq)
        ordered = [by_seq[s] for s in seqs]
        stream = self.stream
        if self._msg_ids:
            entries = [
                LedgerEntry(stream, s, msg_id_key(m.raw_headers))
                for s, m in zip(seqs, ordered, strict=True)
            ]
        else:
            entries = [_entry((stream, s, None)) for s in seqs]
        if replays:  # keyed by the message it replays: applied once, however often replayed
            for i, s in enumerate(seqs):
                if s in replays:
                    entries[i] = replays[s]
        lettered: list[tuple[Message, BaseException]] = [
            (owed[s], LetterStored()) for s in sorted(owed)
        ]
        if lettered and not ordered:  # nothing for the handler: no batch transaction
            await acks.settle([], extras, lettered)
            self._progress.set()
            return
        acks.begin_batch(ordered, started_ns)
        try:
            while True:
                try:
                    outcome = await parts.applier.apply(
                        entries, ordered, started_ns, replays=bool(replays)
                    )
                    break
                except RegistryMoved as moved:  # rolled back: nothing applied
                    try:
                        if not await registry.moved(self.conn, moved, ordered, self._fail):
                            return  # refused: neither applied nor acked
                    except LedgerError as exc:
                        if isinstance(exc, LedgerUnusable):
                            raise  # nak'ed below
                        await self._hand_back(msgs, acks, exc)
                        return
        except LedgerUnusable:
            await acks.nak(ordered)  # nothing was applied: let the next worker have them
            raise
        except Superseded as exc:
            assert parts.fence is not None  # only a fence supersedes
            parts.fence.superseded(exc)
            return
        finally:
            acks.end_batch()
        if outcome is None:  # the ledger kept failing
            await acks.give_back(ordered + [m for m, _ in lettered], extras)
            return
        done, failures = outcome
        if lettered:
            failures = failures + lettered
        self.stats.batches += 1
        registry.applied()  # a row that moved was absorbed: count again
        await acks.settle(done, extras, failures)
        if self.stats.observers:
            self.stats.observe("batch", time.perf_counter() - began)
        self._progress.set()

    async def _hand_back(self, msgs: list[Message], acks: Acknowledger, exc: LedgerError) -> None:
        """The registry could not be read or written for the batch (the database failing:
        a restart, a lost session): it goes back for a redelivery in a second, neither
        applied nor acked, as when the ledger keeps failing; it is checked again then."""
        self.stats.ledger_errors += 1
        log.warning(
            "%s/%s: the ledger's registry cannot be checked (%s); handing %d messages back "
            "for redelivery",
            self.stream,
            self.consumer,
            exc,
            len(msgs),
        )
        await acks.nak(msgs, delay=1.0)
        if acks.frontier is not None:
            # Ack policy all: what is handed back leaves a gap below what one ack would
            # cover; the next batch resets the consumer to its ack floor instead.
            acks.frontier.interrupt("a batch was handed back (the ledger failed)")
        self._progress.set()  # the stats changed

    async def _reanchor(self, parts: _Parts) -> None:
        """Ack policy all, deliveries no longer contiguous: reset the consumer (a pinned
        group's standby leaves that to the takeover that makes it active)."""
        if parts.owner is not None:
            await parts.owner.reanchor(parts.acks)
            return
        pins = parts.pins
        assert pins is not None and pins.frontier is not None
        if pins.active_pin is None:
            pins.frontier.restart()
            return
        await reanchor(parts.bound, self.conn, self._pulls, pins.frontier, parts.acks,
                       self.stats, stopping=self.stopping, pin=pins.active_pin)  # fmt: skip

    def _handed_back_record(self, pins: PinnedGroup | None) -> HandedBackRecord:
        """The ledger's record of what the active instance handed back (_handedback), of
        the consumer's present life (its creation time: one deleted and created again
        under its name starts with an empty record)."""
        conn, calls, ledger = self.conn, self.calls, self.calls.ledger
        stream, consumer = self.stream, self.consumer
        life = ""

        async def read() -> dict[int, int]:
            nonlocal life
            life = str((await conn.consumer_info(stream, consumer)).get("created") or "")
            recorded: dict[int, int] = await calls.db(ledger.handed_back, stream, consumer, life)
            return recorded

        async def write(noted: dict[int, int], finished: list[int]) -> None:
            await calls.db(ledger.record_handed_back, stream, consumer, life, noted, finished)

        active = functools.partial(_is_active, pins) if pins is not None else _always
        return HandedBackRecord(read, write, active)

    async def _prune_loop(self, parts: _Parts) -> None:
        conn, opts = self.conn, self.options
        while True:
            await asyncio.sleep(opts.prune_interval)
            try:
                info = await conn.consumer_info(self.stream, self.consumer)
                unsafe = parts.limit.note(info.get("config") or {})
                if unsafe is not None:
                    self._fail(unsafe)
                filters = consumer_filters(info.get("config") or {})
                if not await self._registry.recheck(conn, filters, self._fail):
                    return  # the filter edited to overlap a neighbour
                if parts.pins is not None and not _is_active(parts.pins):
                    continue  # the active instance prunes: only it knows what it handed back
                if not parts.acks.held.loaded:
                    continue  # what an earlier instance handed back is not read yet
                floor = int(info.get("ack_floor", {}).get("stream_seq", 0))
                up_to = self._floors.prunable(floor, time.monotonic(), filters)
                # Never over a message handed back and not finished: if the server forgot
                # it (its ack floor moved past it), its settling must find it unapplied.
                held = parts.acks.held.lowest()
                if held:
                    up_to = min(up_to, held - 1)
                up_to, others = await self._registry.limit(conn, floor, up_to)
                if up_to:
                    # The span deleted joins every registered consumer's prune horizon.
                    prune = self._registry.prune_call(filters, others)
                    deleted = await self.calls.db(prune, self.stream, up_to, opts.prune_limit)
                    self.stats.pruned += deleted
                    self._progress.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # pruning is best effort; the next round retries
                log.debug("ledger pruning skipped: %s", exc)

    async def close(self) -> None:
        """Stop the tasks and the pull; hand back what was pulled and not started.

        Waits for outstanding ack confirmations first, and writes the acks and naks
        out (a flush) while the server is reachable; when it is not, logs what
        stays unacknowledged (the server redelivers it; the ledger suppresses the
        applied ones).
        """
        parts = self._parts
        if parts is not None:
            self.conn.remove_reconnect_listener(parts.acks.unsent.reconnected)
            await parts.acks.drain()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        pull = self._pulls.current
        if pull is None or parts is None:
            return
        pull.halt()
        await pull.stop()
        leftover = pull.take_unprocessed()
        conn = self.conn
        reachable = conn.is_connected
        if reachable:
            if leftover:
                # Hand unprocessed messages back now instead of after ack_wait.
                await parts.acks.nak(leftover)
            try:
                await conn.flush(timeout=2)  # the acks and naks written reached the server
            except Exception:
                reachable = False  # it went away unnoticed so far
        if not reachable:
            log.warning("%s", parts.acks.unsent.report(len(leftover), parts.bound.ack_wait))


def _is_active(pins: PinnedGroup) -> bool:
    return pins.active_pin is not None


def _always() -> bool:
    return True
