"""The ``store-twice`` sabotage's copy (torture/trial.py ``Trial._copy_msg``), with a fake
server that stores only what the stream's subjects capture, as nats-server does.

A partitioned stream stores ``t.pub`` under its mapped subject (``<partition>.t.pub``),
which its own subjects (``t.*``) do not capture: the copy must go to the Publisher's
subject, or it is never stored and the negative control proves nothing.
"""

from __future__ import annotations

import asyncio
import fnmatch
from types import SimpleNamespace
from typing import Any

import pytest
import torture.trial as trial_mod
from torture.checker import check
from torture.options import PARTITIONS
from torture.topology import stream_spec
from torture.trial import Trial


def _fake_connect(captures: tuple[str, ...], stored_as: str, published: list[str]) -> Any:
    class JetStream:
        async def get_msg(self, stream: str, seq: int) -> Any:
            return SimpleNamespace(subject=stored_as, data=b"pub-7")

        async def publish(self, subject: str, data: bytes, headers: dict[str, str]) -> Any:
            published.append(subject)
            if not any(fnmatch.fnmatchcase(subject, p.replace(">", "*")) for p in captures):
                raise RuntimeError("nats: no responders available for request")
            return SimpleNamespace(seq=99, duplicate=False)

    class Conn:
        nc = SimpleNamespace(jetstream=lambda domain=None: JetStream())

        async def __aenter__(self) -> Any:
            return self

        async def __aexit__(self, *exc: Any) -> None:
            return None

    async def connect(_: Any) -> Any:
        return Conn()

    return connect


@pytest.mark.parametrize("partitioned", [True, False])
def test_the_copy_goes_where_the_stream_captures_it(
    monkeypatch: pytest.MonkeyPatch, partitioned: bool
) -> None:
    spec = stream_spec(replicas=1, window=None, partitions=PARTITIONS if partitioned else 0)
    published: list[str] = []
    stored_as = "2.t.pub" if partitioned else "t.pub"
    monkeypatch.setattr(trial_mod, "connect", _fake_connect(spec.subjects, stored_as, published))
    me = SimpleNamespace(topo=SimpleNamespace(connect_options=lambda target: None))
    copied = asyncio.run(Trial._copy_msg(me, {"domain": None}, "T", 7, "pub-7"))  # type: ignore[arg-type]
    assert published == ["t.pub"] and copied == 99


def test_the_copy_counts_as_duplicated_not_as_a_replay() -> None:
    """Keyed by its payload in both readers, with no replay header: ``duplicated``."""
    stored = {"pub-0": 2, "pub-1": 1}
    copies = {"pub-0": [[5, "2026-01-01T00:00:00Z"], [9, "2026-01-01T00:00:09Z"]]}
    state = {
        "index": 0,
        "seed": 1,
        "kind": "single",
        "inputs": {"pub": {"positions": 2, "stream": "TP", "processed": False}},
        "streams": {"T": {}, "TP": stored},
        "effects": {"sqlite": {}},
        "options": {"window": "short"},
        "faults": [],
        "reads": {"TP": {"raw": stored, "project": stored, "messages": 3, "copies": copies}},
    }
    result = check([], state)
    assert result["duplicated"] == ["pub-0"] and result["unexpected"] == []
