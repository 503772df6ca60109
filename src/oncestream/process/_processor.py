"""Exactly-once processing of a JetStream consumer: :class:`Processor`.

A crash between "effect applied" and "ack sent" makes JetStream redeliver,
and the double ack only narrows that gap. The Processor closes it with a
ledger: for every pulled batch it opens one database transaction, records
each message's key (``(stream, seq)`` or its ``Nats-Msg-Id``), calls
``handler(msg, tx)`` for the messages not recorded before so the handler
writes its effects through the same transaction, commits, and only then
acks. A redelivered message finds its key and is acked without being
applied again (a "suppressed redelivery").

This module keeps the order of a run: connect, open the ledger, run the
consumer's loop (:mod:`oncestream.process._consumerloop`: set-up, pull, apply,
ack, each step a part of its own), then stop it, close the ledger and the
connection.

Example::

    def handle(msg, tx):
        tx.execute("INSERT INTO orders (body) VALUES (?)", (msg.data,))

    processor = Processor(conn, "ORDERS", "billing", handle, ledger=SQLiteLedger("billing.db"))
    await processor.run()          # until processor.request_stop()
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from .._connection import Connection, connect
from .._errors import ConfigError, OperationTimeout
from .._names import check_consumer_name, check_stream_name
from .._options import ConnectOptions
from ..ledger import Ledger
from ..tracing._internal import tracer
from ._acking import Acknowledger
from ._applying import Applier, BatchHandler, Handler
from ._consumerloop import ConsumerLoop
from ._ledgercalls import LedgerCalls
from ._options import ProcessorOptions, ProcessorStats
from ._setup import check_handler

__all__ = ["BatchHandler", "Handler", "Processor", "ProcessorOptions", "ProcessorStats"]


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
            the batch is rolled back and applied again in halves, down to the
            failing message alone (``batch_handler([msg], tx)``), so only the
            failing message is retried or dead-lettered.

    Raises:
        ConfigError: neither or both of ``handler`` and ``batch_handler``; a handler
            that cannot be called as ``f(msg, tx)``; a bad stream or consumer name.

    Example::

        async with await connect(opts) as conn:
            p = Processor(conn, "ORDERS", "billing", handle, ledger=SQLiteLedger("b.db"))
            await p.run()
    """

    #: The parts' classes (the chaos tests' crashing Processor swaps them).
    _acknowledger_type: type[Acknowledger] = Acknowledger
    _applier_type: type[Applier] = Applier

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
        self._batched = batch_handler is not None
        self.ledger = ledger
        self.options = options or ProcessorOptions()
        self.stats = ProcessorStats()
        self._calls = LedgerCalls(ledger)
        self._stop_requested = False
        self._running = asyncio.Event()
        self._done = asyncio.Event()
        self._progress = asyncio.Event()
        self._tracer = tracer(self.options.tracing, "processor")
        #: The consumer's loop (None until :meth:`run` has connected and opened the ledger).
        self._loop: ConsumerLoop | None = None

    @property
    def ack_wait(self) -> float:
        """The consumer's ack wait in seconds (the configured one until the consumer is set up)."""
        return self._loop.ack_wait if self._loop is not None else self.options.ack_wait

    @property
    def active_pin(self) -> str | None:
        """Pinned priority group: the pin this instance applies under (None: standby)."""
        pins = self._loop.pins if self._loop is not None else None
        return pins.active_pin if pins is not None else None

    @property
    def took_over_at(self) -> float:
        """Pinned priority group: ``time.time()`` of the last takeover (0.0: never)."""
        pins = self._loop.pins if self._loop is not None else None
        return pins.took_over_at if pins is not None else 0.0

    @property
    def takeover_waiting_since(self) -> float:
        """Pinned priority group: ``time.monotonic()`` since when this instance holds the pin
        but cannot take over yet (the ledger locked by another process, the reset
        failing); 0.0: it does not."""
        pins = self._loop.pins if self._loop is not None else None
        return pins.waiting_since if pins is not None else 0.0

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
            who = f"{self.stream}/{self.consumer}"
            if not await self._calls.open(who, self.stats, lambda: self._stop_requested):
                return self.stats  # stopped while waiting for the ledger
            self._loop = loop = ConsumerLoop(
                conn,
                self._calls,
                self.stream,
                self.consumer,
                self.handler,
                batched=self._batched,
                options=self.options,
                stats=self.stats,
                progress=self._progress,
                tracer=self._tracer,
                applier_type=self._applier_type,
                acknowledger_type=self._acknowledger_type,
            )
            if self._stop_requested:
                loop.request_stop()
            await loop.run(self._running)
        finally:
            if self._loop is not None:
                await self._loop.close()
            with contextlib.suppress(Exception):
                await self._calls.db(self.ledger.close)
            if owned:
                await conn.close()
            self._done.set()
            self._progress.set()
        if self._loop is not None and self._loop.fatal is not None:
            raise self._loop.fatal  # the run's, or found while closing: a drop left unsettled
        return self.stats

    def request_stop(self) -> None:
        """Ask :meth:`run` to finish the in-flight batch and return (signal-handler safe)."""
        self._stop_requested = True
        if self._loop is not None:
            self._loop.request_stop()

    async def stop(self) -> None:
        """Request a stop and wait until :meth:`run` has returned."""
        self.request_stop()
        if self._running.is_set() or (self._loop is not None and self._loop.pull is not None):
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
