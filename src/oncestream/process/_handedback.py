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

Only what this run handed back is known: a message a killed instance nak'ed and the
server then forgot is not found (nor is one with ``bind=True``, which reads no
consumer info).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from .._connection import Connection
from .._errors import OncestreamError

__all__ = ["FORGOTTEN_CHECK", "HandedBack", "watch_forgotten"]

log = logging.getLogger(__name__)

#: Seconds between two reads of the consumer's ack floor while messages are handed back.
FORGOTTEN_CHECK = 5.0


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
        """Forget every one (this instance stopped being the active one)."""
        self._held.clear()
        self._settling.clear()

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


async def watch_forgotten(
    conn: Connection,
    stream: str,
    consumer: str,
    held: HandedBack,
    forgotten: Callable[[int, int], None],
) -> None:
    """Run until cancelled: while messages are handed back, read the consumer's ack
    floor every :data:`FORGOTTEN_CHECK` seconds and call ``forgotten(seq, attempts)``
    for each one it passed (best effort: a read that fails is tried next time)."""
    while True:
        await asyncio.sleep(FORGOTTEN_CHECK)
        if not held:
            continue
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
