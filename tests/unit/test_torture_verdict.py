"""A trial whose cluster does not answer at the end still ends with a verdict.

Seed 41, trial 19 (``cluster-sync``): after a partition between the two followers
healed, every server answered the independent reader's ``STREAM.INFO`` with 10008
("JetStream system temporarily unavailable": no metadata leader) for longer than
its five quick rounds, and the campaign stopped as a harness crash, verdict
unknown. The reader now waits for the cluster, bounded, and says how long.
The servers are stand-ins here: this is the harness's own logic.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torture.rawread as rawread
from torture.rawread import RawRead, read_raw

UNAVAILABLE = (
    "STREAM.INFO T: {'code': 503, 'err_code': 10008, "
    "'description': 'JetStream system temporarily unavailable'}"
)
SERVERS = ["nats://10.0.0.1:4222", "nats://10.0.0.2:4222", "nats://10.0.0.3:4222"]


class _Cluster:
    """Answers ``_read`` with 10008 for the first ``unavailable`` calls, then the stream."""

    def __init__(self, unavailable: int) -> None:
        self.unavailable, self.calls = unavailable, 0

    async def read(self, url: str, stream: str, domain: str | None) -> RawRead:
        self.calls += 1
        if self.calls <= self.unavailable:
            raise RuntimeError(UNAVAILABLE)
        return RawRead(Counter({"pub-0": 1}), 1, 1, 1)


def _unreadable_error() -> type[Exception]:
    # On the code before this fix read_raw raised a plain RuntimeError.
    return getattr(rawread, "Unreadable", RuntimeError)


async def test_the_independent_reader_waits_for_a_cluster_that_comes_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """40 unanswered reads (over 13 rounds of the three servers) then an answer: the
    read succeeds and says it waited (before: it gave up after 15 reads)."""
    cluster = _Cluster(unavailable=40)
    monkeypatch.setattr(rawread, "_read", cluster.read)
    monkeypatch.setattr(rawread, "ROUND_PAUSE", 0.0, raising=False)
    read = await read_raw(SERVERS, "T")
    assert dict(read.keys) == {"pub-0": 1} and cluster.calls == 41
    assert len(read.errors) == 40 and "10008" in read.errors[-1]
    assert read.waited_s >= 0.0


async def test_the_wait_is_bounded_and_the_failure_names_the_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = _Cluster(unavailable=10**9)
    monkeypatch.setattr(rawread, "_read", cluster.read)
    monkeypatch.setattr(rawread, "ROUND_PAUSE", 0.01, raising=False)
    with pytest.raises(_unreadable_error(), match="10008") as failed:
        await read_raw(SERVERS, "T", wait=0.2)
    assert failed.value.waited_s >= 0.2  # type: ignore[attr-defined]
    assert cluster.calls == len(failed.value.errors)  # type: ignore[attr-defined]
    assert cluster.calls < 200  # rounds pause between them
