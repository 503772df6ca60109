"""What the Processor keeps of the messages it handed back, and which ones are forgotten."""

from __future__ import annotations

import time

from oncestream.process._handedback import HandedBack


def test_only_unfinished_messages_at_or_below_the_floor_are_forgotten() -> None:
    held = HandedBack()
    held.note(7, attempts=2)
    held.note(9, attempts=1)
    held.note(12, attempts=3)
    held.finished([9])
    read_at = time.monotonic()
    assert held.forgotten(ack_floor=10, read_at=read_at) == [(7, 2)]
    assert len(held) == 2  # 12: still pending on the server; 7: being settled
    assert held.forgotten(ack_floor=10, read_at=read_at) == []  # told once


def test_a_message_handed_back_after_the_read_is_not_forgotten() -> None:
    held = HandedBack()
    read_at = time.monotonic()
    held.note(7, attempts=1)  # after the ack floor was read: it may be pending still
    assert held.forgotten(ack_floor=10, read_at=read_at) == []
    assert held.forgotten(ack_floor=10, read_at=time.monotonic() + 1) == [(7, 1)]


def test_handed_back_again_counts_its_latest_attempts() -> None:
    held = HandedBack()
    held.note(7, attempts=1)
    held.note(7, attempts=2)
    assert held.forgotten(ack_floor=7, read_at=time.monotonic() + 1) == [(7, 2)]


def test_pruning_stays_below_a_forgotten_message_until_it_is_settled() -> None:
    """Finding 31: a prune horizon over a forgotten message made its settling take it as
    applied (no letter). The lowest unfinished one bounds pruning until it is finished."""
    held = HandedBack()
    assert held.lowest() == 0  # nothing held: pruning unbounded
    held.note(12, attempts=1)
    held.note(7, attempts=2)
    assert held.lowest() == 7
    assert held.forgotten(ack_floor=10, read_at=time.monotonic() + 1) == [(7, 2)]
    assert held.lowest() == 7  # told, not settled yet
    held.finished([7])  # dead-lettered
    assert held.lowest() == 12
    held.clear()
    assert (held.lowest(), len(held)) == (0, 0)
