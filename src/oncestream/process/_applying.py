"""Applying a batch: one ledger transaction, the handler called for the messages not seen before.

The :class:`~oncestream.Processor` hands each pulled batch (sorted by stream
sequence, one message per sequence) to :class:`Applier`. It opens one ledger
transaction, claims every message's key, calls ``handler(msg, tx)`` for the
fresh ones (or ``batch_handler(fresh, tx)`` once) and commits. When the
handler fails the batch is rolled back and split (:func:`split`) until each
failing message stands alone in its transaction: the others are applied in a
few transactions, not one each, and only the failing ones fail. A database
failure is retried a few times; after that the caller hands the batch back for
redelivery. What happens to the messages afterwards (acks, naks, dead
letters) is :mod:`oncestream.process._acking`'s job.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .._errors import LedgerError, LedgerUnusable
from .._logthrottle import LogThrottle
from .._message import Message
from .._retry import retrying
from ..ledger import Horizon, LedgerEntry, LedgerTx
from ..tracing._internal import Tracer
from ._bound import BoundConsumer
from ._ledgercalls import LedgerCalls
from ._options import ProcessorStats

__all__ = ["Applier", "BatchHandler", "Handler", "Outcome", "RegistryMoved", "split"]

log = logging.getLogger(__name__)

#: ``handler(msg, tx)``; may be a coroutine function. ``msg`` is a :class:`Message`
#: (subject, data, headers, parsed JetStream ``metadata``); effects go through ``tx``.
Handler = Callable[[Message, LedgerTx], Awaitable[None] | None]
#: ``batch_handler(msgs, tx)``: the messages of one transaction not applied before, in
#: stream order (never empty); may be a coroutine function. One call per transaction,
#: so effects can be written in bulk (``tx.executemany``).
BatchHandler = Callable[[list[Message], LedgerTx], Awaitable[None] | None]

#: The messages applied (or found already applied), and the ones whose handler failed.
Outcome = tuple[list[Message], list[tuple[Message, BaseException]]]

_LEDGER_ATTEMPTS = 3
#: Seconds a transaction may wait for the database's write lock before the wait is logged.
_LOCK_NOTICE = 1.0
#: Batches at least this large commit off the event loop (the fsync would block it).
_COMMIT_OFF_LOOP = 32


class RegistryMoved(Exception):
    """The consumer's registry row, read in a batch transaction, does not hold every
    subject of the batch (``filters``: the row's; None: no row). The batch was rolled back.

    Raised by the Processor's registry check (:attr:`Applier.registered`).
    """

    def __init__(self, filters: tuple[str, ...] | None) -> None:
        if filters is None:
            super().__init__("not registered")
        else:
            super().__init__(" ".join(filters) or "none: every subject")
        self.filters = filters


class _HandlerFailed(Exception):
    """The handler failed in a transaction; the failing message is among ``suspects``
    (a range of the transaction's indexes, as :func:`split` takes it)."""

    def __init__(self, suspects: tuple[int, int], error: BaseException) -> None:
        self.suspects = suspects
        self.error = error


def split(size: int, suspects: tuple[int, int]) -> list[tuple[int, int]]:
    """How a failed transaction of ``size`` messages (at least 2) is applied again.

    ``suspects``: the range of indexes the failing message is in; the messages
    before it were handled without a failure, those after it were not tried.
    Returns the ranges to apply next, in order, one transaction each, every one
    shorter than ``size``: the ones before the suspects together, a single suspect
    alone or the suspects in two halves, the ones after them together. A range
    that fails again is split the same way, down to one message. k failing
    messages among n then cost about ``3 k + 1`` transactions when the failing
    message is known (a per-message handler raising), about ``2 k log2(n / k)``
    when only a range is (a batch handler; a statement's error that PostgreSQL's
    pipeline mode reports late), instead of one per message.

    Example::

        split(10, (4, 5)) == [(0, 4), (4, 5), (5, 10)]
        split(10, (0, 10)) == [(0, 5), (5, 10)]
    """
    lo, hi = suspects
    if not 0 <= lo < hi <= size or size < 2:
        raise ValueError(f"suspects {suspects} of a failed transaction of {size} messages")
    ranges = [(0, lo)]
    if hi - lo == 1:
        ranges.append((lo, hi))
    else:
        mid = (lo + hi) // 2
        ranges += [(lo, mid), (mid, hi)]
    ranges.append((hi, size))
    return [(a, b) for a, b in ranges if a < b]


class Applier:
    """Runs batches through the ledger and the handler.

    Args:
        bound: the consumer (whose prune horizons decide what was finished before).
        calls: the ledger's calls (its lock serialises the batch transactions with the
            other ledger calls on its one connection).
        handler: the user's ``handler(msg, tx)`` (sync or async).
        stats: counters to update (``applied``, ``suppressed``, ``ledger_errors``).
        batched: ``handler`` takes a transaction's fresh messages at once (a BatchHandler).
        fence: called first in every batch transaction (a pinned Processor's owner
            check, or ack policy ``all``'s); what it raises rolls the batch back and
            ends :meth:`apply`.
        registered: called in every batch transaction after the prune horizons are
            read, with the subjects of the messages claimed (the registry check); what
            it raises rolls the batch back and ends :meth:`apply`.
        tracer: spans of the outcomes (a Processor with ``tracing``).

    Example::

        applier = Applier(bound, LedgerCalls(ledger), handle, ProcessorStats())
        done, failures = await applier.apply(entries, msgs)
    """

    def __init__(
        self,
        bound: BoundConsumer,
        calls: LedgerCalls,
        handler: Handler | BatchHandler,
        stats: ProcessorStats,
        *,
        batched: bool = False,
        fence: Callable[[LedgerTx], None] | None = None,
        registered: Callable[[LedgerTx, list[str]], None] | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        self.ledger = ledger = calls.ledger
        self.handler: Any = handler
        self.batched = batched
        self.stats = stats
        self.is_async = inspect.iscoroutinefunction(handler)
        self.inline = ledger.inline
        self.lock = calls.lock
        self.loop: asyncio.AbstractEventLoop | None = None
        self._lock_log = LogThrottle(log)
        self.fence = fence
        self._late_log = LogThrottle(log, burst=1, interval=60.0)
        self.tracer = tracer
        #: ``time.time_ns()`` when the batch being applied began (its spans start there).
        self._started_ns = 0
        self.stream, self.consumer = bound.stream, bound.consumer
        self.registered = registered
        #: The batch being applied holds replayed copies for this consumer (keys of
        #: another name than the stream's, :mod:`._replayed`).
        self._replays = False

    async def apply(
        self,
        entries: list[LedgerEntry],
        msgs: list[Message],
        started_ns: int = 0,
        *,
        replays: bool = False,
    ) -> Outcome | None:
        """Apply one batch; None when the ledger kept failing (hand the batch back).

        ``entries[i]`` is the ledger key of ``msgs[i]``; both sorted by sequence.
        ``started_ns``: ``time.time_ns()`` when the batch began (with a tracer: where
        its spans start). ``replays``: some entries are the keys of replayed copies
        for this consumer (:func:`._replayed.replay_entry`), not of the stream.
        """
        self.loop = asyncio.get_running_loop()
        self._started_ns = started_ns
        self._replays = replays
        failures = 0

        async def once() -> Outcome:
            async with self.lock:
                return await self._apply(entries, msgs)

        def again(exc: BaseException) -> bool:
            nonlocal failures
            if isinstance(exc, LedgerUnusable) or not isinstance(exc, LedgerError):
                return False
            failures += 1
            self.stats.ledger_errors += 1
            log.warning("ledger transaction failed (attempt %d): %s", failures, exc)
            return True

        try:
            return await retrying(
                once,
                budget=None,
                what="ledger transaction",
                attempts=_LEDGER_ATTEMPTS,
                retry_if=again,
                delay=lambda attempt: 0.2 * (attempt + 1),
                log_retries=False,
            )
        except LedgerError as exc:
            if isinstance(exc, LedgerUnusable) or failures < _LEDGER_ATTEMPTS:
                raise
        log.error("ledger unavailable: handing %d messages back for redelivery", len(msgs))
        return None

    async def _apply(self, entries: list[LedgerEntry], msgs: list[Message]) -> Outcome:
        """One transaction for the batch; on a handler failure, the batch split
        (:func:`split`) until each failing message is alone in its transaction."""
        try:
            await self._run(entries, msgs)
            return msgs, []
        except _HandlerFailed as exc:
            first = exc
        log.debug("handler failed in a batch (%s); splitting it", first.error)
        done: list[Message] = []
        failures: list[tuple[Message, BaseException]] = []
        # Ranges still to apply, the leftmost last: done and failures stay in stream order.
        todo: list[tuple[int, int, _HandlerFailed | None]] = [(0, len(msgs), first)]
        while todo:
            lo, hi, failed = todo.pop()
            if failed is None:
                try:
                    await self._run(entries[lo:hi], msgs[lo:hi])
                    done.extend(msgs[lo:hi])
                    continue
                except _HandlerFailed as again:
                    failed = again
            if hi - lo == 1:
                failures.append((msgs[lo], failed.error))
                continue
            ranges = split(hi - lo, failed.suspects)
            todo.extend((lo + a, lo + b, None) for a, b in reversed(ranges))
        return done, failures

    async def _run(self, entries: Sequence[LedgerEntry], msgs: Sequence[Message]) -> None:
        """One transaction for ``msgs``, committed (raises :class:`_HandlerFailed`)."""
        if self.is_async:
            await self._run_batch_async(entries, msgs)
        elif self.inline:
            await self._run_batch_inline(entries, msgs)
        else:
            await self.ledger.call(self._run_batch, entries, msgs)

    def _run_batch(
        self,
        entries: Sequence[LedgerEntry],
        msgs: Sequence[Message],
        *,
        commit: bool = True,
        tx: LedgerTx | None = None,
    ) -> tuple[LedgerTx, list[bool]]:
        if tx is None:
            tx = self.ledger.begin()
        try:
            if self.fence is not None:
                self.fence(tx)
            fresh = self.claim(tx, entries, msgs)
            handler = self.handler if not self.stats.observers else self._timed_handler
            index = 0
            try:
                if self.batched:
                    todo = _fresh_only(fresh, msgs)
                    if todo:
                        handler(todo, tx)
                else:
                    # PostgreSQL: the handlers' statements go out without a round trip
                    # each; an error among them is raised here by the end of the block.
                    with tx.pipeline():
                        for index, msg in enumerate(msgs):
                            if fresh[index]:
                                handler(msg, tx)
            except Exception as exc:
                if self.batched:
                    suspects = (0, len(msgs))
                elif tx.reported_late(exc):  # an earlier message's statement, maybe
                    suspects = (0, index + 1)
                else:
                    suspects = (index, index + 1)
                raise self._handler_error(suspects, exc) from exc
            if commit:
                self._commit(tx)
                self._count(fresh, msgs)
        except BaseException:
            tx.rollback()
            raise
        return tx, fresh

    def claim(
        self, tx: LedgerTx, entries: Sequence[LedgerEntry], msgs: Sequence[Message]
    ) -> list[bool]:
        """``tx.claim(entries)`` for the messages outside every prune horizon of the
        consumer; the ones inside (pruned, so finished before) are not fresh.

        The key of a replayed copy for this consumer (another name than the stream's)
        is claimed as it is: no horizon of the stream covers it, and a second copy of
        the same message in the batch is not fresh.
        """
        horizons = tx.horizons(self.stream, self.consumer) if self.consumer else []
        if self.registered is not None:
            self.registered(tx, [msg.subject for msg in msgs])
        if not entries:  # every message of the batch was acked without a claim
            return []
        if self._replays or entries[0].stream != self.stream:
            return self._claim_replays(tx, entries, msgs, horizons)
        return self._claim_own(tx, entries, msgs, horizons)

    def _claim_replays(
        self,
        tx: LedgerTx,
        entries: Sequence[LedgerEntry],
        msgs: Sequence[Message],
        horizons: list[Horizon],
    ) -> list[bool]:
        """Claim a batch holding keys of replayed copies: the stream's own keys first,
        then the others, each group sorted as :meth:`LedgerTx.claim` wants it."""
        stream = self.stream
        fresh = [False] * len(entries)
        own = [i for i, entry in enumerate(entries) if entry.stream == stream]
        if own:
            claimed = self._claim_own(
                tx, [entries[i] for i in own], [msgs[i] for i in own], horizons
            )
            for i, is_fresh in zip(own, claimed, strict=True):
                fresh[i] = is_fresh
        first: dict[LedgerEntry, int] = {}
        for i, entry in enumerate(entries):
            if entry.stream != stream:
                first.setdefault(entry, i)  # a second copy of it in the batch: not fresh
        keys = sorted(first)
        for key, is_fresh in zip(keys, tx.claim(keys), strict=True):
            fresh[first[key]] = is_fresh
        return fresh

    def _claim_own(
        self,
        tx: LedgerTx,
        entries: Sequence[LedgerEntry],
        msgs: Sequence[Message],
        horizons: list[Horizon],
    ) -> list[bool]:
        # Sorted by sequence: a batch that starts above every horizon (the usual
        # case, new messages) needs no look at each message.
        if not horizons or entries[0].seq > max(h.last_seq for h in horizons):
            return tx.claim(entries)
        inside = [
            any(h.covers(entry.seq, msg.subject) for h in horizons)
            for entry, msg in zip(entries, msgs, strict=True)
        ]
        if not any(inside):
            return tx.claim(entries)
        claimed = iter(tx.claim([e for e, done in zip(entries, inside, strict=True) if not done]))
        return [False if done else next(claimed) for done in inside]

    def _handler_error(self, suspects: tuple[int, int], exc: Exception) -> Exception:
        """A handler's exception: the database failing (retried, or fatal), or the handler
        (the failing message among ``suspects``)."""
        if self.ledger.is_unusable(exc):
            return self.ledger.failure("inside the handler", exc)
        if self.ledger.is_transient(exc):
            return LedgerError(f"database failed inside the handler: {exc}")
        return _HandlerFailed(suspects, exc)

    async def _begin(self) -> LedgerTx:
        """Begin a transaction without blocking the event loop on another process's lock.

        At once when no lock is held (:meth:`Ledger.begin_nowait`); otherwise
        ``ledger.begin()`` waits on a worker thread (up to SQLite's busy
        timeout), and the wait is logged. On the event loop thread it would stop
        pulls, acks, in-progress acks and progress lines for that long.
        """
        tx = self.ledger.begin_nowait()
        if tx is not None:
            return tx  # the usual case: no lock to wait for, no thread hop
        task = asyncio.ensure_future(self.ledger.call(self.ledger.begin, undo=_rollback))
        try:
            done, _ = await asyncio.wait({task}, timeout=_LOCK_NOTICE)
            if not done:
                where = getattr(self.ledger, "path", repr(self.ledger))
                self._lock_log.log(
                    logging.WARNING,
                    f"ledger locked {where}",
                    "the ledger %s is locked by another process (it holds the write lock: a "
                    "transaction, a backup, an open sqlite3 shell?); waiting for it",
                    where,
                )
                await asyncio.shield(task)
        except asyncio.CancelledError:
            # A transaction begun after all is rolled back on the ledger's thread
            # (undo) before the connection can be closed.
            task.cancel()
            while not task.done():  # cancelled again meanwhile: still wait for the undo
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait({task})
            raise
        return task.result()

    async def _run_batch_inline(
        self, entries: Sequence[LedgerEntry], msgs: Sequence[Message]
    ) -> None:
        tx = await self._begin()
        if len(msgs) < _COMMIT_OFF_LOOP:
            self._run_batch(entries, msgs, tx=tx)
            return
        tx, fresh = self._run_batch(entries, msgs, commit=False, tx=tx)
        # The commit's fsync runs off the loop, which keeps receiving meanwhile; a
        # cancelled caller waits for it (Ledger.call), never leaves it running.
        await self.ledger.call(self._commit, tx)
        self._count(fresh, msgs)

    def _count(self, fresh: list[bool], msgs: Sequence[Message]) -> None:
        applied = sum(fresh)
        self.stats.applied += applied
        if self.tracer is not None:
            self._trace(fresh, msgs)
        if applied == len(fresh):
            return
        self.stats.suppressed += len(fresh) - applied
        late = 0
        for is_fresh, msg in zip(fresh, msgs, strict=True):
            if not is_fresh and msg.metadata.num_delivered > 1:
                late += 1
        if late:
            self.stats.late_acks += late
            self._late_log.log(
                logging.WARNING,
                "late acks",
                "%d redeliveries of messages already applied and acked (%d so far): the "
                "server redelivered before it took the ack (ack wait too short for the "
                "batch, or the ack lost with the connection). The ledger suppressed them; "
                "nothing was applied twice",
                late,
                self.stats.late_acks,
            )

    async def _run_batch_async(
        self, entries: Sequence[LedgerEntry], msgs: Sequence[Message]
    ) -> None:
        tx = await (self._begin() if self.inline else self._call_db(self.ledger.begin))
        try:
            if self.fence is not None:
                await self._call_db(self.fence, tx)
            fresh = await self._call_db(self.claim, tx, entries, msgs)
            calls: list[tuple[int, Message | list[Message]]]
            if self.batched:
                todo = _fresh_only(fresh, msgs)
                calls = [(0, todo)] if todo else []
            else:
                calls = [(i, m) for i, m in enumerate(msgs) if fresh[i]]
            for index, arg in calls:
                began = time.perf_counter()
                try:
                    if self.inline:
                        await self.handler(arg, tx)
                    else:
                        await self._call_db(self._call_async_handler, arg, tx)
                except Exception as exc:
                    # No pipeline here: a per-message handler's error is its message's.
                    suspects = (0, len(msgs)) if self.batched else (index, index + 1)
                    raise self._handler_error(suspects, exc) from exc
                finally:
                    if self.stats.observers:
                        self.stats.observe("handler", time.perf_counter() - began)
            await self._call_db(self._commit, tx)
        except BaseException:
            await self._call_db(tx.rollback)
            raise
        self._count(fresh, msgs)

    def _trace(self, fresh: list[bool], msgs: Sequence[Message]) -> None:
        assert self.tracer is not None
        for outcome, wanted in (("applied", True), ("duplicate_suppressed", False)):
            chosen = [m for f, m in zip(fresh, msgs, strict=True) if f is wanted]
            if chosen:
                self.tracer.consumed(
                    chosen,
                    outcome,
                    self._started_ns,
                    stream=self.stream,
                    consumer=self.consumer,
                )

    # -- durations for oncestream.metrics (only when someone observes) ---------

    def _timed_handler(self, msg: Message | list[Message], tx: LedgerTx) -> None:
        began = time.perf_counter()
        try:
            self.handler(msg, tx)
        finally:
            self.stats.observe("handler", time.perf_counter() - began)

    def _commit(self, tx: LedgerTx) -> None:
        if not self.stats.observers:
            tx.commit()
            return
        began = time.perf_counter()
        tx.commit()
        self.stats.observe("commit", time.perf_counter() - began)

    async def _call_db(self, func: Callable[..., Any], *args: Any) -> Any:
        if self.inline:
            return func(*args)
        return await self.ledger.call(func, *args)

    def _call_async_handler(self, msg: Message | list[Message], tx: LedgerTx) -> None:
        # On the DB worker thread: the handler's coroutine runs on the event loop
        # while its DB calls (sync psycopg) block only this thread.
        assert self.loop is not None
        coro = self.handler(msg, tx)
        assert inspect.isawaitable(coro)
        asyncio.run_coroutine_threadsafe(_awaited(coro), self.loop).result()


async def _awaited(awaitable: Awaitable[None]) -> None:
    await awaitable


def _rollback(tx: LedgerTx) -> None:
    tx.rollback()


def _fresh_only(fresh: list[bool], msgs: Sequence[Message]) -> list[Message]:
    """The messages ``fresh`` marks as not applied before (all of them, usually)."""
    if all(fresh):
        return list(msgs)
    return [msg for is_fresh, msg in zip(fresh, msgs, strict=True) if is_fresh]
