"""A consumer's filter edited while its Processor runs (breaker w5 B1, F4).

A takes pr.eu and B pr.us, one ledger (disjoint: allowed). B's filter is then
edited on the server to pr.> (``CONSUMER.CREATE`` with action update, as
``oncestream consumer edit --filter`` does) while both run. From then on B is
delivered pr.eu too, and every pr.eu message A applied is in the ledger: before
the fix B acked each as applied and never applied it (11..20 missing, B's run ended
without an error). Now B notices the edit before it applies or suppresses anything
(a message outside its registered filters, or the pruning round's CONSUMER.INFO)
and stops with the ConfigError its next start would give. An edit the registry
allows (disjoint from every neighbour) is recorded and processing goes on.
"""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from harness import publish_n
from oncestream import ConfigError
from tests.integration._registry_support import edit_filter, ids, processor


# prune_interval 0: the message outside B's registered filters is what reveals the
# edit; 0.2: the pruning round's CONSUMER.INFO may see it first. Both must refuse.
@pytest.mark.parametrize("b_prune_interval", [0.0, 0.2])
async def test_a_filter_edited_to_overlap_while_running_stops_the_run(  # type: ignore[no-untyped-def]
    conn, make_stream, tmp_path, b_prune_interval
) -> None:
    await make_stream("PR", ("pr.>",))
    path = tmp_path / "ledger.db"
    a = processor(conn, path, "a", "effects_a", filter_subject="pr.eu", prune_interval=0.2)
    b = processor(
        conn, path, "b", "effects_b", filter_subject="pr.us", prune_interval=b_prune_interval
    )
    ta, tb = asyncio.create_task(a.run()), asyncio.create_task(b.run())
    try:
        await publish_n(conn, "pr.eu", 10, start=1)
        await publish_n(conn, "pr.us", 10, start=101)
        await a.wait_until(lambda s: s.applied >= 10, 30)
        await b.wait_until(lambda s: s.applied >= 10, 30)
        await edit_filter(conn, "b", "pr.>")
        await publish_n(conn, "pr.eu", 10, start=11)
        await publish_n(conn, "pr.us", 10, start=111)
        await a.wait_until(lambda s: s.applied >= 20, 30)
        with pytest.raises(ConfigError) as refused:
            async with asyncio.timeout(30):
                await tb
    finally:
        await a.stop()
        await b.stop()
    await ta
    text = str(refused.value)
    for name in ("PR/a", "PR/b", "pr.eu", "pr.>", "edited while its Processor ran"):
        assert name in text, text
    # B applied none of A's messages and suppressed nothing (each would be a skip).
    assert b.stats.suppressed == 0
    assert not ids(path, "effects_b") & set(range(1, 21))
    assert ids(path, "effects_a") == set(range(1, 21))
    # A new start of B is refused the same way.
    again = processor(conn, path, "b", "effects_b", prune_interval=0)
    with pytest.raises(ConfigError, match="take some of the same messages"):
        async with asyncio.timeout(30):
            await again.run()


async def test_a_filter_edited_to_stay_disjoint_is_recorded(conn, make_stream, tmp_path) -> None:  # type: ignore[no-untyped-def]
    await make_stream("PR", ("pr.>",))
    path = tmp_path / "ledger.db"
    a = processor(conn, path, "a", "effects_a", filter_subject="pr.eu", prune_interval=0)
    b = processor(conn, path, "b", "effects_b", filter_subject="pr.us", prune_interval=0)
    ta, tb = asyncio.create_task(a.run()), asyncio.create_task(b.run())
    try:
        await publish_n(conn, "pr.us", 5, start=101)
        await b.wait_until(lambda s: s.applied >= 5, 30)
        await edit_filter(conn, "b", "pr.us", "pr.ca")
        await publish_n(conn, "pr.eu", 5, start=1)
        await publish_n(conn, "pr.ca", 5, start=201)
        await publish_n(conn, "pr.us", 5, start=106)
        await a.wait_until(lambda s: s.applied >= 5, 30)
        await b.wait_until(lambda s: s.applied >= 15, 30)
    finally:
        await a.stop()
        await b.stop()
    await ta
    await tb
    assert ids(path, "effects_b") == set(range(101, 111)) | set(range(201, 206))
    assert ids(path, "effects_a") == set(range(1, 6))
    with sqlite3.connect(path) as db:
        rows = dict(db.execute("SELECT consumer, filters FROM oncestream_consumers"))
    assert rows["b"].split() == ["pr.ca", "pr.us"], rows
