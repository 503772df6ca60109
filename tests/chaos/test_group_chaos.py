"""A group of member processes over a partitioned stream, killed, frozen and restarted.

Four ``tests.chaos._group_worker`` processes share 8 partitions while a producer
publishes over 200 keys; the test SIGKILLs members (one is started again), freezes
one (SIGSTOP, then SIGCONT), restarts one cleanly, adds a fifth, and on SQLite has
one member freeze itself inside a batch while it holds the ledger's lock. Then the
property that matters: every stream sequence applied exactly once, each key's
messages in stream order (the effects' row order is the order of application: a
key's rows share one partition's ledger), on SQLite (a file per partition) and
on one shared PostgreSQL ledger.

The short variant runs in ``make test``; the long one (more messages, more rounds
of faults) under ``-m soak``. It also checks that one member applies a partition
at a time (:func:`check_owners`, from the members' timestamped takeover lines).
The negative controls: with ``ONCESTREAM_GROUP_SABOTAGE=no-reset`` (a takeover does
not reset the partition's consumer) the same test fails on key order;
``no-fence`` (no owner in the ledger) does not make it fail: the per-sequence
ledger and the reset keep every sequence once and in key order without it
(docs/production.md, "Scaling out", quotes the runs and says why), and no fault
of this schedule wakes a member with a batch nobody has applied yet;
tests/chaos/test_group_fence.py lands that one with gates and fails without the fence.
The rebalance time after each SIGKILL is printed (bench/bench_rebalance.py
measures it over 20 kills).
"""

from __future__ import annotations

import asyncio
import os
import queue
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from oncestream import Connection
from oncestream.server import NatsServer
from oncestream.streams import Partitioning

ROOT = Path(__file__).resolve().parents[2]
STREAM, GROUP, PARTITIONS, KEYS = "WORK", "svc", 8, 200
LAYOUT = Partitioning(subjects="work.*", partitions=PARTITIONS, key=(1,))
TTL = 2.0
#: The negative controls (test code only): passed to every worker as SABOTAGE.
SABOTAGE = os.environ.get("ONCESTREAM_GROUP_SABOTAGE", "")

Row = tuple[int, str, str, float]


class Member:
    """One worker process; its output read line by line by a thread."""

    def __init__(self, url: str, ledger: str, name: str, **env_extra: str) -> None:
        env = dict(
            os.environ, PYTHONPATH=str(ROOT), SABOTAGE=SABOTAGE, HEARTBEAT="0.5", MEMBER_TTL="2",
            **env_extra,
        )  # fmt: skip
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.chaos._group_worker", url, ledger, name, STREAM,
             GROUP, str(TTL)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line)
        self._queue.put(None)

    def wait_line(self, needle: str, timeout: float) -> str:
        for line in self.lines:
            if needle in line:
                return line
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                self._queue.put(None)
                break
            self.lines.append(line)
            if needle in line:
                return line
        raise AssertionError(f"{self.name}: no line with {needle!r} in {timeout}s: {self.lines}")

    def drain(self) -> list[str]:
        """Every line read so far (those no wait_line took included)."""
        while True:
            try:
                line = self._queue.get_nowait()
            except queue.Empty:
                return self.lines
            if line is None:
                self._queue.put(None)
                return self.lines
            self.lines.append(line)

    def signal(self, sig: signal.Signals) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._reader.join(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@dataclass
class Ledgers:
    url: str
    kind: str
    folder: Path

    def effects(self) -> list[Row]:
        if self.kind == "postgres":
            import psycopg

            with psycopg.connect(self.url) as con:
                rows = con.execute("SELECT seq, subject, member, at FROM effects ORDER BY id")
                return [tuple(r) for r in rows]  # type: ignore[misc]
        found: list[Row] = []
        for path in sorted(self.folder.glob("svc-*.db")):
            con = sqlite3.connect(path, timeout=30)
            try:
                found += con.execute("SELECT seq, subject, member, at FROM effects ORDER BY rowid")
            except sqlite3.OperationalError:
                pass  # created by the first member that runs the partition
            finally:
                con.close()
        return found


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def ledgers(request: pytest.FixtureRequest, tmp_path: Path) -> Ledgers:
    if request.param == "sqlite":
        return Ledgers(f"sqlite:///{tmp_path}/svc-{{partition}}.db", "sqlite", tmp_path)
    import psycopg

    url = request.getfixturevalue("postgres_url")
    with psycopg.connect(url, autocommit=True) as con:
        con.execute(
            "CREATE TABLE effects (id BIGSERIAL PRIMARY KEY, seq BIGINT NOT NULL, "
            "subject TEXT NOT NULL, member TEXT NOT NULL, at DOUBLE PRECISION NOT NULL)"
        )
    return Ledgers(url, "postgres", tmp_path)


#: A partition's takeover as its new member logs it (process/_pinning), with the time.
_TAKEOVER = re.compile(
    rf"^LOG (\d+\.\d+) \S+ {STREAM}/{GROUP}-p(\d+): this instance is now the active one"
)


def takeovers(members: list[Member]) -> dict[int, list[tuple[float, str]]]:
    """Each partition's takeovers in time order: (when, member)."""
    found: dict[int, list[tuple[float, str]]] = {}
    for member in members:
        for line in member.drain():
            if match := _TAKEOVER.match(line):
                found.setdefault(int(match[2]), []).append((float(match[1]), member.name))
    return {p: sorted(t) for p, t in found.items()}


def check_owners(rows: list[Row], taken: dict[int, list[tuple[float, str]]]) -> None:
    """One member applies a partition at a time: each effect was applied by the member
    whose takeover of its partition came last before it. (A member that was superseded
    while frozen and wakes up must apply nothing: the fence rolls its batch back.)"""
    for seq, subject, member, at in rows:
        partition = LAYOUT.partition_of_stored(subject)
        assert partition is not None, subject
        before = [who for when, who in taken.get(partition, []) if when <= at]
        owner = before[-1] if before else None
        assert owner == member, (
            f"seq {seq} ({subject}) applied by {member} at {at:.3f} while partition "
            f"{partition} belonged to {owner} (takeovers {taken.get(partition)})"
        )


def check(rows: list[Row], total: int) -> None:
    """Every sequence 1..total applied once; each key's sequences in increasing order."""
    seqs = [r[0] for r in rows]
    twice = len(seqs) - len(set(seqs))
    missing = total - len(set(seqs) & set(range(1, total + 1)))
    assert not twice and not missing, f"{twice} applied twice, {missing} missing"
    last: dict[str, tuple[int, str]] = {}
    for seq, subject, member, _ in rows:
        before = last.get(subject)
        assert before is None or seq > before[0], (
            f"{subject}: seq {seq} applied by {member} after seq {before[0]} (by {before[1]})"
        )
        last[subject] = (seq, member)


async def _publish(conn: Connection, total: int, seconds: float) -> None:
    """``total`` messages over KEYS keys, spread over about ``seconds``."""
    js = conn.nc.jetstream()
    step = 50
    for first in range(0, total, step):
        began = time.monotonic()
        for i in range(first, min(first + step, total)):
            await js.publish(f"work.k{i % KEYS}", b"%d" % i)
        pause = seconds * step / total - (time.monotonic() - began)
        if pause > 0:
            await asyncio.sleep(pause)  # a steady producer: the faults land mid-stream


async def _wait_applied(ledgers: Ledgers, total: int, timeout: float) -> list[Row]:
    deadline = time.monotonic() + timeout
    rows = ledgers.effects()
    while len({r[0] for r in rows}) < total and time.monotonic() < deadline:
        await asyncio.sleep(0.25)  # polling the ledgers: no event crosses processes
        rows = ledgers.effects()
    return rows


def rebalance_time(rows: list[Row], killed: str, at: float) -> float | None:
    """Seconds from ``at`` until every partition the killed member applied last before
    ``at`` had a message applied by another member (None: one never had)."""
    last_owner: dict[int, tuple[float, str]] = {}
    for _, subject, member, when in rows:
        partition = LAYOUT.partition_of_stored(subject)
        if partition is None or when > at:
            continue
        if partition not in last_owner or when >= last_owner[partition][0]:
            last_owner[partition] = (when, member)
    its = {p for p, (_, m) in last_owner.items() if m == killed}
    firsts: dict[int, float] = {}
    for _, subject, member, when in rows:
        partition = LAYOUT.partition_of_stored(subject)
        if partition in its and member != killed and when > at:
            firsts[partition] = min(firsts.get(partition, when), when)
    if not its or set(firsts) != its:
        return None
    return max(firsts.values()) - at


@dataclass
class Scenario:
    total: int
    seconds: float
    rounds: int
    #: The members' ack policy: ``explicit`` (an ack per message) or ``all`` (one a batch).
    ack_policy: str = "explicit"


async def _run(
    nats_server: NatsServer,
    conn: Connection,
    make_stream,  # type: ignore[no-untyped-def]
    ledgers: Ledgers,
    members: list[Member],
    scenario: Scenario,
) -> None:
    await make_stream(STREAM, ("work.*",), partitions=PARTITIONS, partition_key=(1,))
    url = nats_server.url
    by_name: dict[str, Member] = {}

    def start(name: str, **env: str) -> Member:
        member = Member(url, ledgers.url, name, ACK_POLICY=scenario.ack_policy, **env)
        members.append(member)
        by_name[name] = member
        return member

    # One member freezes itself inside a batch, the ledger's locks held (on SQLite
    # with a busy timeout shorter than the freeze: a takeover that does not wait for
    # the lock at its fence fails its batches on it).
    freezer = {"FREEZE_AFTER": "625", "HANDLER_SLEEP": "0.002"}  # mid-batch (BATCH 50)
    if ledgers.kind == "sqlite":
        freezer["BUSY_TIMEOUT"] = "2"
    for index in range(4):
        start(f"m{index}", **(freezer if index == 2 else {"BUSY_TIMEOUT": "2"}))
    for member in list(members):
        await asyncio.to_thread(member.wait_line, "READY", 60)
    producer = asyncio.create_task(_publish(conn, scenario.total, scenario.seconds))
    kills: list[tuple[str, float]] = []
    step = scenario.seconds / (6 * scenario.rounds)

    async def thaw_when_frozen() -> None:
        frozen = by_name["m2"]
        await asyncio.to_thread(frozen.wait_line, "FROZEN", scenario.seconds * 2)
        await asyncio.sleep(5.0)  # longer than the busy timeout and pinned_ttl
        frozen.signal(signal.SIGCONT)

    thaw = asyncio.create_task(thaw_when_frozen())
    for round_ in range(scenario.rounds):
        await asyncio.sleep(step)
        victim = by_name[f"m{(round_ % 2) * 2 + 1}"]  # m1, m3, m1, ...
        assert not producer.done(), "the faults must land while messages keep coming"
        kills.append((victim.name, time.time()))
        victim.signal(signal.SIGKILL)
        await asyncio.sleep(step)
        await asyncio.to_thread(start(victim.name).wait_line, "READY", 60)  # same name
        stopped = by_name["m0"]
        stopped.signal(signal.SIGSTOP)  # frozen from outside, wherever it is
        await asyncio.sleep(TTL + 2.0)
        stopped.signal(signal.SIGCONT)
        await asyncio.sleep(step)
        if round_ == 0:
            await asyncio.to_thread(start("m4").wait_line, "READY", 60)  # a fifth joins
        else:
            restarted = by_name["m4"]
            restarted.signal(signal.SIGTERM)  # a clean leave and a start again
            await asyncio.to_thread(restarted.proc.wait, 30)
            await asyncio.to_thread(start("m4").wait_line, "READY", 60)
    await producer
    await thaw
    rows = await _wait_applied(ledgers, scenario.total, 120)
    check(rows, scenario.total)
    for member in members:  # every log line read (stop joins the reader thread)
        await asyncio.to_thread(member.stop)
    check_owners(rows, takeovers(members))
    assert any(r[2] == "m4" for r in rows), "the fifth member applied nothing"
    for partition in range(PARTITIONS):  # the members ran with the policy asked
        info = await conn.consumer_info(STREAM, f"{GROUP}-p{partition}")
        assert info["config"]["ack_policy"] == scenario.ack_policy, info["config"]
    for name, at in kills:
        took = rebalance_time(rows, name, at)
        print(f"rebalance after SIGKILL of {name}: {took if took is None else round(took, 2)}s")


async def test_group_of_members_killed_frozen_restarted_applies_each_message_once_in_key_order(
    nats_server: NatsServer, conn: Connection, make_stream, ledgers: Ledgers, members
) -> None:  # type: ignore[no-untyped-def]
    await _run(nats_server, conn, make_stream, ledgers, members, Scenario(6000, 24.0, 1))


@pytest.mark.parametrize("ledgers", ["sqlite"], indirect=True)
async def test_group_acking_each_batch_once_survives_the_same_faults(
    nats_server: NatsServer, conn: Connection, make_stream, ledgers: Ledgers, members
) -> None:  # type: ignore[no-untyped-def]
    """Ack policy ``all``: one ack per batch covers every message of the partition below it."""
    await _run(nats_server, conn, make_stream, ledgers, members, Scenario(6000, 24.0, 1, "all"))


@pytest.mark.soak
async def test_group_soak_many_rounds_of_faults(
    nats_server: NatsServer, conn: Connection, make_stream, ledgers: Ledgers, members
) -> None:  # type: ignore[no-untyped-def]
    await _run(nats_server, conn, make_stream, ledgers, members, Scenario(60_000, 180.0, 6))


def test_the_owner_check_names_a_member_applying_after_it_was_superseded() -> None:
    """check_owners on a planted history: m0 wakes up and applies after m1's takeover."""
    subject = "3.work.k7"
    partition = LAYOUT.partition_of_stored(subject)
    assert partition is not None
    taken = {partition: [(10.0, "m0"), (20.0, "m1")]}
    check_owners([(1, subject, "m0", 15.0), (2, subject, "m1", 21.0)], taken)
    with pytest.raises(
        AssertionError, match=r"applied by m0 at 22\.000 while partition \d+ belonged to m1"
    ):
        check_owners([(1, subject, "m0", 15.0), (2, subject, "m0", 22.0)], taken)
