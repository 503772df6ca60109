"""Exactly-once processing of a JetStream consumer: :class:`Processor`.

A crash between "effect applied" and "ack sent" makes JetStream redeliver,
and the double ack only narrows that gap. The Processor closes it with a
ledger: for every pulled batch it opens one database transaction, records
each message's key (``(stream, seq)`` or its ``Nats-Msg-Id``), calls
``handler(msg, tx)`` for the messages not recorded before so the handler
writes its effects through the same transaction, commits, and only then
acks. A redelivered message finds its key and is acked without being
applied again (a "suppressed redelivery").

Example::

    def handle(msg, tx):
        tx.execute("INSERT INTO orders (body) VALUES (?)", (msg.data,))

    processor = Processor(conn, "ORDERS", "billing", handle, ledger=SQLiteLedger("billing.db"))
    await processor.run()          # until processor.request_stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from nats.aio.msg import Msg

from ._acks import publish_to_all
from ._connection import Connection, connect
from ._deadletter import dead_letter_headers, publish_dead_letter
from ._errors import (
    ConfigError,
    LedgerError,
    OncestreamError,
    OperationTimeout,
)
from ._logthrottle import LogThrottle
from ._names import check_consumer_name, check_stream_name
from ._options import ConnectOptions
from ._processor_setup import (
    FloorHistory,
    ProcessorOptions,
    ProcessorStats,
    check_handler,
    setup_consumer,
)
from .ledger import Ledger, LedgerEntry, LedgerTx
from .pull import MessageStream

__all__ = ["Handler", "Processor", "ProcessorOptions", "ProcessorStats"]

log = logging.getLogger("oncestream.processor")

#: ``handler(msg, tx)``; may be a coroutine function. Effects go through ``tx``.
Handler = Callable[[Msg, LedgerTx], Awaitable[None] | None]

_ACK = b"+ACK"
_WPI = b"+WPI"
_TERM = b"+TERM"
_MAX_CONFIRMING = 4


class _HandlerFailed(Exception):
    def __init__(self, index: int, error: BaseException) -> None:
        self.index = index
        self.error = error


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

    Example::

        async with await connect(opts) as conn:
            p = Processor(conn, "ORDERS", "billing", handle, ledger=SQLiteLedger("b.db"))
            await p.run()
    """

    def __init__(
        self,
        conn: Connection | ConnectOptions,
        stream: str,
        consumer: str,
        handler: Handler,
        *,
        ledger: Ledger,
        options: ProcessorOptions | None = None,
    ) -> None:
        if not stream or not consumer:
            raise ConfigError(f"stream and consumer are required, got {stream!r}/{consumer!r}")
        check_handler(handler, "handler")
        self._conn_arg = conn
        self.conn: Connection | None = conn if isinstance(conn, Connection) else None
        self.stream = check_stream_name(stream)
        self.consumer = check_consumer_name(consumer)
        self.handler = handler
        self.ledger = ledger
        self.options = options or ProcessorOptions()
        self.stats = ProcessorStats()
        self.ack_wait = self.options.ack_wait
        self._async_handler = inspect.iscoroutinefunction(handler)
        self._inline = ledger.inline
        self._msg_ids = ledger.key == "msg_id"
        self._pull: MessageStream | None = None
        self._stop_requested = False
        self._running = asyncio.Event()
        self._done = asyncio.Event()
        self._db_lock = asyncio.Lock()
        self._inflight: list[str] = []
        self._inflight_since = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        self._floors = FloorHistory(self.options.prune_grace)
        self._dlq_subject = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._progress = asyncio.Event()
        self._confirming: deque[asyncio.Task[None]] = deque()
        self._failure_log = LogThrottle(log)  # identical failures: first 5, then a summary

    # -- lifecycle -----------------------------------------------------

    async def run(self) -> ProcessorStats:
        """Process until :meth:`request_stop`; then finish the batch, commit, ack and return.

        Raises:
            ConfigError: the consumer exists with an incompatible config.
            ConsumerNotFound: it does not exist and ``create`` is off, or it was deleted.
            LedgerError: the ledger cannot be opened.
        """
        self._loop = asyncio.get_running_loop()
        owned = self.conn is None
        if self.conn is None:
            assert isinstance(self._conn_arg, ConnectOptions)
            self.conn = await connect(self._conn_arg)
        conn = self.conn
        try:
            await self._db(self.ledger.open)
            await self._setup_consumer(conn)
            self._pull = MessageStream(
                conn, self.stream, self.consumer, self.options.pull_options()
            )
            await self._pull.start()
            self._tasks.append(asyncio.create_task(self._progress_loop()))
            if self.options.prune_interval > 0 and not self.options.bind:
                self._tasks.append(asyncio.create_task(self._prune_loop()))
            self._running.set()
            await self._loop_batches(self._pull)
        finally:
            await self._shutdown()
            if owned:
                await conn.close()
            self._done.set()
            self._progress.set()
        return self.stats

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

    async def wait_running(self, timeout: float = 10.0) -> None:
        """Wait until the consumer is set up and pulling."""
        await asyncio.wait_for(self._running.wait(), timeout)

    async def _shutdown(self) -> None:
        while self._confirming:
            with contextlib.suppress(Exception):
                await self._confirming.popleft()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        pull = self._pull
        if pull is not None:
            pull.halt()
            await pull.stop()
            leftover = pull.take_unprocessed()
            if leftover and self.conn is not None and self.conn.nc.is_connected:
                # Hand unprocessed messages back now instead of after ack_wait.
                await self._send_raw([m.reply for m in leftover], b"-NAK")
                with contextlib.suppress(Exception):
                    await self.conn.nc.flush(timeout=2)
        with contextlib.suppress(Exception):
            await self._db(self.ledger.close)

    # -- consumer --------------------------------------------------------

    async def _setup_consumer(self, conn: Connection) -> None:
        opts = self.options
        if opts.dead_letter_stream:
            self._dlq_subject = (
                opts.dead_letter_subject or f"{opts.dead_letter_stream}.{self.stream}"
            )
        self.ack_wait = await setup_consumer(conn, self.stream, self.consumer, opts)

    async def _loop_batches(self, pull: MessageStream) -> None:
        batch = self.options.batch
        while not self._stop_requested:
            try:
                msgs = await pull.next_batch(batch, timeout=1.0)
            except OperationTimeout as exc:
                self.stats.heartbeat_errors += 1
                self._failure_log.log(logging.WARNING, str(exc), "%s", exc)
                continue
            if msgs:
                await self._process(msgs)

    async def _db(self, func: Callable[..., Any], *args: Any) -> Any:
        """Run a ledger call: inline for SQLite, on a worker thread for blocking databases."""
        async with self._db_lock:
            if self._inline:
                return func(*args)
            return await asyncio.to_thread(func, *args)

    async def _process(self, msgs: list[Msg]) -> None:
        by_seq: dict[int, Msg] = {}
        extra_replies: list[str] = []
        for msg in msgs:
            reply = msg.reply
            tokens = reply.split(".", 10)
            try:
                seq = int(tokens[5] if len(tokens) == 9 else tokens[7])
            except (IndexError, ValueError):
                log.error("dropping a message with a non-JetStream reply subject %r", reply)
                continue
            if seq in by_seq:
                extra_replies.append(reply)  # the same message delivered twice in one batch
            else:
                by_seq[seq] = msg
        seqs = sorted(by_seq)
        ordered = [by_seq[s] for s in seqs]
        stream = self.stream
        if self._msg_ids:
            entries = [
                LedgerEntry(stream, s, (m.headers or {}).get("Nats-Msg-Id"))
                for s, m in zip(seqs, ordered, strict=True)
            ]
        else:
            entries = [LedgerEntry(stream, s) for s in seqs]
        self._inflight = [m.reply for m in ordered]
        self._inflight_since = time.monotonic()
        try:
            outcome = await self._apply_with_retry(entries, ordered)
        finally:
            self._inflight = []
        if outcome is None:
            return
        done, failures = outcome
        self.stats.batches += 1
        replies = [m.reply for m in done] + extra_replies
        if replies:
            await self._ack(replies)
        for msg, error in failures:
            await self._failed(msg, error)
        self._progress.set()

    async def _apply_with_retry(
        self, entries: list[LedgerEntry], msgs: list[Msg]
    ) -> tuple[list[Msg], list[tuple[Msg, BaseException]]] | None:
        for attempt in range(3):
            try:
                async with self._db_lock:
                    return await self._apply(entries, msgs)
            except LedgerError as exc:
                self.stats.ledger_errors += 1
                log.warning("ledger transaction failed (attempt %d): %s", attempt + 1, exc)
                await asyncio.sleep(0.2 * (attempt + 1))
        log.error("ledger unavailable: handing %d messages back for redelivery", len(msgs))
        await self._send_raw([m.reply for m in msgs], b'-NAK {"delay": 1000000000}')
        return None

    async def _apply(
        self, entries: list[LedgerEntry], msgs: list[Msg]
    ) -> tuple[list[Msg], list[tuple[Msg, BaseException]]]:
        """One transaction for the batch; on a handler failure, one per message."""
        try:
            if self._async_handler:
                await self._run_batch_async(entries, msgs)
            elif self._inline:
                await self._run_batch_inline(entries, msgs)
            else:
                await asyncio.to_thread(self._run_batch, entries, msgs)
            return msgs, []
        except _HandlerFailed as failed:
            log.debug(
                "handler failed in a batch (%s); retrying one message per transaction", failed.error
            )
        done: list[Msg] = []
        failures: list[tuple[Msg, BaseException]] = []
        for entry, msg in zip(entries, msgs, strict=True):
            try:
                if self._async_handler:
                    await self._run_batch_async([entry], [msg])
                elif self._inline:
                    self._run_batch([entry], [msg])
                else:
                    await asyncio.to_thread(self._run_batch, [entry], [msg])
                done.append(msg)
            except _HandlerFailed as failed:
                failures.append((msg, failed.error))
        return done, failures

    def _run_batch(
        self, entries: Sequence[LedgerEntry], msgs: Sequence[Msg], *, commit: bool = True
    ) -> tuple[LedgerTx, list[bool]]:
        tx = self.ledger.begin()
        try:
            fresh = tx.claim(entries)
            handler = self.handler
            index = 0
            try:
                for index, msg in enumerate(msgs):
                    if fresh[index]:
                        handler(msg, tx)
            except Exception as exc:
                if self.ledger.is_transient(exc):
                    raise LedgerError(f"database failed inside the handler: {exc}") from exc
                raise _HandlerFailed(index, exc) from exc
            if commit:
                tx.commit()
                self._count(fresh)
        except BaseException:
            tx.rollback()
            raise
        return tx, fresh

    async def _run_batch_inline(self, entries: Sequence[LedgerEntry], msgs: Sequence[Msg]) -> None:
        if len(msgs) < 32:
            self._run_batch(entries, msgs)
            return
        tx, fresh = self._run_batch(entries, msgs, commit=False)
        # The commit's fsync runs off the loop, which keeps receiving meanwhile.
        commit = asyncio.ensure_future(asyncio.to_thread(tx.commit))
        try:
            await asyncio.shield(commit)
        except asyncio.CancelledError:
            # Never leave a commit running on a connection that is about to close.
            with contextlib.suppress(Exception):
                await commit
            raise
        self._count(fresh)

    def _count(self, fresh: list[bool]) -> None:
        applied = sum(fresh)
        self.stats.applied += applied
        self.stats.suppressed += len(fresh) - applied

    async def _run_batch_async(self, entries: Sequence[LedgerEntry], msgs: Sequence[Msg]) -> None:
        tx = await self._call_db(self.ledger.begin)
        try:
            fresh = await self._call_db(tx.claim, entries)
            for index, msg in enumerate(msgs):
                if not fresh[index]:
                    continue
                try:
                    if self._inline:
                        await self.handler(msg, tx)  # type: ignore[misc]
                    else:
                        await self._call_db(self._call_async_handler, msg, tx)
                except Exception as exc:
                    if self.ledger.is_transient(exc):
                        raise LedgerError(f"database failed inside the handler: {exc}") from exc
                    raise _HandlerFailed(index, exc) from exc
            await self._call_db(tx.commit)
        except BaseException:
            await self._call_db(tx.rollback)
            raise
        self._count(fresh)

    async def _call_db(self, func: Callable[..., Any], *args: Any) -> Any:
        if self._inline:
            return func(*args)
        return await asyncio.to_thread(func, *args)

    def _call_async_handler(self, msg: Msg, tx: LedgerTx) -> None:
        # On the DB worker thread: the handler's coroutine runs on the event loop
        # while its DB calls (sync psycopg) block only this thread.
        assert self._loop is not None
        coro = self.handler(msg, tx)
        assert inspect.isawaitable(coro)
        asyncio.run_coroutine_threadsafe(_awaited(coro), self._loop).result()

    # -- acks ----------------------------------------------------------------

    async def _send_raw(self, replies: Sequence[str], payload: bytes) -> None:
        """Publish ``payload`` to every reply subject with one buffered write."""
        if replies and self.conn is not None:
            await publish_to_all(self.conn.nc, replies, payload)

    async def _ack(self, replies: list[str]) -> None:
        if not self.options.double_ack:
            await self._send_raw(replies, _ACK)
            return
        await self._send_raw(replies[:-1], _ACK)
        # Confirmation round trips overlap the next batches; a few may be
        # outstanding (the ledger, not the confirmation, is the guarantee) and
        # shutdown waits for all of them.
        confirming = self._confirming
        while confirming and confirming[0].done():
            confirming.popleft()
        if len(confirming) >= _MAX_CONFIRMING:
            await confirming.popleft()
        confirming.append(asyncio.create_task(self._double_ack(replies[-1])))

    async def _double_ack(self, reply: str) -> None:
        assert self.conn is not None
        nc = self.conn.nc
        delay = 0.05
        for attempt in range(self.options.double_ack_attempts):
            try:
                await nc.request(reply, _ACK, timeout=self.options.double_ack_timeout)
                self.stats.double_acks += 1
                return
            except Exception as exc:
                log.debug("ack confirmation attempt %d failed: %s", attempt + 1, exc)
            if self._stop_requested and attempt >= 1:
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
        # The ledger still makes a redelivery harmless; the ack stays sent.
        self.stats.double_ack_failures += 1
        log.warning("ack of %s not confirmed; a redelivery will be suppressed", reply)

    async def _failed(self, msg: Msg, error: BaseException) -> None:
        self.stats.failed += 1
        tokens = msg.reply.split(".")
        attempts = int(tokens[4] if len(tokens) == 9 else tokens[6])
        seq = int(tokens[5] if len(tokens) == 9 else tokens[7])
        text = f"{type(error).__name__}: {error}"
        opts = self.options
        if attempts >= opts.max_deliver:
            if self._dlq_subject:
                if await self._dead_letter(msg, seq, attempts, text):
                    return
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
        delay = opts.backoff[min(attempts, len(opts.backoff)) - 1]
        await self._send_raw([msg.reply], b'-NAK {"delay": %d}' % int(delay * 1e9))

    async def _dead_letter(self, msg: Msg, seq: int, attempts: int, text: str) -> bool:
        assert self.conn is not None
        headers = dead_letter_headers(
            msg, stream=self.stream, consumer=self.consumer, seq=seq, attempts=attempts, error=text
        )
        try:
            await publish_dead_letter(self.conn, self._dlq_subject, msg, headers)
        except OncestreamError as exc:
            log.error(
                "dead letter for %s seq %d not stored (%s); retrying later", self.stream, seq, exc
            )
            return False
        await self._send_raw([msg.reply], _TERM)
        self.stats.dead_lettered += 1
        log.warning(
            "%s seq %d dead-lettered to %s after %d attempts: %s",
            self.stream,
            seq,
            self._dlq_subject,
            attempts,
            text,
        )
        return True

    # -- background ------------------------------------------------------------

    async def _progress_loop(self) -> None:
        """In-progress acks for a batch that takes longer than half the ack wait."""
        interval = max(self.ack_wait / 2, 0.5)
        while True:
            await asyncio.sleep(interval / 2)
            inflight = self._inflight
            if inflight and time.monotonic() - self._inflight_since >= interval:
                await self._send_raw(inflight, _WPI)
                self._inflight_since = time.monotonic()

    async def _prune_loop(self) -> None:
        assert self.conn is not None
        opts = self.options
        while True:
            await asyncio.sleep(opts.prune_interval)
            try:
                info = await self.conn.consumer_info(self.stream, self.consumer)
                floor = int(info.get("ack_floor", {}).get("stream_seq", 0))
                up_to = self._floors.prunable(floor, time.monotonic())
                if up_to:
                    deleted = await self._db(
                        self.ledger.prune, self.stream, up_to, opts.prune_limit
                    )
                    self.stats.pruned += deleted
                    self._progress.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # pruning is best effort; the next round retries
                log.debug("ledger pruning skipped: %s", exc)


async def _awaited(awaitable: Awaitable[None]) -> None:
    await awaitable
