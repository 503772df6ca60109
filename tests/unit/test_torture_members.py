"""The campaign's ``members=partitioned`` option (torture/options.py, trial.py, workers.py):
drawn about half the time or pinned, the processed stream's partitions, the two
PostgreSQL members of one group with the drawn options, and the report's switches
counted per partition."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
from torture.__main__ import parse, trial_plan
from torture.options import PARTITIONS, TrialOptions, draw
from torture.trial import Trial, _switches
from torture.workers import _Stopper, processor_options

from oncestream import ConnectOptions, GroupMember, StreamNotFound
from oncestream.process._assignment import assign

PG = "postgresql://postgres@127.0.0.1:5432/torture"


def _trial(tmp_path: Path, kind: str = "single", **options: str) -> Trial:
    return Trial(index=0, seed=1, kind=kind, out=tmp_path, run_id="unit", duration=12.0,
                 faults=0, rate=10.0, pg_template=None,
                 options=TrialOptions(**options))  # fmt: skip


def test_partitioned_members_are_drawn_in_half_the_trials() -> None:
    drawn = Counter(draw(7, index, None).members for index in range(20))
    assert drawn == {"pinned-pair": 10, "partitioned": 10}  # a seeded cycle over both


def test_a_pinned_partitioned_option_holds_except_in_leaf_trials() -> None:
    args = parse(["--trials", "8", "--seed", "3", "--option", "members=partitioned",
                  "--option", "dead_letters=replay", "--spark-every", "0"])  # fmt: skip
    plans = [trial_plan(args, i) for i in range(8)]
    assert {p["kind"] for p in plans} == {"single", "cluster", "leaf", "cluster-sync"}
    for plan in plans:
        opts: TrialOptions = plan["options"]
        leaf = plan["kind"] == "leaf"
        # The hub's stream sources the leaf's: it cannot be partitioned.
        assert opts.members == ("pinned-pair" if leaf else "partitioned"), plan["kind"]
        # A partitioned stream's dead letter names its stored subject: no replay there.
        assert opts.dead_letters == "keep"
        assert "members=" + opts.members in opts.words()
    with pytest.raises(SystemExit):
        parse(["--option", "members=sharded"])
    with pytest.raises(ValueError, match="partitioned"):
        _trial(Path("/nonexistent"), kind="leaf", members="partitioned")


def test_partitioned_members_are_two_group_members_with_the_drawn_options(
    tmp_path: Path,
) -> None:
    trial = _trial(tmp_path, members="partitioned", ack_policy="all", dead_letters="keep")
    configs = trial._processor_configs(PG)
    assert set(configs) == {"lite", "pg1", "pg2"}
    for name in ("pg1", "pg2"):
        cfg = configs[name]
        assert (cfg["role"], cfg["consumer"], cfg["ledger"]) == ("member", "pg", PG)
        options = processor_options({**cfg, "options": trial.options.as_dict()})
        assert options.ack_policy == "all" and options.dead_letter_stream == "DLQ"
        # What the worker role builds: a GroupMember refuses a priority group of its own.
        GroupMember(ConnectOptions(servers=("nats://127.0.0.1:1",)), "T", cfg["consumer"],
                    lambda msg, tx: None, ledger=PG, processor_options=options)  # fmt: skip
    assert "role" not in configs["lite"]
    trial.pg_url = PG
    assert trial.pg_consumers() == [f"pg-p{p}" for p in range(PARTITIONS)]
    # Without PostgreSQL: the SQLite processor only, as in every trial.
    assert set(trial._processor_configs(None)) == {"lite"}


def test_the_pinned_pair_stays_as_it_was(tmp_path: Path) -> None:
    trial = _trial(tmp_path, ack_policy="all")
    configs = trial._processor_configs(PG)
    assert [configs[n]["pinned"] for n in ("pg1", "pg2")] == [True, True]
    assert "role" not in configs["pg1"] and trial.partitioning is None
    options = processor_options({**configs["pg1"], "options": trial.options.as_dict()})
    assert options.ack_policy == "explicit" and options.priority_group == "torture"
    trial.pg_url = PG
    assert trial.pg_consumers() == ["pg"] and trial.busy_partitions() == []


@pytest.mark.parametrize("window", ["default", "short"])
def test_each_member_applies_a_share_of_the_partitioned_stream(tmp_path: Path, window: str) -> None:
    """The docstring's layout: t.pub, t.sess, t.cli in partitions 0, 3, 1; with both
    members live each runs at least one partition that gets messages."""
    trial = _trial(tmp_path, members="partitioned", window=window)
    assert trial.partitioning is not None
    assert trial.partitioning.describe() == "4 partitions of t.* by token 1"
    layout = {n: trial.partitioning.partition_of(f"t.{n}") for n in ("pub", "sess", "cli")}
    assert layout == {"pub": 0, "sess": 3, "cli": 1}
    busy = trial.busy_partitions()
    assert busy == ([1, 3] if window == "short" else [0, 1, 3])  # the Publisher's TP then
    shares = assign(PARTITIONS, {"pg1", "pg2"})
    assert all(set(shares[m]) & set(busy) for m in ("pg1", "pg2")), shares


def test_switches_are_counted_per_partition_between_the_members(tmp_path: Path) -> None:
    partitioning = _trial(tmp_path, members="partitioned").partitioning
    # Both members apply side by side (pub: partition 0, sess: 3); pg2 takes partition 3
    # over once, then gives it back.
    rows = [("pub-0", "pg2", 0.0, 1.0), ("sess-0", "pg1", 0.0, 2.0),
            ("pub-1", "pg2", 0.0, 3.0), ("sess-1", "pg2", 0.0, 4.0),
            ("pub-2", "pg2", 0.0, 5.0), ("sess-2", "pg1", 0.0, 6.0)]  # fmt: skip
    counted = _switches(rows, partitioning)
    assert counted["switches"] == 2
    assert counted["rows"] == {"pg1": 2, "pg2": 4}
    assert counted["by_partition"] == {
        "0": {"rows": {"pg2": 3}, "switches": 0},
        "3": {"rows": {"pg1": 2, "pg2": 1}, "switches": 2},
    }
    assert _switches(rows)["switches"] == 3  # the pair's count: every change of applier


class _Conn:
    closed = False

    async def close(self) -> None:
        self.closed = True


async def test_a_member_that_fails_as_it_starts_is_a_start_up_retry() -> None:
    """GroupMember.wait_running also returns when run() failed (its finally sets the
    event): the run's outcome decides, not the readiness."""
    stopper = _Stopper()

    async def failed() -> None:
        raise StreamNotFound("stream T not found")

    async def ready_at_once() -> None:
        return None

    conn = _Conn()
    with pytest.raises(StreamNotFound):  # retried by _startup (an OncestreamError)
        await stopper.until_running(failed(), asyncio.sleep(0.05), "member", conn)
    assert conn.closed

    async def both() -> None:  # fails in the same round as it says it is ready
        raise StreamNotFound("stream T not found")

    conn = _Conn()
    with pytest.raises(StreamNotFound):
        await stopper.until_running(both(), ready_at_once(), "member", conn)
    assert conn.closed

    async def stopped() -> str:  # SIGTERM during the set-up: a clean end, exit 0
        return "stats"

    conn = _Conn()
    running = await stopper.until_running(stopped(), asyncio.sleep(3600), "member", conn)
    assert await running == "stats" and not conn.closed

    forever = asyncio.Event()
    conn = _Conn()
    running = await stopper.until_running(forever.wait(), ready_at_once(), "member", conn)
    assert not running.done() and not conn.closed  # running: the caller awaits it
    running.cancel()
