"""Exactly-once processing of a JetStream consumer: :class:`Processor`.

A crash between "effect applied" and "ack sent" makes JetStream redeliver,
and the double ack only narrows that gap. The Processor closes it with a
ledger: for every pulled batch it opens one database transaction, records
each message's key (``(stream, seq)`` or its ``Nats-Msg-Id``), calls
``handler(msg, tx)`` for the messages not recorded before so the handler
writes its effects through the same transaction, commits, and only then
acks. A redelivered message finds its key and is acked without being
applied again (a "suppressed redelivery").

This module pulls and orders batches; applying a batch (ledger transaction,
handler calls) lives in :mod:`oncestream.process._applying`, acknowledging it (acks,
the double ack of its tail, naks with backoff, dead letters, in-progress
acks) in :mod:`oncestream.process._acking`.

Example::

    def handle(msg, tx):
        tx.execute("INSERT INTO orders (body) VALUES (?)", (msg.data,))

    processor = Processor(conn, "ORDERS", "billing", handle, ledger=SQLiteLedger("billing.db"))
    await processor.run()          # until processor.request_stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
import uuid
from collections.abc import Callable

from .._connection import Connection, connect
from .._errors import (
    ConfigError,
    ConsumerNotFound,
    JetStreamError,
    LedgerError,
    LedgerUnusable,
    OncestreamError,
    OperationTimeout,
    StreamNotFound,
)
from .._headers import SCHEDULE, msg_id_key
from .._logthrottle import LogThrottle
from .._message import Message
from .._names import check_consumer_name, check_stream_name
from .._options import ConnectOptions
from .._retry import retrying
from ..ledger import Ledger, LedgerEntry
from ..read import MessageStream, PullOptions
from ..streams import require_server
from ..streams._internal import RESET_SINCE
from ..tracing._internal import tracer
from ._ackfrontier import AckFrontier
from ._acking import Acknowledger
from ._applying import Applier, BatchHandler, Handler
from ._maxdeliver import DeliveryLimit
from ._options import ProcessorOptions, ProcessorStats
from ._pinning import (
    FenceBusy,
    OwnerCheck,
    Superseded,
    fence_name,
    is_lock_wait,
    require_reset,
    reset_to_ack_floor,
    take_over,
)
from ._reclaim import reclaim_at_start
from ._registry import Registry, RegistryMoved
from ._setup import FloorHistory, check_handler, consumer_filters, setup_consumer

__all__ = ["BatchHandler", "Handler", "Processor", "ProcessorOptions", "ProcessorStats"]

log = logging.getLogger("oncestream.processor")

_SCHEDULE = b"\r\n" + SCHEDULE.encode() + b":"
#: LedgerEntry(stream, seq) at half the cost of the NamedTuple's keyword-capable __new__.
_entry = functools.partial(tuple.__new__, LedgerEntry)
#: Seconds one attempt of a takeover's fence waits for the ledger's lock (at most; a
#: quarter of ``pinned_ttl`` when that is less, so the pin is kept before it expires).
_FENCE_WAIT = 1.0
#: Seconds before a takeover step that failed otherwise (a consumer reset) is tried again.
_RETRY_DELAY = 0.5
#: Seconds between the lines saying that a takeover (or opening the ledger) still waits.
_WAIT_NOTICE = 10.0


class Processor:
    """Apply each message of a durable pull consumer exactly once, through a ledger.

    Args:
        conn: a :class:`Connection` (not closed by the Processor) or
            :class:`ConnectOptions` (connected and closed by it).
        stream: the stream.
        consumer: durable pull consumer (created with explicit acks if absent).
        handler: ``handler(msg, tx)``, sync or async; writes effects with
            ``tx.execute(...)`` / ``tx.connection`` inside the ledger transaction.
            It must not ack; raising means "failed, retry later". It may be called
            again for the same message after a rollback, so effects outside ``tx``
            are at-least-once.
        ledger: :class:`~oncestream.SQLiteLedger` or :class:`~oncestream.PostgresLedger`.
        options: :class:`ProcessorOptions`.
        batch_handler: instead of ``handler``: ``batch_handler(msgs, tx)``, called once
            per transaction with its messages not applied before, in stream order,
            so effects can be written in bulk (``tx.executemany``). When it raises,
            the batch is rolled back and applied again one message per transaction
            (``batch_handler([msg], tx)``), so only the failing message is retried
            or dead-lettered.

    Raises:
        ConfigError: neither or both of ``handler`` and ``batch_handler``; a handler
            that cannot be called as ``f(msg, tx)``; a bad stream or consumer name.

    Example::

        async with await connect(opts) as conn:
            p = Processor(conn, "ORDERS", "billing", handle, ledger=SQLiteLedger("b.db"))
            await p.run()
    """

    #: The acknowledging part's class (the chaos tests' crashing Processor swaps it).
    _acknowledger_type: type[Acknowledger] = Acknowledger

    def __init__(
        self,
        conn: Connection | ConnectOptions,
        stream: str,
        consumer: str,
        handler: Handler | None = None,
        *,
        ledger: Ledger,
        options: ProcessorOptions | None = None,
        batch_handler: BatchHandler | None = None,
    ) -> None:
        if not stream or not consumer:
            raise ConfigError(f"stream and consumer are required, got {stream!r}/{consumer!r}")
        if (handler is None) == (batch_handler is None):
            raise ConfigError(
                "give the Processor either handler (called per message) or batch_handler "
                "(called per transaction with its fresh messages), not "
                + ("both" if handler is not None else "neither")
            )
        chosen: Handler | BatchHandler = handler or batch_handler  # type: ignore[assignment]
        check_handler(chosen, "handler" if handler is not None else "batch_handler")
        self._conn_arg = conn
        self.conn: Connection | None = conn if isinstance(conn, Connection) else None
        self.stream = check_stream_name(stream)
        self.consumer = check_consumer_name(consumer)
        self.handler = chosen
        self.ledger = ledger
        self.options = options or ProcessorOptions()
        self.stats = ProcessorStats()
        self._msg_ids = ledger.key == "msg_id"
        self._pull: MessageStream | None = None
        self._stop_requested = False
        self._running = asyncio.Event()
        self._done = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._floors = FloorHistory(self.options.prune_grace)
        self._progress = asyncio.Event()
        self._pull_log = LogThrottle(log)  # repeated pull timeouts: first 5, then a summary
        self._applier = Applier(ledger, chosen, self.stats, batched=batch_handler is not None)
        self._registry = Registry(self._applier, ledger, self.stream, self.consumer)
        self._acks = self._acknowledger_type(
            self.stream,
            self.consumer,
            self.options,
            self.stats,
            lambda: self._stop_requested,
            buffered=self._buffered_replies,
        )
        self._unsent = _UnsentAcks()
        self._applier.stream, self._applier.consumer = self.stream, self.consumer
        self._tracer = tracer(self.options.tracing, "processor")
        if self._tracer is not None:
            self._applier.tracer = self._acks.tracer = self._tracer
        #: Pinned priority group: the pin this instance applies under (None: standby).
        self.active_pin: str | None = None
        #: ``time.time()`` of the last takeover (0.0: never).
        self.took_over_at = 0.0
        #: What ends the run once it has stopped (a message dropped by max_deliver).
        self._fatal: OncestreamError | None = None
        #: ``time.monotonic()`` since when this instance holds the pin but cannot take
        #: over yet (the ledger locked by another process, the reset failing); 0.0: not.
        self.takeover_waiting_since = 0.0
        #: Ack policy ``all``: what one ack may cover (None: every message is acked).
        self._frontier: AckFrontier | None = None

    def _buffered_replies(self) -> list[str]:
        return self._pull.buffered_replies() if self._pull is not None else []

    @property
    def ack_wait(self) -> float:
        """The consumer's ack wait in seconds (the configured one until the consumer is set up)."""
        return self._acks.ack_wait

    # -- lifecycle -----------------------------------------------------

    async def run(self) -> ProcessorStats:
        """Process until :meth:`request_stop`; then finish the batch, commit, ack and return.

        Before it pulls, messages that an instance which is gone held unacknowledged
        are taken back at once, in stream order (:mod:`oncestream.process._reclaim`;
        not with ``bind``, which makes no consumer API calls, nor in a pinned group,
        whose takeover resets it the same way).

        Raises:
            ConfigError: the consumer exists with an incompatible config, or the ledger's
                registry refuses it (docs/processing.md, "One ledger, which consumers").
            ConsumerNotFound: it does not exist and ``create`` is off, or it was deleted
                (a 409, or confirmed by ``CONSUMER.INFO`` after a run of "no responders";
                a cluster partition or leader election is ridden through).
            StreamNotFound: the stream was deleted while processing (the server's
                409 "Consumer Deleted" is confirmed with ``STREAM.INFO``).
            NoResponders: none for ``unavailable_timeout`` (only when that is set).
            LedgerUnusable: the ledger's database is corrupt, not a database, read-only
                or cannot be opened (retrying cannot help; the batch is nak'ed).
            LedgerError: the ledger cannot be opened.
            MaxDeliverError: the consumer's ``max_deliver`` was set under this Processor
                without a dead-letter stream, or the server stopped delivering a message
                it had not applied (``ConfigError`` when the consumer has such a limit at start).
        """
        owned = self.conn is None
        if self.conn is None:
            assert isinstance(self._conn_arg, ConnectOptions)
            self.conn = await connect(self._conn_arg)
        conn = self.conn
        try:
            if not await self._open_ledger():
                return self.stats  # stopped while waiting for the ledger
            if self.options.pinned:
                require_reset(conn, "a pinned priority group")
                self._applier.fence = self._owner_check(None)
            if not self.options.bind:  # refused before it creates the consumer
                await self._registry.check(conn, self.options.filter_subject)
            await self._setup_consumer(conn)
            if self.options.bind:
                await self._registry.bind()
            else:
                await self._registry.register(conn)
            self._applier.registered = self._registry.verify
            if self.options.ack_all:
                await self._own_consumer(conn)
            self._acks.limit = limit = DeliveryLimit(self._acks, self._applier, self._fail)
            limit.moved = lambda moved, msgs: self._registry.moved(conn, moved, msgs, self._fail)
            await limit.subscribe()  # before the first pull: no drop goes unseen
            self._tasks.append(asyncio.create_task(limit.watch()))
            # Ack policy all resets the consumer itself (_own_consumer).
            if not (self.options.pinned or self.options.bind or self.options.ack_all):
                self.stats.reclaimed += await reclaim_at_start(
                    conn, self.stream, self.consumer, self.ack_wait
                )
            conn.on_reconnect(self._unsent.reconnected)
            self._pull = MessageStream(
                conn, self.stream, self.consumer, self.options.pull_options()
            )
            await self._pull.start()
            self._tasks.append(asyncio.create_task(self._acks.keep_alive()))
            if self.options.prune_interval > 0 and not self.options.bind:
                self._tasks.append(asyncio.create_task(self._prune_loop()))
            if not self.options.bind:  # pruning or not: a narrowing edit is recorded
                self._tasks.append(asyncio.create_task(self._registry.watch(conn, self._fail)))
            self._running.set()
            await self._loop_batches(self._pull)
            if self._fatal is not None:
                raise self._fatal
        finally:
            conn.remove_reconnect_listener(self._unsent.reconnected)
            await self._shutdown()
            if owned:
                await conn.close()
            self._done.set()
            self._progress.set()
        return self.stats

    def _fail(self, error: OncestreamError) -> None:
        """End the run with ``error`` (the in-flight batch is finished first)."""
        if self._fatal is None:
            self._fatal = error
        self.request_stop()

    def request_stop(self) -> None:
        """Ask :meth:`run` to finish the in-flight batch and return (signal-handler safe)."""
        self._stop_requested = True
        if self._pull is not None:
            self._pull.halt()

    async def stop(self) -> None:
        """Request a stop and wait until :meth:`run` has returned."""
        self.request_stop()
        if self._running.is_set() or self._pull is not None:
            await self._done.wait()

    async def wait_until(
        self, predicate: Callable[[ProcessorStats], bool], timeout: float = 30.0
    ) -> None:
        """Wait until ``predicate(stats)`` holds, re-checked after every batch.

        Raises:
            OperationTimeout: ``timeout`` seconds passed first, or the Processor stopped.
        """
        try:
            async with asyncio.timeout(timeout):
                while not predicate(self.stats):
                    if self._done.is_set():
                        raise OperationTimeout(f"processor stopped; stats {self.stats}")
                    self._progress.clear()
                    await self._progress.wait()
        except TimeoutError:
            raise OperationTimeout(f"condition not met in {timeout}s; stats {self.stats}") from None

    async def wait_caught_up(self, timeout: float = 30.0) -> ProcessorStats:
        """Wait until the consumer has nothing left: no message pending, none awaiting its ack.

        The server's counts (``CONSUMER.INFO``), asked after every batch and at
        least every second; the stats are returned. A Processor that finds
        nothing to do (a re-run: everything was applied before) returns at once.

        Raises:
            OperationTimeout: ``timeout`` seconds passed first, or the Processor stopped.
        """
        try:
            async with asyncio.timeout(timeout):
                await self._running.wait()
                assert self.conn is not None
                while True:
                    if self._done.is_set():
                        raise OperationTimeout(f"processor stopped; stats {self.stats}")
                    self._progress.clear()
                    info = await self.conn.consumer_info(self.stream, self.consumer)
                    if not info.get("num_pending") and not info.get("num_ack_pending"):
                        return self.stats
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(1.0):
                            await self._progress.wait()
        except TimeoutError:
            raise OperationTimeout(
                f"consumer {self.stream}/{self.consumer} not caught up in {timeout}s; "
                f"stats {self.stats}"
            ) from None

    async def wait_running(self, timeout: float = 10.0) -> None:
        """Wait until the consumer is set up and pulling."""
        async with asyncio.timeout(timeout):
            await self._running.wait()

    async def _shutdown(self) -> None:
        await self._acks.drain()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        pull = self._pull
        leftover: list[Message] = []
        if pull is not None:
            pull.halt()
            await pull.stop()
            leftover = pull.take_unprocessed()
        conn = self.conn
        reachable = conn is not None and conn.is_connected
        if reachable and conn is not None and pull is not None:
            if leftover:
                # Hand unprocessed messages back now instead of after ack_wait.
                await self._acks.nak(leftover)
            try:
                await conn.flush(timeout=2)  # the acks and naks written reached the server
            except Exception:
                reachable = False  # it went away unnoticed so far
        if not reachable and conn is not None and pull is not None:
            log.warning("%s", self._unsent.report(len(leftover), self._acks.ack_wait))
        with contextlib.suppress(Exception):
            await self._applier.db(self.ledger.close)

    async def _open_ledger(self) -> bool:
        """Open the ledger; False when a stop was requested while it was locked.

        A lock held by another process (an instance frozen inside a batch, long
        batches, a backup) is waited for, logged, never fatal: a standby that exits
        here would be missing when it is needed.
        """
        began, noticed = time.monotonic(), 0.0

        def locked(exc: BaseException) -> bool:
            return (
                isinstance(exc, LedgerError)
                and not isinstance(exc, LedgerUnusable)
                and is_lock_wait(exc)
            )

        async def waiting(exc: BaseException) -> None:
            nonlocal noticed
            now = time.monotonic()
            if not noticed or now - noticed >= _WAIT_NOTICE:
                noticed = now
                log.warning(
                    "%s/%s: cannot open the ledger yet, another process holds its lock "
                    "(%.0fs so far; an instance frozen inside a batch, or busy with a "
                    "long one?); waiting: %s",
                    self.stream,
                    self.consumer,
                    now - began,
                    exc,
                )
            self.stats.ledger_errors += 1

        try:
            await retrying(
                functools.partial(self._applier.db, self.ledger.open),
                budget=None,
                what="opening the ledger",
                retry_if=lambda exc: locked(exc) and not self._stop_requested,
                on_retry=waiting,
                delay=lambda _attempt: _RETRY_DELAY,
                log_retries=False,
            )
        except LedgerError as exc:
            if locked(exc) and self._stop_requested:
                return False
            raise
        return True

    # -- consumer --------------------------------------------------------

    async def _setup_consumer(self, conn: Connection) -> None:
        opts = self.options
        self._acks.conn = conn
        if opts.dead_letter_stream:
            self._acks.dlq_subject = (
                opts.dead_letter_subject or f"{opts.dead_letter_stream}.{self.stream}"
            )
        self._acks.ack_wait = await setup_consumer(conn, self.stream, self.consumer, opts)

    async def _own_consumer(self, conn: Connection) -> None:
        """Ack policy ``all``: fence the consumer in the ledger, then reset it to its ack floor.

        The fence makes a Processor that ran on it before roll its next batch back
        and stop (an ack of its would cover this one's deliveries); the reset
        redelivers what is unacknowledged now and numbers deliveries from 1, which
        is what :class:`AckFrontier` counts on.
        """
        require_server(
            conn, RESET_SINCE, "ack_policy 'all' (the Processor resets the consumer when it starts)"
        )
        check = OwnerCheck(self.ledger, f"{self.stream}/{self.consumer}/ack all", uuid.uuid4().hex)
        await self._applier.db(take_over, self.ledger, check.name, check.pin)
        self._applier.fence = check
        await reset_to_ack_floor(conn, self.stream, self.consumer)
        self._frontier = self._acks.frontier = frontier = AckFrontier()
        self._tasks.append(asyncio.create_task(self._watch_ack_floor(frontier)))

    async def _watch_ack_floor(self, frontier: AckFrontier) -> None:
        """Ack policy ``all``: reset again when an ack from before the last reset moved the
        consumer's delivery floor past every delivery since.

        A reset numbers deliveries from 1; an ack sent before it (a Processor that was
        superseded or frozen, or this one's own unconfirmed ones) that arrives after it
        sets the floor to its old, higher delivery sequence, and the server then ignores
        every ack and nak below that floor (consumer.go ``processAckMsg``,
        ``processNak``): nothing is lost, but everything waits for redeliveries.
        """
        assert self.conn is not None
        interval = min(max(self._acks.ack_wait / 4, 1.0), 10.0)
        while True:
            await asyncio.sleep(interval)
            try:
                info = await self.conn.consumer_info(self.stream, self.consumer)
            except OncestreamError as exc:
                log.debug("ack floor not checked: %s", exc)
                continue
            floor = int((info.get("ack_floor") or {}).get("consumer_seq", 0))
            delivered = int((info.get("delivered") or {}).get("consumer_seq", 0))
            if floor > delivered and not frontier.gap:
                frontier.gap = (
                    f"the consumer's ack floor is at delivery {floor}, past its last delivery "
                    f"{delivered} (an ack sent before the consumer was reset arrived after it)"
                )  # the batch loop resets within a second, idle or not

    async def _reanchor(self, why: str) -> None:
        """Deliveries stopped being contiguous: drop what is buffered and reset the consumer."""
        assert self.conn is not None and self._pull is not None and self._frontier is not None
        log.warning(
            "%s/%s: %s; resetting the consumer to its ack floor (what is unacknowledged is "
            "delivered again; the ledger suppresses what was applied)",
            self.stream,
            self.consumer,
            why,
        )
        pull = self._pull
        pull.halt()
        await pull.stop()  # nothing delivered before the reset reaches the new inbox
        pull.take_unprocessed()
        await self._acks.drain()  # acks decided before the reset reach the server first
        conn = self.conn

        async def reset_failed(exc: BaseException) -> None:
            log.warning(
                "%s/%s: consumer reset failed (%s); retrying", self.stream, self.consumer, exc
            )

        await retrying(
            lambda: reset_to_ack_floor(conn, self.stream, self.consumer),
            budget=max(self._acks.ack_wait, 5.0),
            what=f"resetting {self.stream}/{self.consumer} to its ack floor",
            retry_if=lambda exc: isinstance(exc, OncestreamError) and not self._stop_requested,
            on_retry=reset_failed,
            log_retries=False,
            budget_source="the consumer's ack_wait (at least 5 s)",
        )
        self._frontier.restart()
        self.stats.resets += 1
        self._pull = await self._new_pull(None)

    async def _loop_batches(self, pull: MessageStream) -> None:
        batch = self.options.batch
        pinned = self.options.pinned
        while not self._stop_requested:
            pull = self._pull or pull
            try:
                msgs = await pull.next_batch(batch, timeout=1.0)
            except OperationTimeout as exc:
                self.stats.heartbeat_errors += 1
                self._pull_log.log(logging.WARNING, str(exc), "%s", exc)
                continue
            if pinned and pull.pin_id != self.active_pin and not self._stop_requested:
                # Delivered under a pin this instance does not apply under: a new pin
                # (take over first) or none any more (the pin moved on).
                if pull.pin_id is None:
                    self._demote(pull, "the server moved the pin to another instance")
                else:
                    await self._take_over(pull, pull.pin_id)
                continue
            if msgs or (self._frontier is not None and self._frontier.gap):
                await self._process(msgs)

    # -- pinned priority group ---------------------------------------------

    def _owner_check(self, pin: str | None) -> OwnerCheck:
        assert self.options.priority_group is not None
        name = fence_name(self.stream, self.consumer, self.options.priority_group)
        return OwnerCheck(self.ledger, name, pin)

    async def _take_over(self, pull: MessageStream, pin: str) -> None:
        """Become the active instance under ``pin`` (see :mod:`oncestream.process._pinning`).

        A fence or reset that fails (the ledger locked by another process, the
        reset unanswered) is tried again while this instance keeps the pin; the
        takeover is abandoned only when the pin moves on or a stop is requested.
        """
        assert self.conn is not None
        began = time.monotonic()
        pull.halt()
        await pull.stop()  # messages delivered before the reset never reach the new inbox
        pull.take_unprocessed()
        check = self._owner_check(pin)
        fence_wait = min(_FENCE_WAIT, self.options.pinned_ttl / 4)
        fenced = False
        previous: str | None = None
        keeper: MessageStream | None = None
        attempts = 0
        noticed = 0.0
        try:
            while True:
                attempts += 1
                busy = False
                try:
                    if not fenced:
                        previous = await self._applier.db(
                            functools.partial(take_over, wait=fence_wait),
                            self.ledger,
                            check.name,
                            pin,
                        )
                        fenced = True
                    if keeper is not None:
                        await self._drop_keeper(keeper)  # nothing it holds outlives the reset
                        keeper = None
                    restart = await reset_to_ack_floor(self.conn, self.stream, self.consumer)
                    break
                except (LedgerUnusable, ConsumerNotFound, StreamNotFound):
                    raise
                except OncestreamError as exc:
                    busy = isinstance(exc, FenceBusy)
                    if busy:
                        self.stats.takeover_lock_waits += 1
                    if not self.takeover_waiting_since:
                        self.takeover_waiting_since = began
                    now = time.monotonic()
                    if not noticed or now - noticed >= _WAIT_NOTICE:
                        noticed = now
                        log.warning(
                            "%s/%s: holding the pin of priority group %r but cannot take over "
                            "yet (%.0fs, attempt %d): %s; staying a standby and retrying",
                            self.stream,
                            self.consumer,
                            self.options.priority_group,
                            now - began,
                            attempts,
                            exc,
                        )
                if keeper is None:
                    keeper = self._pull = await self._new_pull(pin, keep_pin=True)
                if not await self._hold_pin(keeper, pin, 0.0 if busy else _RETRY_DELAY):
                    log.warning(
                        "%s/%s: takeover abandoned after %.1fs (%s); waiting as a standby",
                        self.stream,
                        self.consumer,
                        time.monotonic() - began,
                        "stopping" if self._stop_requested else "the pin moved on",
                    )
                    await self._drop_keeper(keeper)
                    keeper = None
                    if not self._stop_requested:
                        self._pull = await self._new_pull(None)
                        self._pull.forget_pin_later(pin)
                    return
        finally:
            self.takeover_waiting_since = 0.0
            if keeper is not None:
                await self._drop_keeper(keeper)
        self._applier.fence = check
        self._pull = await self._new_pull(pin)
        self.active_pin = pin
        self.took_over_at = time.time()
        self.stats.takeovers += 1
        log.warning(
            "%s/%s: this instance is now the active one of priority group %r (previous "
            "owner %s); consumer reset to sequence %d, takeover took %.0f ms",
            self.stream,
            self.consumer,
            self.options.priority_group,
            "none" if previous is None else "another instance",
            restart,
            (time.monotonic() - began) * 1000,
        )
        self._progress.set()

    async def _hold_pin(self, keeper: MessageStream, pin: str, delay: float) -> bool:
        """Keep ``pin`` while a takeover waits; False when it moved on or a stop was requested.

        ``keeper`` pulls one message at a time under the pin, which keeps it; what
        it receives is dropped (the takeover's reset delivers it again, in order).
        """
        if delay:
            await asyncio.sleep(delay)
        while not self._stop_requested:
            try:
                if not await keeper.next_batch(0, timeout=0):
                    break
            except (ConsumerNotFound, StreamNotFound):
                raise
            except OncestreamError as exc:  # missed heartbeats: it pulls again by itself
                log.debug("pin keeper: %s", exc)
        keeper.take_unprocessed()
        return keeper.pin_id == pin and not self._stop_requested

    async def _drop_keeper(self, keeper: MessageStream) -> None:
        keeper.halt()
        await keeper.stop()
        keeper.take_unprocessed()

    def _demote(self, pull: MessageStream, why: str) -> None:
        """Stop applying: drop what was delivered under the old pin and wait as a standby."""
        dropped = len(pull.take_unprocessed())
        pull.forget_pin()
        if self.active_pin is not None:
            self.stats.demotions += 1
            log.warning(
                "%s/%s: no longer the active instance (%s); %d buffered messages left to "
                "the new one, waiting as a standby",
                self.stream,
                self.consumer,
                why,
                dropped,
            )
        self.active_pin = None
        self._applier.fence = self._owner_check(None)
        self._progress.set()

    async def _new_pull(self, pin: str | None, *, keep_pin: bool = False) -> MessageStream:
        """A pull under ``pin`` (None: as a standby); ``keep_pin``: one message at a time."""
        assert self.conn is not None
        options: PullOptions = self.options.pull_options()
        if keep_pin:
            options = dataclasses.replace(options, batch=1, max_bytes=0)
        pull = MessageStream(self.conn, self.stream, self.consumer, options, pin_id=pin)
        await pull.start()
        return pull

    async def _process(self, msgs: list[Message]) -> None:
        began = time.perf_counter()
        # No registered filters (every subject, or none recorded): no subject list.
        if self._registry.filters and not await self._registry.admit(
            self.conn, [m.subject for m in msgs], self._fail
        ):
            return  # the filter edited to overlap a neighbour: neither applied nor acked
        frontier = self._frontier
        if frontier is not None and not frontier.delivered(msgs):
            await self._reanchor(frontier.gap)
            return
        if self._tracer is not None:
            self._applier.batch_started_ns = self._acks.batch_started_ns = time.time_ns()
        by_seq: dict[int, Message] = {}
        extras: list[Message] = []
        for msg in msgs:
            try:
                seq = msg.seq
            except JetStreamError:
                log.error("dropping a message with a non-JetStream reply subject %r", msg.reply)
                continue
            if seq in by_seq:
                extras.append(msg)  # the same message delivered twice in one batch
            elif msg.raw_headers and _SCHEDULE in msg.raw_headers:
                # A stored message schedule (e.g. `dlq replay --in`): the server publishes
                # the message it schedules when it fires; the schedule itself is not data.
                extras.append(msg)
                self.stats.schedules_skipped += 1
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
        acks = self._acks
        acks.begin_batch(ordered)
        try:
            while True:
                try:
                    outcome = await self._applier.apply(entries, ordered)
                    break
                except RegistryMoved as moved:  # rolled back: nothing applied
                    if not await self._registry.moved(self.conn, moved, ordered, self._fail):
                        return  # refused: neither applied nor acked
        except LedgerUnusable:
            await acks.nak(ordered)  # nothing was applied: let the next worker have them
            raise
        except Superseded as exc:
            if frontier is not None:
                self._fail(self._superseded(exc))
                return
            assert self._pull is not None
            self._demote(self._pull, str(exc))
            return
        finally:
            acks.end_batch()
        if outcome is None:  # the ledger kept failing
            await acks.nak(ordered, delay=1.0)
            if frontier is not None:
                await self._ack_through(frontier.settle(_by_seq(extras), ordered))
            return
        done, failures = outcome
        self.stats.batches += 1
        self._registry.applied()  # a row that moved was absorbed: count again
        if frontier is not None:
            finished = done + _by_seq(extras) if extras else done
            if extras and done:
                finished.sort(key=_seq)
            await self._ack_through(frontier.settle(finished, [m for m, _ in failures]))
            for msg, error in failures:
                if await acks.failed(msg, error):  # dead-lettered: finished
                    await self._ack_through(frontier.settle([msg], []))
        else:
            replies = [m.reply for m in done] + [m.reply for m in extras]
            if replies:
                await acks.ack(replies)
            for msg, error in failures:
                await acks.failed(msg, error)
        if done and self.conn is not None and not self.conn.is_connected:
            self._unsent.note([m.seq for m in done])
        if self.stats.observers:
            self.stats.observe("batch", time.perf_counter() - began)
        self._progress.set()

    async def _ack_through(self, reply: str | None) -> None:
        if reply is not None:
            await self._acks.ack_through(reply)

    def _superseded(self, exc: Superseded) -> ConfigError:
        return ConfigError(
            f"consumer {self.stream}/{self.consumer} has ack policy 'all' (one ack per batch "
            f"covers every message before it, so one Processor at a time) and another "
            f"Processor started on it: this one stopped without acknowledging its deliveries "
            f"({exc}). Run one Processor per consumer; to share a consumer between several, "
            f"create it with explicit acks and run them with ack_policy 'explicit'"
        )

    async def _prune_loop(self) -> None:
        assert self.conn is not None
        opts = self.options
        while True:
            await asyncio.sleep(opts.prune_interval)
            try:
                info = await self.conn.consumer_info(self.stream, self.consumer)
                if self._acks.limit is not None:
                    unsafe = self._acks.limit.note(info.get("config") or {})
                    if unsafe is not None:
                        self._fail(unsafe)
                filters = consumer_filters(info.get("config") or {})
                if not await self._registry.recheck(self.conn, filters, self._fail):
                    return  # the filter edited to overlap a neighbour
                floor = int(info.get("ack_floor", {}).get("stream_seq", 0))
                up_to = self._floors.prunable(floor, time.monotonic(), filters)
                up_to, others = await self._registry.limit(self.conn, floor, up_to)
                if up_to:
                    # The span deleted joins every registered consumer's prune horizon.
                    prune = self._registry.prune_call(filters, others)
                    deleted = await self._applier.db(prune, self.stream, up_to, opts.prune_limit)
                    self.stats.pruned += deleted
                    self._progress.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # pruning is best effort; the next round retries
                log.debug("ledger pruning skipped: %s", exc)


def _seq(msg: Message) -> int:
    return msg.seq


def _by_seq(msgs: list[Message]) -> list[Message]:
    return sorted(msgs, key=_seq)


class _UnsentAcks:
    """Messages acked while the connection was down, since the last reconnect.

    nats-py buffers writes while it reconnects and sends them once it is back;
    a stop before that drops them, and the server redelivers those messages.
    """

    def __init__(self) -> None:
        self.count = 0
        self.first = 0
        self.last = 0

    def note(self, seqs: list[int]) -> None:
        if not seqs:
            return
        self.first = min(seqs) if not self.count else min(self.first, *seqs)
        self.last = max(self.last, *seqs)
        self.count += len(seqs)

    async def reconnected(self) -> None:
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
