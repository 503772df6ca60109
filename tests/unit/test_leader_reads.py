"""Reads that decide what to publish again take the stream's end from its leader.

While a replicated stream has no leader, each replica answers ``STREAM.INFO`` with
its own state, whose ``last_seq`` may be older than the leader's; a direct get may
be served by a replica behind the leader, or by a mirror with ``mirror_direct``
(it answers its origin's direct gets) on a stream of any replica count. A read that
ends early there finds stored ids absent, and they are sent again. The session's
own reads are tested on a real cluster (tests/integration/test_stale_replica_reads.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from oncestream._retry import Unavailable
from oncestream.load._input import SubjectTemplate
from oncestream.load._plan import check_target
from oncestream.publish import _duplicates
from oncestream.read import _ids


def _info(last: int, leader: str | None, replicas: int = 3) -> dict[str, Any]:
    info: dict[str, Any] = {
        "config": {
            "name": "S",
            "subjects": ["s.>"],
            "allow_direct": True,
            "num_replicas": replicas,
            "duplicate_window": 120_000_000_000,
        },
        "state": {"first_seq": 1, "last_seq": last, "messages": last},
        "created": "2026-11-29T00:00:00Z",
    }
    if leader is not None:
        info["cluster"] = {"leader": leader}
    return info


class _Conn:
    """Answers ``STREAM.INFO`` with ``answers`` in turn (the last one from then on)."""

    def __init__(self, *answers: dict[str, Any]) -> None:
        self.answers = list(answers)
        self.asked = 0

    async def stream_info(self, stream: str) -> dict[str, Any]:
        self.asked += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    async def api(self, subject: str, body: Any = None) -> dict[str, Any]:
        assert subject == "STREAM.NAMES"
        return {"streams": ["S"]}


async def test_a_load_checks_its_target_with_the_leader_not_a_leaderless_replica() -> None:
    # The resume scan ends at this last_seq: an older one leaves ids stored after it unfound.
    conn = _Conn(_info(5, leader=""))
    with pytest.raises(Unavailable, match="no leader"):
        await check_target(conn, "S", SubjectTemplate("s.x"))  # type: ignore[arg-type]
    led = await check_target(_Conn(_info(10, leader="n1")), "S", SubjectTemplate("s.x"))  # type: ignore[arg-type]
    assert led["state"]["last_seq"] == 10


async def test_the_duplicate_finder_searches_to_the_leaders_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    searched: list[tuple[int, int]] = []

    async def locate(conn: Any, stream: str, ids: Any, first: int, last: int, **_: Any) -> Any:
        searched.append((first, last))
        return {}

    async def window_start(*_: Any) -> int:
        return 1

    monkeypatch.setattr(_duplicates, "locate_ids", locate)
    monkeypatch.setattr(_duplicates, "seq_at_time", window_start)
    conn = _Conn(_info(5, leader=""), _info(10, leader="n1"))
    finder = _duplicates.DuplicateFinder(
        conn,  # type: ignore[arg-type]
        "S",
        window=120.0,
        direct=True,
        replicated=True,
        retry_timeout=5.0,
    )
    assert await finder.find(["a", "b"]) == set()
    assert conn.asked == 2  # the leaderless answer was asked again
    assert searched == [(1, 10)]


class _Reader:
    made: list[dict[str, Any]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _Reader.made.append(kwargs)

    async def next_chunk(self) -> None:
        return None

    async def close(self) -> None:
        return None


@pytest.mark.parametrize(
    ("replicas", "direct", "confirms"),
    [(1, True, True), (3, True, True), (3, False, True), (1, False, False)],
    ids=["r1-direct", "r3-direct", "r3-consumer", "r1-consumer"],
)
async def test_stored_ids_confirms_an_early_end_with_the_leader(
    monkeypatch: pytest.MonkeyPatch, replicas: int, direct: bool, confirms: bool
) -> None:
    # Any direct read may be served by a mirror with mirror_direct, whatever the replicas;
    # only a consumer on a single-replica stream reads the one store there is.
    _Reader.made.clear()
    monkeypatch.setattr(_ids, "RangeReader", _Reader)
    info = _info(10, leader=None if replicas == 1 else "n1", replicas=replicas)
    info["config"]["allow_direct"] = direct
    assert await _ids.stored_ids(_Conn(info), "S", 0) == set()  # type: ignore[arg-type]
    (kwargs,) = _Reader.made
    assert kwargs["replicated"] is confirms
