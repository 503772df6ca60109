"""A Processor's consumer moved back past what its ledger pruned: nothing is applied twice.

The Processor prunes its ledger up to the ack floor it saw ``prune_grace`` earlier;
the ledger records how far (its prune horizon, per stream and consumer, with the
consumer's filter), and a message at or below it is acked as done, not applied
again, however the consumer came back to it: a reset to the start or to a time,
or the consumer deleted and created again. Both ledgers, on a real nats-server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from harness import publish_n
from oncestream import PostgresLedger, Processor, ProcessorOptions, ProcessorStats, SQLiteLedger
from oncestream.ledger import Ledger
from oncestream.streams import ResetTarget, delete_consumer, reset_consumer
from tests.handlers import record
from tests.integration._cli import cli, cli_json, publish, with_conn

COUNT = 60


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def ledger_and_effects(request, tmp_path):  # type: ignore[no-untyped-def]
    """``(make_ledger, effects)``: a new ledger object on one database; the effect ids."""
    if request.param == "sqlite":
        path = tmp_path / "ledger.db"

        def make() -> Ledger:
            return SQLiteLedger(path)
    else:
        url = request.getfixturevalue("postgres_url")

        def make() -> Ledger:
            return PostgresLedger(url)

    def effect_ids() -> list[int]:
        with make() as ledger, ledger.transaction() as tx:
            rows = tx.execute("SELECT id FROM effects ORDER BY id").fetchall()
        return [int(row[0]) for row in rows]

    return make, effect_ids


def _pruning(**kw: Any) -> ProcessorOptions:
    """Pruning within a second, as it happens after 2.5 minutes by default."""
    base: dict[str, Any] = {"batch": 20, "ack_wait": 5, "expires": 5}
    base.update(prune_interval=0.2, prune_grace=0.3)
    base.update(kw)
    return ProcessorOptions(**base)


async def _run(
    conn: Any,
    ledger: Ledger,
    until: Callable[[ProcessorStats], bool],
    *,
    consumer: str = "billing",
    **options: Any,
) -> ProcessorStats:
    """Run a Processor until ``until(stats)`` and it has caught up; return its stats."""
    proc = Processor(conn, "PR", consumer, record, ledger=ledger, options=_pruning(**options))
    task = asyncio.create_task(proc.run())
    try:
        await proc.wait_until(until, 30)
        await proc.wait_caught_up(30)
    finally:
        await proc.stop()
    return await task


async def _applied_and_pruned(conn, make_stream, make) -> None:  # type: ignore[no-untyped-def]
    await make_stream("PR", ("pr.>",))
    await publish_n(conn, "pr.x", COUNT, start=1)
    first = await _run(conn, make(), lambda s: s.applied >= COUNT and s.pruned >= COUNT)
    assert (first.applied, first.pruned) == (COUNT, COUNT)
    with make() as ledger:
        assert ledger.applied_count("PR") == 0  # every row pruned: only the horizon is left


async def test_reset_to_start_after_pruning_applies_nothing_again(  # type: ignore[no-untyped-def]
    conn, make_stream, ledger_and_effects
) -> None:
    make, effect_ids = ledger_and_effects
    await _applied_and_pruned(conn, make_stream, make)
    moved = await reset_consumer(conn, "PR", "billing", ResetTarget(start=True))
    assert moved.seq == 1 and moved.after["num_pending"] == COUNT

    again = await _run(conn, make(), lambda s: s.applied + s.suppressed >= COUNT)
    assert (again.applied, again.suppressed) == (0, COUNT)
    assert effect_ids() == list(range(1, COUNT + 1))  # each effect exactly once


async def test_reset_to_a_time_across_the_horizon(  # type: ignore[no-untyped-def]
    conn, make_stream, ledger_and_effects
) -> None:
    """Pruned, then new messages applied and kept: a reset to an hour ago covers both."""
    make, effect_ids = ledger_and_effects
    await _applied_and_pruned(conn, make_stream, make)
    await publish_n(conn, "pr.x", 15, start=COUNT + 1)
    kept = await _run(conn, make(), lambda s: s.applied >= 15, prune_interval=0)
    assert kept.applied == 15
    moved = await reset_consumer(conn, "PR", "billing", ResetTarget(time="1h"))
    assert moved.seq == 1

    again = await _run(
        conn, make(), lambda s: s.applied + s.suppressed >= COUNT + 15, prune_interval=0
    )
    assert (again.applied, again.suppressed) == (0, COUNT + 15)
    assert effect_ids() == list(range(1, COUNT + 16))


async def test_a_consumer_deleted_and_created_again(  # type: ignore[no-untyped-def]
    conn, make_stream, ledger_and_effects
) -> None:
    """The same name, created again from the start: the horizon still holds, and the
    messages stored since are applied, once."""
    make, effect_ids = ledger_and_effects
    await _applied_and_pruned(conn, make_stream, make)
    await publish_n(conn, "pr.y", 10, start=1001)
    await delete_consumer(conn, "PR", "billing")
    again = await _run(conn, make(), lambda s: s.applied + s.suppressed >= COUNT + 10)
    assert (again.applied, again.suppressed) == (10, COUNT)
    assert effect_ids() == [*range(1, COUNT + 1), *range(1001, 1011)]


async def test_a_wider_filter_is_not_covered_by_a_narrower_horizon(  # type: ignore[no-untyped-def]
    conn, make_stream, ledger_and_effects
) -> None:
    """Pruned under filter pr.x; the consumer recreated for pr.> gets pr.y applied."""
    make, effect_ids = ledger_and_effects
    await make_stream("PR", ("pr.>",))
    for n in range(1, COUNT + 1):  # interleaved subjects: pr.y sits inside the pruned span
        await publish_n(conn, "pr.x" if n % 3 else "pr.y", 1, start=n)
    narrow = await _run(
        conn, make(), lambda s: s.applied >= 40 and s.pruned >= 40, filter_subject="pr.x"
    )
    assert narrow.applied == 40
    await delete_consumer(conn, "PR", "billing")
    wide = await _run(conn, make(), lambda s: s.applied + s.suppressed >= COUNT)
    assert (wide.applied, wide.suppressed) == (20, 40)  # pr.y applied, pr.x suppressed
    assert effect_ids() == list(range(1, COUNT + 1))


def test_consumer_reset_with_the_ledger_names_the_pruned_span(nats_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`consumer reset --ledger`: at the moment of the reset, which redelivered messages
    count as done because the ledger pruned them."""
    url, db = nats_server.url, tmp_path / "ledger.db"
    cli_json(url, "stream", "add", "PR", "--subjects", "pr.>")
    publish(url, "pr.x", [b"%d" % i for i in range(1, 21)])

    async def prune(conn: Any) -> ProcessorStats:
        return await _run(conn, SQLiteLedger(db), lambda s: s.applied >= 20 and s.pruned >= 20)

    assert with_conn(url, prune).pruned == 20
    ledger = f"sqlite:///{db}"
    base = ["consumer", "reset", "PR", "billing"]
    dry = cli(url, *base, "--to-seq", "5", "--dry-run", "--ledger", ledger)
    assert dry.exit_code == 0, dry.stderr
    said = " ".join(dry.stderr.split())
    assert "the ledger has pruned seqs 5..20 of PR/billing: delivered again, each counts" in said
    assert "dry run: would reset consumer PR/billing to seq 5" in dry.stdout
    done = cli_json(url, *base, "--to-start", "--force", "--ledger", ledger)
    assert done["seq"] == 1 and done["ledger_pruned"] == [1, 20]
    assert cli_json(url, *base, "--to-end", "--force", "--ledger", ledger)["ledger_pruned"] is None
    quiet = cli(url, *base, "--to-start", "--force")  # without --ledger: no note
    assert quiet.exit_code == 0 and "pruned" not in quiet.stderr
