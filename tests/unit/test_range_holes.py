"""A direct get read of a replicated stream checks each sequence jump with the leader.

A replica missing a message in the middle of its store (finding 29 of the fault
campaign) steps over it as over a deleted one; the read must not return the stream
without it. Unfiltered reads only: a jump over deleted messages costs one
``STREAM.MSG.GET`` (answered by the leader alone), an append-only stream none.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from oncestream import MessageNotFound
from oncestream._retry import Unavailable
from oncestream.read._range import RangeReader


class _Leader:
    """``STREAM.MSG.GET`` with ``next_by_subj`` as the leader answers it."""

    def __init__(self, held: list[int]) -> None:
        self.held = held
        self.asked: list[int] = []
        self.options = SimpleNamespace(request_timeout=1.0)

    async def api(self, subject: str, body: dict[str, Any]) -> dict[str, Any]:
        assert subject == "STREAM.MSG.GET.S" and body["next_by_subj"] == ">"
        self.asked.append(body["seq"])
        later = [s for s in self.held if s >= body["seq"]]
        if not later:
            raise MessageNotFound("no message", code=404)
        return {"message": {"seq": later[0]}}


def _chunk(seqs: list[int]) -> Any:
    headers = [b"NATS/1.0\r\nNats-Stream: S\r\nNats-Sequence: %d\r\n\r\n" % s for s in seqs]
    return SimpleNamespace(datas=[b"x"] * len(seqs), headers=headers)


def _reader(leader: _Leader, start: int) -> RangeReader:
    reader = RangeReader(leader, "S", 1, 100, direct=True, replicated=True)  # type: ignore[arg-type]
    reader._next_seq = start
    return reader


async def test_a_jump_over_a_message_the_leader_holds_is_refused() -> None:
    leader = _Leader(held=list(range(1, 11)))
    with pytest.raises(Unavailable, match="skipped sequence 4, which the stream leader holds"):
        await _reader(leader, 1)._check_holes(_chunk([1, 2, 3, 5, 6]))
    assert leader.asked == [4]


async def test_jumps_over_deleted_messages_pass_with_one_request_each() -> None:
    leader = _Leader(held=[1, 2, 5, 6, 9])  # 3, 4, 7, 8 deleted
    await _reader(leader, 1)._check_holes(_chunk([1, 2, 5, 6, 9]))
    assert leader.asked == [3, 7]
    contiguous = _Leader(held=list(range(1, 11)))
    await _reader(contiguous, 3)._check_holes(_chunk([3, 4, 5]))
    assert contiguous.asked == []  # an append-only stream: no request
    # A chunk starting past the requested sequence (purged or aged out before it).
    late = _Leader(held=list(range(7, 11)))
    await _reader(late, 1)._check_holes(_chunk([7, 8]))
    assert late.asked == [1]


async def test_the_read_checks_each_chunk_before_returning_it() -> None:
    leader = _Leader(held=list(range(1, 11)))
    reader = _reader(leader, 1)
    reader.last, reader._started = 6, True
    chunk = _chunk([1, 2, 3, 5, 6])
    chunk.status, chunk.subjects, chunk.replies = None, [b"s"] * 5, [b""] * 5

    async def request() -> object:
        return object()

    async def wait(_: object) -> Any:
        return chunk

    async def release(_: object) -> None:
        return None

    reader._request, reader._wait, reader._release = request, wait, release  # type: ignore[method-assign]
    with pytest.raises(Unavailable, match="skipped sequence 4"):
        await reader._next_chunk()
    assert reader._next_seq == 1  # retried from the chunk's first sequence
