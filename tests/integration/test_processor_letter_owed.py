"""A message delivered again while its dead letter is stored and its ledger row is owed.

The Processor keeps such a message in progress and retries the row's commit in place
(tests/integration/test_processor_postgres_letter_commit.py); only a standby's fence or
a moved registry row ends those retries with the message handed back. If this instance
then gets it again, the handler must not be called (the letter is its one way in) and
the letter must not be published again: only the row is committed. The state is set up
through :class:`Unrecorded`'s own API (a letter stored, a commit lost), as the fence
would leave it; the rest is a real server and ledger.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import oncestream.process._consumerloop as consumerloop
from harness import publish_n
from oncestream import (
    Connection,
    LedgerError,
    Processor,
    ProcessorOptions,
    SQLiteLedger,
)
from oncestream.ledger import LedgerEntry
from oncestream.process._deadrecord import Unrecorded
from tests._support import effects
from tests.handlers import record
from tests.integration.test_processor_max_deliver import _dead_letters
from tests.integration.test_processor_postgres import _started

COUNT, OWED = 10, 7


class _LostCommit:
    """A claim whose commit fails: what a database lost after the letter's PubAck does."""

    async def commit(self) -> None:
        raise LedgerError("the commit is lost")


async def _owing(seq: int) -> Unrecorded:
    """An Unrecorded that owes ``seq`` its row: its letter stored, the commit lost."""
    unrecorded = Unrecorded()

    async def stored() -> bool:
        return True

    with pytest.raises(LedgerError):
        await unrecorded.settle(seq, stored, _LostCommit())  # type: ignore[arg-type]
    assert seq in unrecorded
    return unrecorded


async def test_a_redelivered_message_owed_its_row_is_recorded_not_handled(
    conn: Connection, make_stream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await make_stream("OW", ("ow.>",))
    await make_stream("DLQ", ("DLQ.>",))
    owing = await _owing(OWED)
    monkeypatch.setattr(consumerloop, "Unrecorded", lambda: owing)
    handled: list[int] = []

    def handler(msg: Any, tx: Any) -> None:
        handled.append(msg.metadata.stream_seq)
        record(msg, tx)

    db = tmp_path / "l.db"
    opts = ProcessorOptions(batch=COUNT, dead_letter_stream="DLQ", prune_interval=0)
    proc = Processor(conn, "OW", "w", handler, ledger=SQLiteLedger(db), options=opts)
    task = await _started(proc)
    try:
        await publish_n(conn, "ow.x", COUNT, start=1)
        await proc.wait_until(lambda s: s.applied == COUNT - 1 and not len(owing), timeout=20)
    finally:
        proc.request_stop()
        await task
    assert OWED not in handled and sorted(handled) == [s for s in range(1, COUNT + 1) if s != OWED]
    check = SQLiteLedger(db)
    check.open()
    assert check.is_applied(LedgerEntry("OW", OWED, None))  # its row committed
    assert await _dead_letters(conn) == []  # the letter not published again
    assert (proc.stats.failed, proc.stats.dead_lettered) == (0, 0), proc.stats
    assert effects(db) == (COUNT - 1, COUNT - 1)
    info = await conn.consumer_info("OW", "w")
    assert (info["num_pending"], info["num_ack_pending"]) == (0, 0), info  # 7 finished
