"""The messages a Processor handed back (nak) and has not finished since, and the
ones its consumer forgot.

A nak'ed message waits on the server for its redelivery (after the nak's backoff).
After a restart of a server whose store met a write error (its disk full), nats-server
was seen to move a consumer's ack floor past such messages (the campaign of
2026-11-29, trials 8, 20 and 36; nats-io/nats-server#5727 reports the same of nak'ed
messages): nothing pending, nothing unacknowledged, never delivered again, so neither
applied nor dead-lettered, and nothing said so. The Processor keeps the sequences it
handed back; once the consumer's ack floor is past one that it never finished, that
message is settled as one the server stopped delivering
(:class:`._maxdeliver.DroppedMessages`: dead-lettered, or the run fails naming the
consumer reset that delivers it again).

Ledger pruning stays below the lowest of them, until it is settled: pruning follows the
consumer's ack floor, and a horizon over a forgotten message would make its settling
find it "applied" and finish it without a letter (the campaign of 2026-11-30, trials
44, 59 and 81: docs/guarantees.md, finding 31).

The list is recorded in the ledger (table ``oncestream_handed_back``, written within
:data:`RECORD_INTERVAL` of a change by :class:`HandedBackRecord`), and the instance that
runs the consumer next (a restart, a standby's takeover) reads it before it prunes:
a message an instance nak'ed, that the server then forgot while that instance was
killed, stopped or demoted, is still found (the campaign of 2026-11-30, trial 36:
docs/guarantees.md, finding 32). Not found: one nak'ed within that second before a
stop or a kill (not recorded yet; a stop does not wait for the ledger, which may be
what hangs), and any with ``bind=True``, which reads no consumer info.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable

from .._connection import Connection
from .._errors import OncestreamError

__all__ = [
    "FORGOTTEN_CHECK",
    "RECORD_INTERVAL",
    "HandedBack",
    "HandedBackRecord",
    "watch_forgotten",
]

log = logging.getLogger(__name__)

#: Seconds between two reads of the consumer's ack floor while messages are handed back.
FORGOTTEN_CHECK = 5.0

#: Seconds at most between a change of the handed-back list and its record in the ledger
#: (one small transaction per round with a change: a poison flood costs one a second).
RECORD_INTERVAL = 1.0


class HandedBack:
    """Sequences handed back for redelivery and not finished since.

    Example::

        held = HandedBack()
        held.note(7, attempts=2)        # nak'ed after its 2nd failure
        held.lowest()                   # 7: pruning stays below it
        held.finished([7])              # applied or dead-lettered after all
        held.forgotten(ack_floor=9, read_at=time.monotonic())  # [] now
    """

    def __init__(self) -> None:
        self._held: dict[int, tuple[int, float]] = {}
        #: Forgotten by the server and being settled: still not finished.
        self._settling: set[int] = set()
        #: What the ledger holds of this list, as far as this instance knows: ``{seq: attempts}``.
        self._recorded: dict[int, int] = {}
        #: The ledger's record was read (see :meth:`load`): pruning waits for it.
        self.loaded = False

    def __len__(self) -> int:
        return len(self._held) + len(self._settling)

    def note(self, seq: int, attempts: int) -> None:
        """``seq`` was handed back after ``attempts`` deliveries."""
        self._held[seq] = (attempts, time.monotonic())

    def finished(self, seqs: Iterable[int]) -> None:
        """These were applied, found applied, or dead-lettered."""
        held, settling = self._held, self._settling
        if held or settling:
            for seq in seqs:
                held.pop(seq, None)
                settling.discard(seq)

    def lowest(self) -> int:
        """The lowest sequence handed back and not finished, forgotten ones being settled
        included (0: none). Pruning stays below it: a prune horizon over it would make
        its settling find it "applied" once the server forgot it (see :meth:`forgotten`)."""
        return min((*self._held, *self._settling), default=0)

    def clear(self) -> None:
        """Forget every one (this instance stopped being the active one): the ledger's
        record stays for the next active instance, which reads it again."""
        self._held.clear()
        self._settling.clear()
        self._recorded.clear()
        self.loaded = False

    def load(self, recorded: dict[int, int]) -> None:
        """Take the ledger's record (``{seq: attempts}``, written by an earlier instance
        or this one) as handed back, as of now; those finished since are settled as
        found applied or dead-lettered."""
        now = time.monotonic()
        for seq, attempts in recorded.items():
            if seq not in self._held and seq not in self._settling:
                self._held[seq] = (attempts, now)
        self._recorded.update(recorded)
        self.loaded = True

    def changes(self) -> tuple[dict[int, int], list[int]]:
        """What the ledger's record lacks (``{seq: attempts}``) and what it holds that is
        finished (sequences): written by :meth:`HandedBackRecord.sync`, then
        :meth:`recorded`."""
        recorded = self._recorded
        noted = {
            seq: attempts
            for seq, (attempts, _since) in self._held.items()
            if recorded.get(seq) != attempts
        }
        finished = [seq for seq in recorded if seq not in self._held and seq not in self._settling]
        return noted, finished

    def recorded(self, noted: dict[int, int], finished: Iterable[int]) -> None:
        """The ledger now holds ``noted`` and no longer ``finished``."""
        self._recorded.update(noted)
        for seq in finished:
            self._recorded.pop(seq, None)

    def forgotten(self, ack_floor: int, read_at: float) -> list[tuple[int, int]]:
        """The handed-back messages the server took as acknowledged: at or below
        ``ack_floor``, read at ``time.monotonic()`` ``read_at``, and handed back before
        that (a later one was still pending then), with their attempts; no longer held,
        but kept below pruning (:meth:`lowest`) until :meth:`finished`.
        """
        gone = sorted(
            (seq, attempts)
            for seq, (attempts, since) in self._held.items()
            if seq <= ack_floor and since < read_at
        )
        for seq, _ in gone:
            del self._held[seq]
            self._settling.add(seq)
        return gone


class HandedBackRecord:
    """The ledger's record of a :class:`HandedBack` list, kept by the active instance.

    Args:
        read: reads the record (``Ledger.handed_back`` of the stream and consumer).
        write: writes ``(noted, finished)`` (``Ledger.record_handed_back``).
        active: whether this instance applies now (a pinned standby neither reads nor
            writes: the active instance owns the record).

    Example::

        record = HandedBackRecord(read, write, lambda: True)
        await record.sync(held)   # read once, then write what changed
    """

    def __init__(
        self,
        read: Callable[[], Awaitable[dict[int, int]]],
        write: Callable[[dict[int, int], list[int]], Awaitable[None]],
        active: Callable[[], bool],
    ) -> None:
        self._read = read
        self._write = write
        self._active = active

    async def sync(self, held: HandedBack) -> None:
        """Read the record into ``held`` if it was not yet, then write what changed (best
        effort: a ledger that fails now is tried next time, logged at debug)."""
        if not self._active():
            return
        try:
            if not held.loaded:
                held.load(await self._read())
            noted, finished = held.changes()
            if noted or finished:
                await self._write(noted, finished)
                held.recorded(noted, finished)
        except (OncestreamError, OSError) as exc:
            log.debug("handed-back messages not recorded now: %s", exc)


async def watch_forgotten(
    conn: Connection,
    stream: str,
    consumer: str,
    held: HandedBack,
    forgotten: Callable[[int, int], None],
    record: HandedBackRecord | None = None,
) -> None:
    """Run until cancelled: keep ``record`` (read at once, then written within
    :data:`RECORD_INTERVAL` of a change) and, while messages are handed back, read the
    consumer's ack floor every :data:`FORGOTTEN_CHECK` seconds and call
    ``forgotten(seq, attempts)`` for each one it passed (best effort: a read that fails
    is tried next time)."""
    checked = time.monotonic()
    while True:
        if record is not None:
            await record.sync(held)
        tick = FORGOTTEN_CHECK if record is None else min(RECORD_INTERVAL, FORGOTTEN_CHECK)
        await asyncio.sleep(tick)
        if not held or time.monotonic() - checked < FORGOTTEN_CHECK - 0.01:
            continue
        checked = time.monotonic()
        read_at = time.monotonic()
        try:
            info = await conn.consumer_info(stream, consumer)
        except (OncestreamError, OSError) as exc:
            log.debug("%s/%s: ack floor not read: %s", stream, consumer, exc)
            continue
        floor = int((info.get("ack_floor") or {}).get("stream_seq") or 0)
        for seq, attempts in held.forgotten(floor, read_at):
            # Another instance of a shared consumer may have applied it: the settling
            # finds it in the ledger then, and only a message found unfinished is told.
            log.info(
                "%s/%s: the ack floor (%d) is past seq %d, handed back after %d failed "
                "attempts and not finished here: settling it",
                stream, consumer, floor, seq, attempts,
            )  # fmt: skip
            forgotten(seq, attempts)
