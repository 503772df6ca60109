"""The backward search on one subject with forward-only reads (``previous_message``).

A ProducerSession reads back past replayed copies of dead letters at the end of its
subject with the leader's ``STREAM.MSG.GET``, which reads a subject forward only.
The search is checked here against a plain scan, on streams where the subject's
messages are dense, sparse and interleaved with other subjects.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import random
from datetime import UTC, datetime

from oncestream.publish._records import previous_message
from oncestream.streams import StoredMessage

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _stream(seqs: list[int]) -> tuple[list[StoredMessage], list[int]]:
    """The subject's messages at ``seqs`` (sorted), and a counter of reads."""
    messages = [StoredMessage(stream="S", seq=s, subject="s.p", data=b"", time=NOW) for s in seqs]
    return messages, [0]


def _search(messages: list[StoredMessage], reads: list[int], before: int, floor: int) -> int | None:
    async def next_at(seq: int) -> StoredMessage | None:
        reads[0] += 1
        at = bisect.bisect_left(messages, seq, key=lambda m: m.seq)
        return messages[at] if at < len(messages) else None

    found = asyncio.run(previous_message(next_at, before, floor))
    return None if found is None else found.seq


def test_matches_a_scan_on_random_layouts() -> None:
    rng = random.Random(52)
    for _ in range(400):
        last = rng.randint(1, 3000)
        share = rng.choice([1.0, 0.5, 0.01])  # dense, interleaved, sparse
        seqs = sorted({s for s in range(1, last + 1) if rng.random() < share} | {last})
        messages, reads = _stream(seqs)
        before = rng.choice([last, rng.randint(1, last)])
        floor = rng.choice([0, 0, rng.randint(0, before)])
        expected = max((s for s in seqs if floor < s < before), default=None)
        reads[0] = 0
        assert _search(messages, reads, before, floor) == expected, (seqs, before, floor)
        distance = before - (expected if expected is not None else floor)
        assert reads[0] <= 2 * math.ceil(math.log2(distance + 1)) + 2, (before, expected, reads)


def test_one_read_when_the_message_is_right_before() -> None:
    messages, reads = _stream([1, 2, 3, 9, 10])
    assert _search(messages, reads, 10, 0) == 9 and reads[0] == 1


def test_none_before_the_first_message_or_at_the_floor() -> None:
    messages, reads = _stream([5, 9])
    assert _search(messages, reads, 5, 0) is None
    assert _search(messages, reads, 9, 5) is None  # the floor itself is not searched
    assert _search(messages, reads, 9, 4) == 5
    assert _search(messages, reads, 1, 0) is None
