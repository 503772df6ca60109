"""Two instances of one consumer and its ledger registry row (review w5 M1).

The check that a delivered subject lies inside the consumer's registered filters
must not use one instance's own copy of them: another instance of the same
consumer may have registered other filters since. A takes pr.eu.> and runs as
A2; its filter is edited to pr.eu.de and another instance (A1) registers that;
C (pr.eu.fr) is then allowed on the ledger; the edit is reverted. Before the fix
A2, still holding pr.eu.> in memory, applied the pr.eu.fr messages and C, started
again, skipped every one as applied (C applied none of 1..10). Now the registry
row is read inside A2's apply transaction: it is not what A2 checked against, so
A2 registers again, is refused (it overlaps C) and stops with nothing applied,
and C applies all ten. A bound instance (``bind``, no registration of its own)
checks against the consumer's registry row the same way.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from harness import publish_n
from oncestream import ConfigError, Processor
from tests.integration._registry_support import edit_filter, ids, processor, start_stop


async def test_a_stale_instance_does_not_apply_a_neighbours_messages(  # type: ignore[no-untyped-def]
    conn, make_stream, tmp_path
) -> None:
    await make_stream("PR", ("pr.>",))
    path = tmp_path / "ledger.db"

    def proc(consumer: str, table: str, **kw: Any) -> Processor:
        return processor(conn, path, consumer, table, **{"expires": 1, **kw})

    a2 = proc("a", "effects_a", filter_subject="pr.eu.>", prune_interval=0)
    t2 = asyncio.create_task(a2.run())
    try:
        await a2.wait_running(30)
        await edit_filter(conn, "a", "pr.eu.de")
        await start_stop(proc("a", "effects_a", create=False))  # A1 registers pr.eu.de
        await start_stop(proc("c", "effects_c", filter_subject="pr.eu.fr", prune_interval=0))
        await edit_filter(conn, "a", "pr.eu.>")
        await publish_n(conn, "pr.eu.fr", 10, start=1)
        with pytest.raises(ConfigError) as refused:
            async with asyncio.timeout(15):
                await t2
    finally:
        await a2.stop()
    text = str(refused.value)
    for name in ("PR/a", "PR/c", "pr.eu.fr", "edited while its Processor ran"):
        assert name in text, text
    assert (a2.stats.applied, a2.stats.suppressed) == (0, 0)
    assert not ids(path, "effects_a")
    c = proc("c", "effects_c", filter_subject="pr.eu.fr", prune_interval=0)
    tc = asyncio.create_task(c.run())
    try:
        await c.wait_until(lambda s: s.applied + s.suppressed >= 10, 30)
    finally:
        await c.stop()
    await tc
    assert c.stats.suppressed == 0
    assert ids(path, "effects_c") == set(range(1, 11))


async def test_a_bound_instance_outside_the_registered_filters_stops(  # type: ignore[no-untyped-def]
    conn, make_stream, tmp_path
) -> None:
    await make_stream("PR", ("pr.>",))
    path = tmp_path / "ledger.db"
    await start_stop(
        processor(
            conn, path, "a", "effects_a", filter_subject="pr.eu.de", prune_interval=0, expires=1
        )
    )
    # Edited while no registered instance runs: the registry still says pr.eu.de.
    await edit_filter(conn, "a", "pr.eu.>")
    bound = processor(conn, path, "a", "effects_a", bind=True, expires=1)
    task = asyncio.create_task(bound.run())
    try:
        await publish_n(conn, "pr.eu.de", 3, start=1)
        await bound.wait_until(lambda s: s.applied >= 3, 30)
        await publish_n(conn, "pr.eu.fr", 3, start=11)
        with pytest.raises(ConfigError) as refused:
            async with asyncio.timeout(15):
                await task
    finally:
        await bound.stop()
    text = str(refused.value)
    for name in ("PR/a", "pr.eu.fr", "pr.eu.de", "bind"):
        assert name in text, text
    assert bound.stats.suppressed == 0
    assert ids(path, "effects_a") == {1, 2, 3}
