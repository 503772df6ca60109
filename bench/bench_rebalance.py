"""Rebalance time of a group after a member's SIGKILL (seconds; p50 and p99 over 20 kills).

Four member processes (``tests.chaos._group_worker``: a GroupMember, SQLite ledger per
partition) share 8 partitions on a fresh server while a producer publishes steadily
over 200 keys. Each round SIGKILLs one member (in turn), and measures the time from
the kill until every partition that member applied last has had a message applied by
another member (from the effects' timestamps); then the member is started again under
its name and the group settles (each partition applied by one member) before the next
kill. The bound: the killed member's key expires after ``member_ttl`` (the others then
start its partitions) and its pins after ``pinned_ttl`` (the server then pins them),
whichever is later, plus a takeover (fence, reset, re-subscribe) and a heartbeat.

Env: BENCH_REBALANCE_KILLS (20), BENCH_REBALANCE_TTL (pinned_ttl, 2), BENCH_REBALANCE_MEMBER_TTL
(2), BENCH_REBALANCE_HEARTBEAT (0.5). Output: RESULT lines (bench/run.py) and
bench/results/rebalance-<time>.json.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import fresh_server, report

from oncestream import ConnectOptions, connect
from oncestream.streams import Partitioning, StreamSpec, ensure_stream

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
GROUP = "rebalance"
KILLS = int(os.environ.get("BENCH_REBALANCE_KILLS", "20"))
TTL = float(os.environ.get("BENCH_REBALANCE_TTL", "2"))
MEMBER_TTL = os.environ.get("BENCH_REBALANCE_MEMBER_TTL", "2")
HEARTBEAT = os.environ.get("BENCH_REBALANCE_HEARTBEAT", "0.5")
MEMBERS, PARTITIONS, KEYS, RATE = 4, 8, 200, 400
LAYOUT = Partitioning(subjects="rb.*", partitions=PARTITIONS, key=(1,))


class Member:
    def __init__(self, url: str, folder: Path, name: str) -> None:
        env = dict(
            os.environ, PYTHONPATH=str(ROOT), HEARTBEAT=HEARTBEAT, MEMBER_TTL=MEMBER_TTL,
            BATCH="50",
        )  # fmt: skip
        ledger = f"sqlite:///{folder}/svc-{{partition}}.db"
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.chaos._group_worker", url, ledger, name, "RB", "svc",
             str(TTL)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip

    def wait_ready(self, timeout: float = 60) -> None:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if "READY" in line:
                threading_drain(self.proc)
                return
        raise RuntimeError(f"{self.name}: not ready in {timeout}s")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def threading_drain(proc: subprocess.Popen[str]) -> None:
    """Read the rest of a worker's output on a thread (a full pipe would block it)."""
    import threading

    def drain() -> None:
        assert proc.stdout is not None
        for _ in proc.stdout:
            pass

    threading.Thread(target=drain, daemon=True).start()


def _rows(folder: Path, since: float) -> list[tuple[str, str, float]]:
    rows: list[tuple[str, str, float]] = []
    for path in sorted(folder.glob("svc-*.db")):
        con = sqlite3.connect(path, timeout=30)
        try:
            rows += con.execute(
                "SELECT subject, member, at FROM effects WHERE at >= ?", (since,)
            ).fetchall()
        except sqlite3.OperationalError:
            pass
        finally:
            con.close()
    return rows


def _owners(rows: list[tuple[str, str, float]], before: float) -> dict[int, str]:
    """Each partition's member of its last message applied before ``before``."""
    last: dict[int, tuple[float, str]] = {}
    for subject, member, at in rows:
        partition = LAYOUT.partition_of_stored(subject)
        if partition is None or at > before:
            continue
        if partition not in last or at >= last[partition][0]:
            last[partition] = (at, member)
    return {p: m for p, (_, m) in last.items()}


async def _producer(conn: Any, stop: asyncio.Event) -> None:
    js = conn.nc.jetstream()
    i = 0
    while not stop.is_set():
        began = time.monotonic()
        for _ in range(RATE // 20):
            await js.publish(f"rb.k{i % KEYS}", b"%d" % i)
            i += 1
        await asyncio.sleep(max(0.0, 0.05 - (time.monotonic() - began)))


async def _settled(folder: Path, names: set[str], timeout: float = 60.0) -> None:
    """Every partition's latest messages applied by one live member, all members busy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        now = time.time()
        rows = _rows(folder, now - 1.0)
        owners = _owners(rows, now)
        if len(owners) == PARTITIONS and set(owners.values()) == names:
            return
    raise RuntimeError("the group did not settle")


async def main() -> None:
    server = fresh_server()
    members: dict[str, Member] = {}
    times: list[float] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            async with await connect(ConnectOptions(servers=(server.url,))) as conn:
                await ensure_stream(
                    conn,
                    StreamSpec(name="RB", subjects=("rb.*",), partitions=8, partition_key=(1,)),
                )
                for index in range(MEMBERS):
                    members[f"m{index}"] = Member(server.url, folder, f"m{index}")
                for member in members.values():
                    await asyncio.to_thread(member.wait_ready)
                stop = asyncio.Event()
                producer = asyncio.create_task(_producer(conn, stop))
                await _settled(folder, set(members))
                for kill in range(KILLS):
                    name = f"m{kill % MEMBERS}"
                    before = _owners(_rows(folder, time.time() - 2.0), time.time())
                    its = {p for p, m in before.items() if m == name}
                    killed = time.time()
                    members[name].kill()
                    took = None
                    deadline = time.monotonic() + 60
                    while took is None and time.monotonic() < deadline:
                        await asyncio.sleep(0.1)
                        firsts: dict[int, float] = {}
                        for subject, member, at in _rows(folder, killed):
                            partition = LAYOUT.partition_of_stored(subject)
                            if partition in its and member != name:
                                firsts[partition] = min(firsts.get(partition, at), at)
                        if its and set(firsts) == its:
                            took = max(firsts.values()) - killed
                    if took is None:
                        raise RuntimeError(f"kill {kill}: partitions {its} never moved")
                    times.append(took)
                    print(f"kill {kill + 1}: {name}, partitions {sorted(its)}: {took:.2f}s")
                    members[name] = Member(server.url, folder, name)
                    await asyncio.to_thread(members[name].wait_ready)
                    await _settled(folder, set(members))
                stop.set()
                await producer
    finally:
        for member in members.values():
            member.stop()
        server.close()
    ordered = sorted(times)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    load = os.getloadavg()
    extra = {
        "p99": round(p99, 2),
        "max": round(max(ordered), 2),
        "runs": [round(t, 2) for t in times],
    }
    label = (
        f"SIGKILL of 1 of {MEMBERS} members -> its partitions applied by others, pinned_ttl "
        f"{TTL:g}s, member_ttl {MEMBER_TTL}s (p50 of {len(times)})"
    )
    report(GROUP, label, round(p50, 2), "s", **extra)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    record = {
        "bench": "rebalance",
        "when": stamp,
        "commit": _commit(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "load_after": [round(x, 2) for x in load],
        "members": MEMBERS,
        "partitions": PARTITIONS,
        "pinned_ttl": TTL,
        "member_ttl": float(MEMBER_TTL),
        "heartbeat": float(HEARTBEAT),
        "producer_msg_per_s": RATE,
        "kills": len(times),
        "p50_s": round(p50, 3),
        "p99_s": round(p99, 3),
        "max_s": round(max(ordered), 3),
        "runs_s": [round(t, 3) for t in times],
    }
    out = RESULTS / f"rebalance-{stamp}.json"
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {out}")


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
            check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return ""


if __name__ == "__main__":
    asyncio.run(main())
