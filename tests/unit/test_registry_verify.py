"""The registry check in a batch transaction, on a real SQLite ledger (no server needed).

What a batch is checked against in its transaction is the row read there and the
batch's own subjects, never the Processor's memory of the row: a re-check (the 5 s
watch, a pruning round) may adopt another instance's registration between a batch's
admission and its transaction (tests/integration/test_ledger_registry_instances.py
runs instances against a real server).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from oncestream import SQLiteLedger
from oncestream._message import Message
from oncestream._names import subject_matches
from oncestream.ledger import LedgerEntry, LedgerTx, Registration
from oncestream.process._applying import Applier
from oncestream.process._bound import BoundConsumer
from oncestream.process._ledgercalls import LedgerCalls
from oncestream.process._options import ProcessorOptions, ProcessorStats
from oncestream.process._registry import Registry, RegistryMoved, check_registry


def _msg(subject: str) -> Message:
    return Message(subject, "", b"", None)


def _setup(tmp_path: Path, filters: tuple[str, ...]) -> tuple[SQLiteLedger, Applier, Registry]:
    ledger = SQLiteLedger(tmp_path / "l.db")
    ledger.open()
    _register(ledger, filters)
    calls = LedgerCalls(ledger)
    registry = Registry(calls, "S", "c")
    bound = BoundConsumer(stream="S", consumer="c", options=ProcessorOptions(), ack_wait=30.0)
    applier = Applier(
        bound, calls, lambda m, tx: None, ProcessorStats(), registered=registry.verify
    )
    return ledger, applier, registry


def _register(ledger: SQLiteLedger, filters: tuple[str, ...]) -> None:
    mine = Registration("S", "c", filters, "", 0)
    ledger.register(mine, functools.partial(check_registry, mine))


def _claim(applier: Applier, tx: LedgerTx, *subjects: str) -> list[bool]:
    entries = [LedgerEntry("S", i + 1, None) for i in range(len(subjects))]
    try:
        return applier.claim(tx, entries, [_msg(s) for s in subjects])
    finally:
        tx.rollback()


def test_a_row_adopted_between_admission_and_transaction_still_refuses_the_batch(
    tmp_path: Path,
) -> None:
    """Review w5b, finding 1: a batch admitted under o.a, another instance registers o.b,
    the watch adopts it before the batch's transaction: the batch (on o.a) is refused.

    Shown failing on the code before the fix: the transaction compared the row with
    the filters the watch had just adopted, found them equal, and claimed o.a.
    """
    ledger, applier, registry = _setup(tmp_path, ("o.a",))
    registry._adopt(("o.a",))
    assert registry.takes(["o.a"])  # admitted (Registry.admit) under the old row
    _register(ledger, ("o.b",))  # another instance of the consumer, other filters
    registry._adopt(("o.b",))  # the watch's re-check, while the batch waits for the lock
    with pytest.raises(RegistryMoved) as moved:
        _claim(applier, ledger.begin(), "o.a")
    assert moved.value.filters == ("o.b",)
    assert _claim(applier, ledger.begin(), "o.b") == [True]  # inside the row: claimed
    ledger.close()


def test_a_row_gone_refuses_a_registered_processor(tmp_path: Path) -> None:
    ledger, applier, registry = _setup(tmp_path, ("o.a",))
    registry._adopt(("o.a",))
    registry._recorded = True  # as Registry.register leaves it when the row was read back
    ledger.connection.execute("DELETE FROM oncestream_consumers")
    with pytest.raises(RegistryMoved) as moved:
        _claim(applier, ledger.begin(), "o.a")
    assert moved.value.filters is None
    registry.bound = True  # a bind Processor with no row is not checked
    assert _claim(applier, ledger.begin(), "o.a") == [True]
    ledger.close()


class _PlainTx(LedgerTx):
    """A custom ledger's transaction written to the documented contract, without
    ``registered`` (it reads no registry)."""

    def __init__(self, inner: LedgerTx) -> None:
        self.inner = inner

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.inner.execute(sql, params)

    def claim(self, entries: Sequence[LedgerEntry]) -> list[bool]:
        return self.inner.claim(entries)

    def commit(self) -> None:
        self.inner.commit()

    def rollback(self) -> None:
        self.inner.rollback()


def test_a_transaction_without_registered_is_not_checked_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Review w5b, finding 2: shown failing before the fix (every batch RegistryMoved(None),
    the run stopped after 3 moves)."""
    ledger, applier, registry = _setup(tmp_path, ("o.a",))
    registry._adopt(("o.a",))
    with caplog.at_level(logging.WARNING, logger="oncestream.process"):
        for seq in (1, 2):
            tx = _PlainTx(ledger.begin())
            entries = [LedgerEntry("S", seq, None)]
            assert applier.claim(tx, entries, [_msg("o.a")]) == [True]
            tx.commit()
    warned = [r for r in caplog.records if "do not read the registry" in r.getMessage()]
    assert len(warned) == 1
    ledger.close()


def test_moves_start_again_after_a_batch_applied(tmp_path: Path) -> None:
    """Review w5b, finding 4: legitimate registry changes over a bind Processor's life
    (which runs no watch) do not add up to a stop."""
    ledger, _, registry = _setup(tmp_path, ("o.a",))
    registry.bound = True
    failed: list[Exception] = []

    async def moves() -> None:
        for _ in range(6):
            assert await registry.moved(None, RegistryMoved(("o.a",)), [_msg("o.a")], failed.append)
            registry.applied()

    asyncio.run(moves())
    assert failed == []
    ledger.close()


@pytest.mark.parametrize(("inside", "outside"), [("a.b.", "x.y."), ("a.b..", "x..")])
def test_a_subject_with_an_empty_last_token_is_not_remembered_as_every_subject(
    inside: str, outside: str
) -> None:
    """Review w5b, finding 5: ``a.b.`` was remembered as ``>``, and ``x.y.`` then taken
    as inside ``a.b.>`` (shown failing before the fix: takes returned True)."""
    registry = Registry(LedgerCalls(None), "S", "c")  # type: ignore[arg-type]
    registry._adopt(("a.b.>",))
    assert registry.takes([inside]) is subject_matches("a.b.>", inside) is True
    assert registry.takes([outside]) is subject_matches("a.b.>", outside) is False


def test_takes_agrees_with_matching_every_subject() -> None:
    """The reviewer's fuzz (/tmp/review-w5b/fuzz_takes.py), seeded: the remembered keys
    never answer otherwise than matching each subject against each filter."""
    rng = random.Random(5)
    toks = ["a", "b", "c"]

    def subject(empty: bool) -> str:
        return ".".join(
            rng.choice(toks + ([""] if empty else [])) for _ in range(rng.randint(1, 5))
        )

    def filt() -> str:
        t = [rng.choice([*toks, "*"]) for _ in range(rng.randint(1, 4))]
        if rng.random() < 0.5:
            t[-1] = ">"
        return ".".join(t)

    bad = []
    for empty in (False, True):
        for _ in range(600):
            registry = Registry(LedgerCalls(None), "S", "c")  # type: ignore[arg-type]
            filters = tuple({filt() for _ in range(rng.randint(1, 3))})
            registry._adopt(filters)
            for _ in range(30):
                batch = [subject(empty) for _ in range(rng.randint(1, 4))]
                truth = all(any(subject_matches(f, s) for f in filters) for s in batch)
                if registry.takes(batch) != truth:
                    bad.append((filters, batch))
    assert bad == []
