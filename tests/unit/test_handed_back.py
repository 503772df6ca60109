"""What the Processor keeps of the messages it handed back, and which ones are forgotten."""

from __future__ import annotations

import time

from oncestream import LedgerError
from oncestream.process._handedback import HandedBack, HandedBackRecord


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


def test_the_record_is_loaded_and_kept_in_step() -> None:
    """Finding 32: the ledger's record of the handed-back list, read by the next instance."""
    held = HandedBack()
    assert not held.loaded
    held.note(9, attempts=1)
    held.load({7: 3, 9: 1})  # an earlier instance's 7; this one's 9 is kept as it is
    assert held.loaded and held.lowest() == 7 and len(held) == 2
    assert held.changes() == ({}, [])  # the record holds both already
    held.note(12, attempts=2)
    held.note(9, attempts=2)
    assert held.changes() == ({9: 2, 12: 2}, [])
    held.recorded({9: 2, 12: 2}, [])
    assert held.forgotten(ack_floor=10, read_at=time.monotonic() + 1) == [(7, 3), (9, 2)]
    assert held.changes() == ({}, [])  # being settled: stays recorded
    held.finished([7, 12])
    assert held.changes() == ({}, [7, 12])
    held.recorded({}, [7, 12])
    held.clear()  # demoted: the record stays for the next active instance
    assert not held.loaded and held.changes() == ({}, [])


async def test_the_record_is_kept_by_the_active_instance_only() -> None:
    written: list[tuple[dict[int, int], list[int]]] = []
    active = [False]
    stored = {7: 3}

    async def read() -> dict[int, int]:
        return dict(stored)

    async def write(noted: dict[int, int], finished: list[int]) -> None:
        written.append((noted, finished))

    held = HandedBack()
    record = HandedBackRecord(read, write, lambda: active[0])
    await record.sync(held)
    assert not held.loaded and written == []  # a standby neither reads nor writes
    active[0] = True
    await record.sync(held)
    assert held.loaded and held.lowest() == 7 and written == []
    held.finished([7])
    held.note(8, attempts=1)
    await record.sync(held)
    assert written == [({8: 1}, [7])]
    await record.sync(held)
    assert len(written) == 1  # nothing changed since


async def test_a_failing_record_is_tried_again() -> None:
    calls = 0

    async def read() -> dict[int, int]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise LedgerError("database is locked")
        return {}

    async def write(noted: dict[int, int], finished: list[int]) -> None:
        raise AssertionError("nothing to write")

    held = HandedBack()
    record = HandedBackRecord(read, write, lambda: True)
    await record.sync(held)  # logged, not raised
    assert not held.loaded
    await record.sync(held)
    assert held.loaded
