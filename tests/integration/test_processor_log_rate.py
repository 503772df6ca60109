"""Identical handler failures are rate-limited in the log (issue 10: 16,004 lines in 8 s)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from harness import publish_n
from oncestream import Processor, ProcessorOptions, SQLiteLedger
from tests.handlers import always_fails


async def test_identical_failures_log_a_few_lines_and_a_count(
    conn, make_stream, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    await make_stream("FAILS", ("fails.>",))
    await publish_n(conn, "fails.x", 300)
    options = ProcessorOptions(
        batch=100, ack_wait=2, expires=5, prune_interval=0, max_deliver=3, backoff=(0.01,)
    )
    proc = Processor(
        conn, "FAILS", "w", always_fails, ledger=SQLiteLedger(tmp_path / "l.db"), options=options
    )
    with caplog.at_level(logging.INFO, logger="oncestream.process"):
        task = asyncio.create_task(proc.run())
        try:
            await proc.wait_until(lambda s: s.failed >= 900, 60)
        finally:
            await proc.stop()
            await task
    lines = [
        r
        for r in caplog.records
        if r.name.startswith("oncestream.process.") and "failed" in r.getMessage()
    ]
    assert proc.stats.failed >= 900
    assert len(lines) <= 15, f"{len(lines)} log lines for {proc.stats.failed} identical failures"
