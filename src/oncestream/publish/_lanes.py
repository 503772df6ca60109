"""What the Publisher's two ingest lanes call back into: one Protocol for its callbacks.

The Publisher keeps its unconfirmed messages in two tables, one per lane: the
retry table of the pipelined-ack lane (:class:`~oncestream.publish._retry.RetryTable`)
and the fast-ingest batches (:class:`~oncestream.publish._fast_ingest.BatchTable`).
The Publisher owns what they act on: the socket's write queue, the futures and
tallies, the in-flight count and the publishes waiting for it. Both tables reach
it through a :class:`Lanes`, so mypy checks that the Publisher and both lanes
agree on every callback (``fail`` is shared by the two). What only the fast
batches call, with their own types (``settle``), is
:class:`~oncestream.publish._fast_ingest.BatchLanes`, a :class:`Lanes` too: this
module knows nothing of the batches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .._errors import JetStreamError
    from ._frames import Pending

__all__ = ["Lanes"]


class Lanes(Protocol):
    """The Publisher as its retry table and its fast-ingest batches see it."""

    def fail(self, entry: Pending, exc: BaseException) -> None:
        """Complete ``entry`` with ``exc`` (its future, or its tally's errors); frees its slot."""
        ...

    def queue(self, frame: bytes) -> None:
        """Queue ``frame`` for the socket; the caller writes (:meth:`write_out`)."""
        ...

    def write_out(self) -> None:
        """Write the queued frames now."""
        ...

    def send_now(self, frame: bytes) -> None:
        """Queue ``frame`` and write at once (a batch's end-of-batch or ping message)."""
        ...

    def to_acks(self, entries: list[Pending], *, send: bool = True) -> None:
        """Re-send entries a batch did not confirm on the ack lane, same msg ids.

        Without ``send`` they wait in the retry table for its re-send after a reconnect.
        """
        ...

    def wake(self) -> None:
        """Let publishes waiting for a flow window or an in-flight slot look again."""
        ...

    def refuse(self, exc: JetStreamError) -> None:
        """The stream refuses fast batches: publish on the ack lane from now on."""
        ...

    def tick(self) -> None:
        """Check the fast batches' deadlines (the retry table's ticker calls it)."""
        ...
