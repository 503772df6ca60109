"""One ack per batch on a consumer with ack policy ``all``: what may be acknowledged, and when.

With ack policy ``all`` an ack of stream sequence N acknowledges every message of
the consumer up to N, whoever it was delivered to (nats-server ``consumer.go``,
``processAckMsg``: every pending entry at or below N is removed and the ack floor
moves to N). So a Processor may ack N only when every message of the consumer at
or below N is finished: applied (its ledger row committed), found in the ledger,
or dead-lettered. It knows that from the delivery sequences:

- it resets the consumer to its ack floor when it starts: nothing is pending any
  more, and the server numbers deliveries from 1 again (``resetLocalStartingSeq``);
- the server delivers new messages in stream order, each with the next delivery
  sequence (a redelivery takes the next one too); while this Processor has
  received deliveries 1..k without a gap, every message of the consumer above the
  floor, up to the highest one delivered, reached it;
- a gap (deliveries lost in a reconnect) or a delivery sequence that goes back (a
  reset by someone else) ends that certainty: :meth:`AckFrontier.delivered`
  returns False, and the Processor drops the batch and resets the consumer again.

A message that failed (nak'ed for a retry) holds the frontier below it: the
messages after it are finished but acknowledged only once it is applied or
dead-lettered ("held"; in-progress acks keep them from being redelivered
meanwhile). The server ignores a nak whose delivery sequence is at or below the
ack floor's (``processNak``), and an ack below it (``processAckMsg``), so the
frontier never acks a message whose delivery came after that of a message above
it still unacknowledged.

Only one Processor may run on such a consumer: another one's deliveries would be
gaps here, and its reset would restart the delivery numbering under this one.
The Processor fences the consumer in the ledger (the last one started owns it).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from .._errors import JetStreamError
from .._message import Message

__all__ = ["AckFrontier"]


def _delivery(msg: Message) -> int | None:
    """The consumer (delivery) sequence of ``msg``; None when it is no JetStream delivery."""
    try:
        return msg.metadata.consumer_seq
    except JetStreamError:
        return None


class AckFrontier:
    """Which message one ack may cover, for a Processor alone on an ack-all consumer.

    Attributes:
        gap: why the deliveries stopped being contiguous ("" while they are).
        held_since: ``time.monotonic()`` since when messages are held (0.0: none).
    """

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        """The consumer was reset to its ack floor: nothing pending, deliveries from 1."""
        self.expected = 1
        self.gap = ""
        #: Failed messages waiting for a redelivery: stream sequence -> delivery sequence.
        self.open: dict[int, int] = {}
        #: Finished messages not yet acknowledged: stream sequence -> (delivery, reply).
        self.held: dict[int, tuple[int, str]] = {}
        self.held_since = 0.0

    def delivered(self, msgs: Sequence[Message]) -> bool:
        """Note deliveries (in the order received); False, with :attr:`gap`, at a gap."""
        if not msgs or self.gap:
            return not self.gap
        first, last = _delivery(msgs[0]), _delivery(msgs[-1])
        if first == self.expected and last == self.expected + len(msgs) - 1:
            self.expected += len(msgs)  # the server numbers deliveries in the order sent
            return True
        expected = self.expected
        for msg in msgs:
            got = _delivery(msg)
            if got is None:
                continue  # not a JetStream delivery (the Processor drops it)
            if got != expected:
                self.gap = (
                    f"deliveries {expected}..{got - 1} did not reach this Processor (lost "
                    "in a reconnect, or delivered to another client)"
                    if got > expected
                    else f"the delivery sequence went back from {expected} to {got} (the "
                    "consumer was reset by someone else)"
                )
                return False
            expected += 1
        self.expected = expected
        return True

    def settle(self, finished: Sequence[Message], failed: Sequence[Message]) -> str | None:
        """Note a batch's outcome; the reply subject whose ack covers what may be acked.

        Args:
            finished: applied, found applied, or dead-lettered (``finished[-1]`` has
                the highest sequence when nothing else is tracked: the usual batch).
            failed: nak'ed for a retry.

        Returns:
            The ``$JS.ACK`` subject to ack (with ack policy ``all``: every message up
            to its stream sequence), or None when nothing may be acked now.
        """
        if not failed and not self.open and not self.held:
            return finished[-1].reply if finished else None  # everything up to it finished
        for msg in finished:
            seq, delivery = msg.seq, _delivery(msg) or 0
            self.open.pop(seq, None)
            known = self.held.get(seq)
            if known is None or known[0] < delivery:
                self.held[seq] = (delivery, msg.reply)
        for msg in failed:
            seq, delivery = msg.seq, _delivery(msg) or 0
            self.held.pop(seq, None)
            self.open[seq] = max(self.open.get(seq, 0), delivery)
        return self._advance()

    def _advance(self) -> str | None:
        held, opened = self.held, self.open
        if not held:
            self.held_since = 0.0
            return None
        below = min(opened) if opened else None
        # From the top: the highest held message below every failed one whose delivery
        # came before that of every message above it still tracked.
        later = float("inf")
        for seq in sorted(held.keys() | opened.keys(), reverse=True):
            if seq in opened:
                later = min(later, opened[seq])
                continue
            delivery, reply = held[seq]
            if (below is None or seq < below) and delivery < later:
                for done in [s for s in held if s <= seq]:
                    del held[done]
                self.held_since = time.monotonic() if held else 0.0
                return reply
            later = min(later, delivery)
        if not self.held_since:
            self.held_since = time.monotonic()
        return None

    def dropped(self, seq: int) -> str | None:
        """The server stopped delivering ``seq`` (its ``max_deliver``) and it was settled
        (dead-lettered from the stream, or found applied): like :meth:`settle`."""
        if self.open.pop(seq, None) is None:
            return None
        return self._advance()

    def held_replies(self) -> list[str]:
        """Reply subjects of the finished messages not yet acknowledged."""
        return [reply for _, reply in self.held.values()]

    def kept_alive(self, now: float) -> None:
        """In-progress acks were sent for the held messages at ``now`` (``time.monotonic()``)."""
        self.held_since = now

    def interrupt(self, why: str) -> None:
        """Deliveries can no longer be counted on (:attr:`gap` becomes ``why`` unless one
        is already noted): the next batch resets the consumer instead of being applied."""
        if not self.gap:
            self.gap = why
