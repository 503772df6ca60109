"""A batch whose handler fails is split, not applied one message per transaction.

On a real SQLite ledger (no server): the Applier alone, a batch of 1,000 messages
with a few failing ones. Before, a failure anywhere in a batch re-ran the whole
batch one message per transaction: a commit (PostgreSQL: with its fsync) per
message, which held a PostgreSQL Processor to ~160-380 msg/s whenever a share of
the messages failed (0.5% fails nearly every batch of hundreds). Now the batch is
split until each failing message stands alone (:func:`split`): a few commits per
failure. What is applied and what fails is the same: every other message once,
the failing ones reported with their error, all in stream order.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import sqlite3
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from oncestream import SQLiteLedger
from oncestream._message import Message
from oncestream.ledger import LedgerEntry, LedgerTx
from oncestream.process._applying import Applier, split
from oncestream.process._bound import BoundConsumer
from oncestream.process._ledgercalls import LedgerCalls
from oncestream.process._options import ProcessorOptions, ProcessorStats

KINDS = ["message", "async_message", "batch", "async_batch"]


def _batch(n: int) -> tuple[list[LedgerEntry], list[Message]]:
    return [LedgerEntry("S", i + 1, None) for i in range(n)], [
        Message("s.x", "", b"%d" % (i + 1), None) for i in range(n)
    ]


class _Run:
    """An Applier on a fresh SQLite ledger whose handler refuses the seqs ``failing``
    (``times`` times each; None: always), counting handler calls and commits."""

    def __init__(self, tmp_path: Path, kind: str, failing: set[int], times: int | None = None):
        self.path = tmp_path / f"{kind}-{len(failing)}-{random.random()}.db"
        self.ledger = SQLiteLedger(self.path)
        self.ledger.open()
        with self.ledger.transaction() as tx:
            tx.execute("CREATE TABLE effects (seq INTEGER NOT NULL)")
        self.failing = failing
        self.left = Counter({seq: times for seq in failing}) if times is not None else None
        self.calls = 0
        self.stats = ProcessorStats()
        self.commits = 0

        def observe(what: str, seconds: float) -> None:
            self.commits += what == "commit"

        self.stats.observers.append(observe)
        bound = BoundConsumer(stream="S", consumer="c", options=ProcessorOptions(), ack_wait=30.0)
        batched = kind.endswith("batch")
        handler: Callable[..., Any]
        if kind == "message":
            handler = self._one
        elif kind == "async_message":

            async def handler(msg: Message, tx: LedgerTx) -> None:
                await asyncio.sleep(0)
                self._one(msg, tx)

        elif kind == "batch":
            handler = self._many
        else:

            async def handler(msgs: list[Message], tx: LedgerTx) -> None:
                await asyncio.sleep(0)
                self._many(msgs, tx)

        self.applier = Applier(
            bound, LedgerCalls(self.ledger), handler, self.stats, batched=batched
        )

    def _refuses(self, seq: int) -> bool:
        if seq not in self.failing:
            return False
        if self.left is None:
            return True
        if self.left[seq] <= 0:
            return False
        self.left[seq] -= 1
        return True

    def _one(self, msg: Message, tx: LedgerTx) -> None:
        self.calls += 1
        seq = int(msg.data)
        if self._refuses(seq):
            raise ValueError(f"refused {seq}")
        tx.execute("INSERT INTO effects (seq) VALUES (?)", (seq,))

    def _many(self, msgs: list[Message], tx: LedgerTx) -> None:
        self.calls += 1
        seqs = [int(m.data) for m in msgs]
        for seq in seqs:
            if self._refuses(seq):
                raise ValueError(f"refused {seq}")
        tx.executemany("INSERT INTO effects (seq) VALUES (?)", [(s,) for s in seqs])

    def apply(self, n: int) -> tuple[list[int], list[tuple[int, str]]]:
        entries, msgs = _batch(n)
        outcome = asyncio.run(self.applier.apply(entries, msgs))
        self.ledger.close()
        assert outcome is not None
        done, failures = outcome
        return [int(m.data) for m in done], [(int(m.data), str(e)) for m, e in failures]

    def effects(self) -> list[int]:
        with sqlite3.connect(self.path) as db:
            return sorted(row[0] for row in db.execute("SELECT seq FROM effects"))


@pytest.mark.parametrize("kind", KINDS)
def test_a_few_failing_messages_cost_a_few_commits_not_one_per_message(
    tmp_path: Path, kind: str
) -> None:
    """Shown failing on the code before: 996 commits (one per message applied)."""
    n, failing = 1000, {4, 400, 401, 1000}
    run = _Run(tmp_path, kind, failing)
    done, failures = run.apply(n)
    others = [seq for seq in range(1, n + 1) if seq not in failing]
    assert done == others  # applied once each, in stream order
    assert failures == [(seq, f"refused {seq}") for seq in sorted(failing)]
    assert run.effects() == others
    assert run.stats.applied == len(others)
    k = len(failing)
    if kind.endswith("message"):
        # The failing message is known: the ones before it, it alone, the ones after.
        assert run.commits <= k + 1
    else:
        # A batch handler names no message: halves, down to the failing ones.
        assert run.commits <= 2 * k * math.ceil(math.log2(n))
        assert run.calls <= 4 * k * math.ceil(math.log2(n)) + 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_message_failing_once_is_applied_with_its_batch_mates(tmp_path: Path, kind: str) -> None:
    """A transient failure: the message passes when retried in a smaller transaction."""
    run = _Run(tmp_path, kind, {150}, times=1)
    done, failures = run.apply(300)
    assert done == list(range(1, 301))
    assert failures == []
    assert run.effects() == list(range(1, 301))


@pytest.mark.parametrize("kind", KINDS)
def test_every_failing_set_ends_with_the_same_outcome(tmp_path: Path, kind: str) -> None:
    """Random batches and failing sets (seeded): every other message applied once, in
    order; the failing ones reported in order; a batch of one reported at once."""
    rng = random.Random(20261129)
    for _ in range(25):
        n = rng.randint(1, 40)
        failing = {seq for seq in range(1, n + 1) if rng.random() < 0.2}
        run = _Run(tmp_path, kind, failing)
        done, failures = run.apply(n)
        others = [seq for seq in range(1, n + 1) if seq not in failing]
        assert done == others
        assert [seq for seq, _ in failures] == sorted(failing)
        assert run.effects() == others
        if n == 1 and failing:
            assert run.calls == 1  # nothing smaller to try


def test_split_keeps_what_passed_together_and_halves_what_is_unknown() -> None:
    assert split(10, (4, 5)) == [(0, 4), (4, 5), (5, 10)]
    assert split(10, (0, 1)) == [(0, 1), (1, 10)]
    assert split(10, (9, 10)) == [(0, 9), (9, 10)]
    assert split(10, (0, 10)) == [(0, 5), (5, 10)]
    assert split(10, (0, 7)) == [(0, 3), (3, 7), (7, 10)]
    assert split(2, (0, 2)) == [(0, 1), (1, 2)]
    for size in range(2, 40):
        for lo in range(size):
            for hi in range(lo + 1, size + 1):
                ranges = split(size, (lo, hi))
                assert ranges[0][0] == 0 and ranges[-1][1] == size
                assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
                assert all(0 < b - a < size for a, b in ranges)  # the splitting ends


@pytest.mark.parametrize("size, suspects", [(1, (0, 1)), (5, (3, 3)), (5, (-1, 2)), (5, (2, 6))])
def test_split_refuses_what_cannot_be_split(size: int, suspects: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match="suspects"):
        split(size, suspects)
