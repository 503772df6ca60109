"""Active/standby Processors (pinned priority group): takeover after SIGKILL and SIGSTOP.

Two worker processes share one SQLite ledger; the test publishes over four
subjects while it kills or freezes the active one, then checks the property
that matters: every stream sequence applied exactly once, per-subject order
kept across the switch (the effects' rowids are the order of application),
and the standby applied nothing before the switch. The takeover time (signal
to the standby's first apply) is printed; docs/production.md quotes it and
``bench/takeover.py`` measures it.
"""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from nats.aio.subscription import Subscription

from oncestream import Connection
from oncestream.server import NatsServer

ROOT = Path(__file__).resolve().parents[2]
STREAM, CONSUMER = "WORK", "svc"
SUBJECTS = tuple(f"work.{k}" for k in "abcd")
TTL = 2.0


class Worker:
    """One ``tests.chaos._standby_worker`` process, its output read line by line.

    A thread reads the output into a queue: a selector on the pipe under a buffered
    ``readline`` misses lines that arrived in the same read as the one returned.
    """

    def __init__(self, url: str, db: Path, name: str, **env_extra: str) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT), **env_extra)
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.chaos._standby_worker", url, str(db), name, STREAM,
             CONSUMER, str(TTL)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self.signalled: set[signal.Signals] = set()
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line)
        self._queue.put(None)  # the output ended

    def wait_line(self, needle: str, timeout: float) -> str:
        """The first output line containing ``needle``, read so far or within ``timeout``."""
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

    def signal(self, sig: signal.Signals) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            self.signalled.add(sig)

    def exit_problem(self) -> str | None:
        """Why the worker's exit was not clean (it must exit 0 on the final SIGTERM, and
        never crash: a SIGSEGV on shutdown was seen), or None; after :meth:`stop`."""
        output = "".join(self.lines)
        if "Fatal Python error" in output:
            return f"{self.name} crashed: {output[-2000:]}"
        expected = -signal.SIGKILL if signal.SIGKILL in self.signalled else 0
        if self.proc.returncode != expected:
            return f"{self.name} exited {self.proc.returncode}, not {expected}: {output[-2000:]}"
        return None

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._reader.join(timeout=10)
        while not self._queue.empty():
            line = self._queue.get()
            if line is not None:
                self.lines.append(line)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _effects(db: Path) -> list[tuple[int, str, str, float]]:
    con = sqlite3.connect(db, timeout=30)
    try:
        return con.execute("SELECT seq, subject, worker, at FROM effects ORDER BY rowid").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        con.close()


async def _wait_applied(db: Path, count: int, timeout: float) -> list[tuple[int, str, str, float]]:
    deadline = time.monotonic() + timeout
    rows = _effects(db)
    while len({r[0] for r in rows}) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.1)  # polling the shared ledger file: no event crosses processes
        rows = _effects(db)
    return rows


async def _publish(conn: Connection, first: int, count: int, *, pace: float = 0.0) -> None:
    js = conn.nc.jetstream()
    for i in range(first, first + count):
        await js.publish(SUBJECTS[i % len(SUBJECTS)], b"%d" % i)
        if pace and i % 20 == 19:
            await asyncio.sleep(pace)  # a steady producer, so the fault lands mid-stream


async def unpinned_advisories(conn: Connection) -> Subscription:
    """The server's advisories that the consumer's pin expired (``UNPINNED``, reason timeout)."""
    return await conn.nc.subscribe(f"$JS.EVENT.ADVISORY.CONSUMER.UNPINNED.{STREAM}.{CONSUMER}")


def _check(rows: list[tuple[int, str, str, float]], total: int) -> None:
    seqs = [r[0] for r in rows]
    assert len(seqs) == total, (
        f"{len(seqs) - len(set(seqs))} applied twice, {total - len(set(seqs))} missing"
    )
    assert sorted(seqs) == list(range(1, total + 1))
    last: dict[str, int] = {}
    for seq, subject, worker, _ in rows:
        assert seq > last.get(subject, 0), (
            f"{subject}: seq {seq} applied by {worker} after seq {last[subject]}"
        )
        last[subject] = seq


async def _start_pair(
    nats_server: NatsServer,
    conn: Connection,
    make_stream,
    db: Path,
    workers: list[Worker],
    active_env: dict[str, str] | None = None,
    **standby_env: str,
) -> tuple[Worker, Worker]:  # type: ignore[no-untyped-def]
    await make_stream(STREAM, ("work.>",))
    active = Worker(nats_server.url, db, "A", **(active_env or {}))
    workers.append(active)
    active.wait_line("READY", 30)
    await _publish(conn, 0, 10)
    active.wait_line("now the active one", 20)
    standby = Worker(nats_server.url, db, "B", **standby_env)
    workers.append(standby)
    standby.wait_line("READY", 30)
    return active, standby


async def test_standby_takes_over_after_sigkill_in_order_and_once(
    nats_server: NatsServer, conn: Connection, make_stream, tmp_path: Path, workers
) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "ledger.db"
    total = 1500
    active, standby = await _start_pair(nats_server, conn, make_stream, db, workers)
    producer = asyncio.create_task(_publish(conn, 10, total - 10, pace=0.01))
    rows = await _wait_applied(db, 400, 30)
    assert rows and {r[2] for r in rows} == {"A"}, "the standby applied while A was active"
    assert not producer.done(), "the kill must land while messages keep coming"
    killed_at = time.time()
    active.signal(signal.SIGKILL)
    await producer
    rows = await _wait_applied(db, total, 60)
    _check(rows, total)
    first_b = min(r[3] for r in rows if r[2] == "B")
    assert all(r[3] <= killed_at for r in rows if r[2] == "A")
    standby.wait_line("now the active one", 5)
    takeover = first_b - killed_at
    print(f"takeover after SIGKILL: {takeover:.2f}s (pinned_ttl {TTL}s)")
    assert takeover < TTL + 5


async def test_standby_takes_over_from_a_frozen_active_which_then_applies_nothing(
    nats_server: NatsServer, conn: Connection, make_stream, tmp_path: Path, workers
) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "ledger.db"
    # A slow new active with small batches: when the frozen one wakes up, most of what it
    # holds is not applied yet, and the ledger lock is free between the new one's batches.
    active, standby = await _start_pair(
        nats_server, conn, make_stream, db, workers, BATCH="5", HANDLER_SLEEP="0.01"
    )
    await _publish(conn, 10, 290)
    rows = await _wait_applied(db, 300, 30)
    assert len(rows) == 300 and {r[2] for r in rows} == {"A"}
    # Frozen while idle with a pull request outstanding: what arrives now is delivered
    # to A and held there, unacknowledged, until the takeover's reset.
    stopped_at = time.time()
    active.signal(signal.SIGSTOP)
    await _publish(conn, 300, 300)
    standby.wait_line("now the active one", TTL + 10)
    active.signal(signal.SIGCONT)  # wakes up holding messages the new active has not applied
    active.wait_line("no longer the active instance", 30)
    await _publish(conn, 600, 100)
    rows = await _wait_applied(db, 700, 60)
    _check(rows, 700)
    # Nothing of A's after the freeze: it rolls back what it held (the owner check; the
    # in-process test of it is tests/integration/test_processor_pinned.py).
    assert all(r[3] <= stopped_at for r in rows if r[2] == "A"), "A applied after its freeze"
    first_b = min(r[3] for r in rows if r[2] == "B")
    print(f"takeover after SIGSTOP: {first_b - stopped_at:.2f}s (pinned_ttl {TTL}s)")
    assert first_b - stopped_at < TTL + 5


#: ack_wait in the quiet-consumer test: how long the server keeps what the frozen one held.
QUIET_ACK_WAIT = 6.0


async def test_on_a_quiet_consumer_the_standby_takes_over_when_ack_wait_ends(
    nats_server: NatsServer, conn: Connection, make_stream, tmp_path: Path, workers
) -> None:  # type: ignore[no-untyped-def]
    """The server moves a pin only to deliver a message (docs/production.md).

    A is frozen while idle, with a pull request open; what is published right after
    goes to A, and nothing comes after. When A's pin expires the server has nothing
    to deliver, so the standby is not pinned then: only when ``ack_wait`` ends and the
    server redelivers what A held. Then every message is applied once, none by A.
    """
    db = tmp_path / "ledger.db"
    ack = {"ACK_WAIT": str(QUIET_ACK_WAIT)}
    active, standby = await _start_pair(nats_server, conn, make_stream, db, workers, ack, **ack)
    rows = await _wait_applied(db, 10, 30)
    assert len(rows) == 10 and {r[2] for r in rows} == {"A"}
    advisories = await unpinned_advisories(conn)
    stopped_at = time.monotonic()
    active.signal(signal.SIGSTOP)
    await _publish(conn, 10, 5)  # within A's pin: into its open pull request
    published_at = time.monotonic()
    await advisories.next_msg(timeout=TTL + 5)  # A's pin expired
    unpinned_after = time.monotonic() - stopped_at
    # Nothing to deliver: no pin for the standby until ack_wait brings A's messages back.
    quiet = published_at + QUIET_ACK_WAIT - 1 - time.monotonic()
    with pytest.raises(AssertionError, match="no line with"):
        standby.wait_line("now the active one", quiet)
    standby.wait_line("now the active one", TTL + 5)
    took = time.monotonic() - stopped_at
    print(f"quiet consumer: pin expired {unpinned_after:.2f}s, takeover {took:.2f}s after SIGSTOP")
    assert took < QUIET_ACK_WAIT + TTL + 5
    rows = await _wait_applied(db, 15, 30)
    _check(rows, 15)
    assert [r[2] for r in rows][10:] == ["B"] * 5, "A applied after its freeze"
    active.signal(signal.SIGCONT)
    active.wait_line("no longer the active instance", 30)


#: The workers' SQLite busy timeout in the frozen-writer tests: before the fix the
#: standby's fence waited this long for the lock and the standby exited.
BUSY = 2.0


@pytest.mark.parametrize("ending", ["resumed", "killed", "long batch"])
async def test_standby_waits_for_an_active_frozen_inside_a_batch_and_takes_over_after(
    nats_server: NatsServer,
    conn: Connection,
    make_stream,
    tmp_path: Path,
    workers,
    ending: str,
) -> None:  # type: ignore[no-untyped-def]
    """SQLite: the active one holds the ledger's write lock, frozen (SIGSTOP) or blocked.

    The server pins the standby, whose fence cannot be written while the lock is
    held (SQLite cannot take it from another process). The standby must not exit
    (it did, after its busy timeout): it keeps the pin, retries, applies nothing,
    and takes over once the lock is free: the frozen one resumed (its batch in
    flight commits first, its next one is refused), was killed (its batch is
    rolled back) or its long batch ended.
    """
    db = tmp_path / "ledger.db"
    freeze = {"BUSY_TIMEOUT": str(BUSY), "FREEZE_AT": "320"}
    if ending == "long batch":
        freeze["FREEZE_FOR"] = str(5 * BUSY)
    active, standby = await _start_pair(
        nats_server, conn, make_stream, db, workers, active_env=freeze, BUSY_TIMEOUT=str(BUSY)
    )
    await _publish(conn, 10, 290)
    rows = await _wait_applied(db, 300, 30)
    assert len(rows) == 300 and {r[2] for r in rows} == {"A"}
    await _publish(conn, 300, 100)
    active.wait_line("FROZEN", 20)  # inside the batch that applies seq 320: the lock held
    await _publish(conn, 400, 50)  # pending: the server pins the standby when A's pin expires
    standby.wait_line("cannot take over yet", TTL + 10)
    # Well past its busy timeout, the standby is still there, and has applied nothing.
    with pytest.raises(subprocess.TimeoutExpired):
        standby.proc.wait(timeout=3 * BUSY)
    assert {r[2] for r in _effects(db)} == {"A"}
    if ending == "resumed":
        active.signal(signal.SIGCONT)
    elif ending == "killed":
        active.signal(signal.SIGKILL)
    standby.wait_line("now the active one", 30)
    if ending != "killed":
        active.wait_line("no longer the active instance", 30)
    await _publish(conn, 450, 50)
    rows = await _wait_applied(db, 500, 60)
    _check(rows, 500)
    # The old active one applied nothing after the new one began: every row of A's
    # comes before every row of B's.
    order = [r[2] for r in rows]
    assert order == sorted(order), "A applied after B had taken over"
    assert standby.proc.poll() is None, "the standby exited"
