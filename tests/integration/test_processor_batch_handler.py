"""Processor(batch_handler=...): one handler call per transaction, against a real server."""

from __future__ import annotations

import asyncio

import pytest

from harness import publish_n
from oncestream import ConfigError, Processor, ProcessorOptions, SQLiteLedger
from oncestream.ledger import LedgerEntry
from tests._support import effects
from tests.handlers import record, record_many
from tests.integration.test_processor import _opts, _run_until


async def test_each_message_once_and_only_the_fresh_ones_reach_the_handler(
    conn, make_stream, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    await make_stream("BJOBS", ("bjobs.>",))
    await publish_n(conn, "bjobs.x", 1000)
    ledger = SQLiteLedger(tmp_path / "l.db")
    ledger.open()
    with ledger.transaction() as tx:  # as if a crashed run applied 1..10 and never acked
        tx.claim([LedgerEntry("BJOBS", seq) for seq in range(1, 11)])
    calls: list[list[int]] = []

    def handler(msgs, tx) -> None:  # type: ignore[no-untyped-def]
        calls.append([m.seq for m in msgs])
        record_many(msgs, tx)

    proc = Processor(conn, "BJOBS", "w", batch_handler=handler, ledger=ledger, options=_opts())
    await _run_until(proc, lambda s: s.applied + s.suppressed >= 1000)
    assert (proc.stats.applied, proc.stats.suppressed) == (990, 10)
    assert effects(tmp_path / "l.db") == (990, 990)
    seen = [seq for call in calls for seq in call]
    assert sorted(seen) == list(range(11, 1001))  # never an applied one, never twice
    assert all(call == sorted(call) and call for call in calls)  # stream order, never empty
    # One call per transaction that has fresh messages: a transaction of only the
    # already-applied seqs 1..10 (the server may deliver them as a chunk of their own,
    # as in the CI run of 8607301) calls nothing, and there are at most 10 of those.
    assert proc.stats.batches - 10 <= len(calls) <= proc.stats.batches


async def test_a_failing_batch_is_split_until_the_failing_message_stands_alone(
    conn, make_stream, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """Message 150 fails on its first delivery: its batch is rolled back and split in
    halves until 150 is alone, its batch-mates applied in a few transactions (before:
    one each, ~100 handler calls for the batch holding it); 150 is naked once and
    applied when it comes back."""
    await make_stream("BJOBS", ("bjobs.>",))
    await publish_n(conn, "bjobs.x", 300)
    calls: list[list[int]] = []

    async def handler(msgs, tx) -> None:  # type: ignore[no-untyped-def]
        await asyncio.sleep(0)  # an async batch handler
        calls.append([int(m.data) for m in msgs])
        if any(int(m.data) == 150 and m.metadata.num_delivered == 1 for m in msgs):
            raise RuntimeError("transient")
        record_many(msgs, tx)

    ledger = SQLiteLedger(tmp_path / "l.db")
    opts = _opts(backoff=(0.1,))
    proc = Processor(conn, "BJOBS", "w", batch_handler=handler, ledger=ledger, options=opts)
    await _run_until(proc, lambda s: s.applied >= 300)
    assert effects(tmp_path / "l.db") == (300, 300)
    assert proc.stats.failed == 1  # only 150 was naked; its batch-mates were applied
    alone = [call for call in calls if 150 in call and len(call) == 1]
    assert len(alone) == 2  # failed alone on its first delivery, applied on its second
    # Batches of at most 100 (_opts): 2 * ceil(log2(100)) calls split the one holding 150.
    assert len(calls) <= proc.stats.batches + 2 * 7 + 1, calls


def test_exactly_one_kind_of_handler(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ledger = SQLiteLedger(tmp_path / "l.db")
    opts = ProcessorOptions()
    with pytest.raises(ConfigError, match=r"either handler .* or batch_handler .* not both"):
        Processor(  # type: ignore[arg-type]
            None, "S", "c", record, batch_handler=record_many, ledger=ledger, options=opts
        )
    with pytest.raises(ConfigError, match="not neither"):
        Processor(None, "S", "c", ledger=ledger, options=opts)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="batch_handler must accept"):
        Processor(None, "S", "c", batch_handler=lambda msgs: None, ledger=ledger)  # type: ignore[arg-type]
