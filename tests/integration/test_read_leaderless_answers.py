"""What a read does with each answer a replicated stream's STREAM.INFO can get between
leaders, on a real server whose answers are replaced at the connection: a replica's own
state (no leader named), 10008 (no meta leader), 10118 (stream offline), no answer.

Each is waited out, up to the read's patience, and the read then returns every message
once; following, the last range is kept. Found by a break test of the fix for the
campaign's leaderless reads (tests/integration/test_read_leaderless.py): the first
version retried only the leaderless answer and a timeout, and the follow loop none.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

import pytest

from harness import publish_n
from oncestream import Connection, JetStreamError, OperationTimeout
from oncestream.read import iter_messages
from tests.integration.test_atomic_publisher import until

COUNT = 30


def _behind(info: dict[str, Any]) -> dict[str, Any]:
    """The answer of an R3 stream's replica while the stream has no leader: its own state."""
    fake = copy.deepcopy(info)
    fake["config"]["num_replicas"] = 3
    fake["cluster"] = {"name": "c", "replicas": [{"name": "n2", "current": False}]}
    fake["state"]["last_seq"] = fake["state"]["messages"] = 0
    return fake


def _answer_first(conn: Connection, answers: list[Any]) -> list[int]:
    """``conn.stream_info`` gives ``answers`` first (an error to raise, or a function of the
    real answer), then the server's own; the calls are counted."""
    real = conn.stream_info
    calls: list[int] = []

    async def stream_info(stream: str) -> dict[str, Any]:
        calls.append(1)
        if answers:
            answer = answers.pop(0)
            if isinstance(answer, BaseException):
                raise answer
            return answer(await real(stream))  # type: ignore[no-any-return]
        return await real(stream)

    conn.stream_info = stream_info  # type: ignore[method-assign]
    return calls


ANSWERS: dict[str, Callable[[], list[Any]]] = {
    "replica-behind": lambda: [_behind] * 3,
    "no-meta-leader": lambda: [JetStreamError("unavailable", code=503, err_code=10008)] * 2,
    "stream-offline": lambda: [JetStreamError("stream is offline", code=500, err_code=10118)],
    "no-answer": lambda: [OperationTimeout("$JS.API.STREAM.INFO.D: timed out")],
}


@pytest.mark.parametrize("answer", list(ANSWERS))
async def test_a_read_waits_out_an_answer_between_leaders(
    conn: Connection, make_stream: Any, answer: str
) -> None:
    await make_stream("D", ("d.>",), allow_direct=True)
    await publish_n(conn, "d.x", COUNT)
    answers = ANSWERS[answer]()
    calls = _answer_first(conn, list(answers))
    seqs = [m.seq async for m in iter_messages(conn, "D", patience=20)]
    assert seqs == list(range(1, COUNT + 1))
    assert len(calls) == len(answers) + 1  # waited until the server's own answer


async def test_following_keeps_its_range_while_stream_info_is_unanswered(
    conn: Connection, make_stream: Any
) -> None:
    await make_stream("D", ("d.>",), allow_direct=True)
    await publish_n(conn, "d.x", 5)
    stop = asyncio.Event()
    seen: list[int] = []

    async def follow() -> None:
        async for msg in iter_messages(conn, "D", follow=True, stop=stop, poll=0.05):
            seen.append(msg.seq)

    task = asyncio.create_task(follow())
    try:

        async def printed(n: int) -> bool:
            if task.done():
                task.result()  # its error, if it ended
            return len(seen) >= n

        await until(lambda: printed(5), "the first five messages", 10)
        _answer_first(conn, [OperationTimeout("$JS.API.STREAM.INFO.D: timed out"), _behind])
        await publish_n(conn, "d.x", 5, start=5)
        await until(lambda: printed(10), "the five published after", 10)
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
    assert seen == list(range(1, 11))
