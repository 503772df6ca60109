"""read_stream on a replicated stream asks the leader before ending early.

A follower that has not applied the newest messages may answer a direct get; the
audit (and the torture harness's drain) then saw a stream shorter than it was.
Found by the torture smoke: a trial "drained" with 657 of 800 records read.
"""

from __future__ import annotations

from typing import Any

import pytest

from oncestream.read import _range as reader


class _Conn:
    def __init__(self, replicas: int) -> None:
        self.replicas = replicas

    async def stream_info(self, stream: str) -> dict[str, Any]:
        return {
            "config": {"allow_direct": True, "num_replicas": self.replicas},
            "state": {"first_seq": 1, "last_seq": 10, "messages": 10},
        }


class _Recorder:
    made: list[dict[str, Any]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _Recorder.made.append(kwargs)

    async def next_chunk(self) -> None:
        return None

    async def close(self) -> None:
        return None


@pytest.mark.parametrize(("replicas", "replicated"), [(1, False), (3, True)])
async def test_read_stream_confirms_with_the_leader_on_replicated_streams(
    monkeypatch: pytest.MonkeyPatch, replicas: int, replicated: bool
) -> None:
    _Recorder.made.clear()
    monkeypatch.setattr(reader, "RangeReader", _Recorder)
    chunks = [c async for c in reader.read_stream(_Conn(replicas), "S", timeout=4.0)]  # type: ignore[arg-type]
    assert chunks == []
    (kwargs,) = _Recorder.made
    assert kwargs["replicated"] is replicated
    # The leader's "not applied yet" answer is retried within the caller's timeout.
    assert kwargs["retry_timeout"] == (4.0 if replicated else 0)
