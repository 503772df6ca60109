"""The run of a load: publish, track what is confirmed, record progress.

Records are published pipelined. :class:`Confirmed` follows them in input
order and knows the last line up to which every record is confirmed; the
:class:`~oncestream.load._progress.ProgressStore` records that point in the server
so that a re-run, however late, resumes after it (see ``_progress``).

The run stops reading input at the first publish that fails for good (the
server did not answer for the whole retry horizon, or refused the stream), at
a malformed line with ``on_error="stop"``, or when its stop event is set (Ctrl-C
in ``oncestream publish``); it then waits at most one connect timeout for the
records in flight and records progress.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import secrets
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .._errors import (
    ConfigError,
    JetStreamError,
    MessageTooLarge,
    OncestreamError,
    PublishError,
    StreamMismatch,
    StreamNotFound,
)
from ..publish import PubAck, Publisher
from ._input import (
    IdRefused,
    Item,
    PrefixHasher,
    RecordError,
    SubjectTemplate,
    record_id,
)
from ._progress import ConcurrentRun, ProgressStore, PublishProgress

__all__ = [
    "Confirmed",
    "ProgressKeeper",
    "RunState",
    "Tally",
    "drain",
    "is_config_failure",
    "new_run_id",
    "publish_records",
]

# Progress is recorded at least this often (seconds) while publishing.
_RECORD_EVERY = 1.0


@dataclass
class Tally:
    """What happened to the input."""

    stored: int = 0
    duplicates: int = 0
    already: int = 0
    failed: int = 0
    malformed: int = 0
    max_seq: int = 0
    errors: list[str] = field(default_factory=list)
    fatal: BaseException | None = None
    fatal_subject: str = ""

    def on_done(self, line: int, subject: str, future: asyncio.Future[PubAck]) -> None:
        if future.cancelled():
            self.failed += 1
            return
        exc = future.exception()
        if exc is not None:
            self.failed += 1
            if self.fatal is None:
                self.fatal, self.fatal_subject = exc, subject
            if len(self.errors) < 20:
                self.errors.append(f"line {line}: {type(exc).__name__}: {exc}")
            return
        ack = future.result()
        if ack.seq > self.max_seq:
            self.max_seq = ack.seq
        if ack.duplicate:
            self.duplicates += 1
        else:
            self.stored += 1


class Confirmed:
    """Input-ordered records in flight; the line up to which all are confirmed.

    Each entry keeps a *floor*: the highest PubAck sequence seen before the
    record was first sent. Its copy, if stored, has a higher sequence, so the
    floor of the first unconfirmed entry bounds where a re-run must look.
    """

    def __init__(self, line: int, floor: int, inherited_to: int, inherited_floor: int) -> None:
        self.line = line
        self._entries: deque[tuple[int, asyncio.Future[PubAck] | None, int]] = deque()
        # Lines up to inherited_to may have been sent by an earlier run, whose
        # copies are only known to lie above inherited_floor.
        self._inherited_to = inherited_to
        self._inherited_floor = inherited_floor
        self._idle_floor = inherited_floor if line < inherited_to else floor

    def add(self, line: int, future: asyncio.Future[PubAck] | None, floor: int) -> None:
        if line <= self._inherited_to:
            floor = min(floor, self._inherited_floor)
        self._entries.append((line, future, floor))

    def skip(self, line: int) -> None:
        """A line with nothing to publish (malformed and skipped, or already stored)."""
        self.add(line, None, self.scan_from)

    def advance(self, seen_seq: int) -> None:
        entries = self._entries
        while entries:
            line, future, _ = entries[0]
            if future is not None and (
                not future.done() or future.cancelled() or future.exception() is not None
            ):
                break
            entries.popleft()
            self.line = line
        if not entries:
            # Nothing in flight: what is sent next gets a floor of at least seen_seq,
            # unless lines an earlier run may have sent are still ahead.
            inherited = self.line < self._inherited_to
            self._idle_floor = self._inherited_floor if inherited else seen_seq

    @property
    def scan_from(self) -> int:
        if self._entries:
            return self._entries[0][2]
        return self._idle_floor

    @property
    def first_unconfirmed(self) -> int | None:
        return self._entries[0][0] if self._entries else None


@dataclass
class RunState:
    """Shared between the loop, whoever may stop it (``stop``) and the result."""

    stop: asyncio.Event = field(default_factory=asyncio.Event)
    stopped: bool = False
    read_to: int = 0
    eof: bool = False
    progress_error: str | None = None
    #: A record's id was refused (it would be read as another id): bad input, exit 2.
    id_refused: bool = False
    started: float = field(default_factory=time.monotonic)

    @property
    def interrupted(self) -> bool:
        """The stop event was set: the run was asked to stop."""
        return self.stop.is_set()


class ProgressKeeper:
    """Writes progress records: reservations ahead of sending, and periodic snapshots."""

    def __init__(
        self,
        store: ProgressStore | None,
        base: PublishProgress | None,
        confirmed: Confirmed,
        hasher: PrefixHasher | None = None,
    ) -> None:
        self.store = store
        self.hasher = hasher
        self.base = base
        self.confirmed = confirmed
        self.reserved = base.reserved if base is not None else 0
        self.chunk = 10_000
        self._last_write = time.monotonic()
        self._task: asyncio.Task[None] | None = None
        self.error: OncestreamError | None = None
        #: False once the file is known to have changed in place: the prefix hash read
        #: since is of other bytes than those published.
        self.prefix_trusted = True

    def _record(self, *, done: bool = False) -> PublishProgress | None:
        if self.base is None:
            return None
        prefix: dict[str, Any] = {}
        if self.hasher is not None and self.prefix_trusted:
            self.hasher.advance_to(self.confirmed.line)
            if self.hasher.line < self.confirmed.line:  # the file lost lines meanwhile
                self.prefix_trusted = False
            else:
                prefix = {"prefix_sha256": self.hasher.hexdigest(), "offset": self.hasher.offset}
        if not self.prefix_trusted:
            prefix = {"prefix_sha256": "", "offset": 0}
        return self.base.advanced(
            **prefix,
            line=self.confirmed.line,
            scan_from=self.confirmed.scan_from,
            reserved=self.reserved,
            done=done,
        )

    async def reserve(self, line: int) -> None:
        """Record that lines up to ``line`` (and a chunk beyond) may be sent."""
        if self.store is None or line <= self.reserved:
            return
        self.reserved = line + self.chunk
        record = self._record()
        assert record is not None
        await self.store.write(record)
        self._last_write = time.monotonic()

    def maybe_snapshot(self) -> None:
        """Record progress in the background, at most every second.

        Raises:
            ConcurrentRun: an earlier snapshot found another run of this file.
        """
        if isinstance(self.error, ConcurrentRun):
            raise self.error
        if self.store is None or (self._task is not None and not self._task.done()):
            return
        if time.monotonic() - self._last_write < _RECORD_EVERY:
            return
        self._last_write = time.monotonic()
        record = self._record()
        if record is not None:
            self._task = asyncio.create_task(self._write_quietly(record))

    async def _write_quietly(self, record: PublishProgress) -> None:
        assert self.store is not None
        try:
            await self.store.write(record)
        except OncestreamError as exc:  # the final write, or the next re-run, catches up
            self.error = exc

    async def final(self, *, done: bool, budget: float) -> str | None:
        """Write the final record; the reason when it could not be written."""
        if self.store is None:
            return None
        if not self.store.conn.is_connected:
            return "the server is unreachable"
        if self._task is not None:
            try:
                async with asyncio.timeout(budget):
                    await self._task
            except TimeoutError:
                pass
        if isinstance(self.error, ConcurrentRun):
            raise self.error
        record = self._record(done=done)
        assert record is not None
        try:
            async with asyncio.timeout(budget):
                await self.store.write(record)
        except TimeoutError:
            return "the server did not confirm it in time"
        except ConcurrentRun:
            raise
        except OncestreamError as exc:
            return str(exc)
        return None


async def _in_order(
    items: Iterator[Item] | AsyncIterator[Item],
) -> AsyncGenerator[Item, None]:
    if isinstance(items, AsyncGenerator):
        async with contextlib.aclosing(items):  # a reader thread stops with the run
            async for item in items:
                yield item
    elif isinstance(items, AsyncIterator):
        async for item in items:
            yield item
    else:
        for item in items:
            yield item


async def publish_records(
    pub: Publisher,
    items: Iterator[Item] | AsyncIterator[Item],
    *,
    subject: SubjectTemplate,
    id_field: str | None,
    skip_on_error: bool,
    found: set[str],
    confirmed: Confirmed,
    keeper: ProgressKeeper,
    tally: Tally,
    state: RunState,
    on_line: Callable[[int], None],
    on_malformed: Callable[[str], None],
    rate: float | None = None,
) -> None:
    """Publish ``items`` until the input ends or the run must stop (see module docstring).

    ``on_line`` is told the line reached every 256 lines, ``on_malformed`` each
    malformed record (``line N: why``). ``rate``: at most this many records per
    second, counted from this call.
    """

    def malformed(line: int, text: object) -> bool:
        """Count a bad record; True when the run stops on it (``on_error="stop"``)."""
        tally.malformed += 1
        if isinstance(text, IdRefused):
            state.id_refused = True
        on_malformed(str(text))
        if not skip_on_error:
            state.stopped = True
            return True
        confirmed.skip(line)
        return False

    count = 0
    paced_from = time.monotonic()
    async with contextlib.aclosing(_in_order(items)) as ordered:
        async for item in ordered:
            if state.interrupted or tally.fatal is not None:
                break
            if isinstance(item, int):
                state.read_to = item
                if item % 256 == 0:
                    on_line(item)
                continue
            if isinstance(item, RecordError):
                if malformed(item.line, item):
                    break
                continue
            try:
                subj = subject.render(item)
                msg_id = record_id(item, id_field)
                if msg_id in found:
                    tally.already += 1
                    confirmed.skip(item.line)
                    continue
                try:
                    await keeper.reserve(item.line)
                except ConcurrentRun:
                    raise
                except OncestreamError as exc:
                    # Lines past the recorded reservation may not be sent.
                    state.progress_error = f"{type(exc).__name__}: {exc}"
                    state.stopped = True
                    break
                if state.interrupted or tally.fatal is not None:
                    break
                floor = tally.max_seq
                future = await pub.publish(subj, item.data, msg_id=msg_id)
            except (RecordError, MessageTooLarge, ConfigError) as exc:
                if isinstance(exc, ConcurrentRun):
                    raise
                text = exc if isinstance(exc, RecordError) else f"line {item.line}: {exc}"
                if malformed(item.line, text):
                    break
                continue
            future.add_done_callback(functools.partial(tally.on_done, item.line, subj))
            confirmed.add(item.line, future, floor)
            count += 1
            if count % 512 == 0:
                confirmed.advance(tally.max_seq)
                keeper.maybe_snapshot()
                await asyncio.sleep(0)
            if rate is not None:
                await _pace(paced_from + count / rate, state, confirmed, keeper, tally)
        else:
            state.eof = True


async def _pace(
    due: float, state: RunState, confirmed: Confirmed, keeper: ProgressKeeper, tally: Tally
) -> None:
    """Wait until ``due`` (monotonic) for the rate; the stop event ends the wait.

    Progress is recorded while waiting (at most every second), so a slow run
    killed mid-way resumes close to where it was.
    """
    if due <= time.monotonic():
        return
    confirmed.advance(tally.max_seq)
    keeper.maybe_snapshot()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(due - time.monotonic()):
            await state.stop.wait()


async def drain(pub: Publisher, tally: Tally, state: RunState, budget: float) -> None:
    """Wait for the publishes in flight: all of them, or ``budget`` seconds when stopping early.

    The stop event set while waiting for all of them switches to the ``budget`` wait.
    """
    if not (state.interrupted or state.stopped or tally.fatal is not None):
        flushing = asyncio.ensure_future(pub.flush())
        woken = asyncio.ensure_future(state.stop.wait())
        await asyncio.wait({flushing, woken}, return_when=asyncio.FIRST_COMPLETED)
        woken.cancel()
        if flushing.done():
            if not flushing.cancelled():
                flushing.exception()  # each failure is counted by Tally.on_done
        else:
            flushing.cancel()
    deadline = time.monotonic() + budget
    try:
        await pub.flush(timeout=budget)
    except (PublishError, JetStreamError, TimeoutError):
        pass  # each failure is counted by Tally.on_done
    try:
        async with asyncio.timeout(max(0.1, deadline - time.monotonic())):
            await pub.close()
    except (PublishError, JetStreamError, TimeoutError):
        pass


def is_config_failure(exc: BaseException | None) -> bool:
    """A failed publish that no retry can fix: the subject belongs to another or no stream."""
    return isinstance(exc, StreamMismatch | StreamNotFound)


def new_run_id() -> str:
    return secrets.token_hex(8)
