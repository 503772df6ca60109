"""Where a group member's microseconds go: one member, py-spy on it, pprof on nats-server.

A fresh nats-server (with ``prof_port``) holds bench/group_scale.py's partitioned
stream (N messages of 128 B, 1,000 keys, 8 partitions). One member process
(bench/_group_member.py, batch handler, SQLite per partition) applies it; between
80% and 30% left, py-spy samples the member and pprof the server (back-to-back 2 s
profiles), and /proc gives both processes' CPU seconds. Printed: CPU us/msg of each,
the member's Processors' batches (messages per transaction), the server's top
functions (flat and cumulative) and the member's top Python functions (inclusive).

Env: as bench/group_scale.py (GROUP_SCALE_N, GROUP_SCALE_UNCAPPED_BATCH), and
GROUP_MEMBER_OPTIONS (JSON, see bench/_group_member.py) for the member's options.
Run: ``flock /tmp/oncestream-heavy.lock .venv/bin/python bench/profile_group.py``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._cpu import cpu_seconds
from bench.group_scale import HERE, ROOT, STREAM, UNCAPPED_BATCH, N, _fill, _left
from bench.peers.kafka import free_port
from bench.profile_peers import GoProfile, PySpy

from oncestream import ConnectOptions, connect
from oncestream.server import JetStreamConfig, NatsServer, ServerConfig


async def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="profile-group-"))
    port = free_port()
    config = ServerConfig(
        jetstream=JetStreamConfig(store_dir=work / "js"), extra={"prof_port": port}
    )
    server = NatsServer(config, work_dir=work).start()
    assert server.pid is not None
    member: subprocess.Popen[str] | None = None
    try:
        sizes = await _fill(server.url)
        stats_file = work / "member-stats.json"
        env = dict(os.environ, PYTHONPATH=str(ROOT), GROUP_MEMBER_STATS=str(stats_file))
        group = f"prof{time.monotonic_ns() % 10**6}"
        member = _start_member(server.url, work, group, env)
        spy = go = None
        marks: dict[str, tuple[float, int, float, float]] = {}
        async with await connect(ConnectOptions(servers=(server.url,))) as conn:
            deadline = time.monotonic() + max(600.0, N / 500)
            while time.monotonic() < deadline:
                left = await _left(conn, group, sizes)
                now = (time.monotonic(), left, cpu_seconds(server.pid), cpu_seconds(member.pid))
                if "start" not in marks and left <= 0.8 * N:
                    marks["start"] = now
                    spy = PySpy(member.pid, work / "spy.txt")
                    go = GoProfile(port, work / "pprof").start()
                if "start" in marks and left <= 0.3 * N:
                    marks["end"] = now
                    break
                await asyncio.sleep(0.1)
            assert spy is not None and go is not None, "never reached 80% left"
            stacks = spy.stop()
            files = go.stop()
        member.terminate()
        member.wait(timeout=60)
        (t0, l0, s0, m0), (t1, l1, s1, m1) = marks["start"], marks["end"]
        done = l0 - l1
        print(f"\n{done} messages in {t1 - t0:.2f}s: {done / (t1 - t0):,.0f} msg/s")
        print(
            f"CPU us/msg: server {(s1 - s0) * 1e6 / done:.2f}, member {(m1 - m0) * 1e6 / done:.2f}"
        )
        print(f"load {os.getloadavg()}")
        if stats_file.exists():
            print("member stats:", stats_file.read_text())
        _python_top(stacks)
        _go_top(files)
    finally:
        if member is not None and member.poll() is None:
            member.kill()
            member.wait()
        server.close()


def _start_member(url: str, work: Path, group: str, env: dict[str, str]) -> subprocess.Popen[str]:
    command = [sys.executable, str(HERE / "_group_member.py"), url, str(work), "m0", STREAM,
               group, "batch", UNCAPPED_BATCH]  # fmt: skip
    return subprocess.Popen(command, env=env, text=True)


def _python_top(stacks: list[tuple[float, list[str]]], k: int = 45) -> None:
    total = sum(w for w, _ in stacks) or 1.0
    inclusive: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    for weight, frames in stacks:
        for frame in set(frames):
            inclusive[_short(frame)] += weight
        leaf[_short(frames[0])] += weight
    print(f"\nmember, py-spy {total:.0f} samples, inclusive share:")
    for name, w in inclusive.most_common(k):
        print(f"  {w / total:6.1%}  {name}")
    print("\nmember, leaf share:")
    for name, w in leaf.most_common(25):
        print(f"  {w / total:6.1%}  {name}")


def _short(frame: str) -> str:
    return frame.replace(str(ROOT) + "/", "").replace(sys.base_prefix, "")


def _go_top(files: list[Path]) -> None:
    for how in ("-top", "-top -cum"):
        out = subprocess.run(
            ["go", "tool", "pprof", *how.split(), "-nodecount=45", *map(str, files)],
            capture_output=True, text=True, check=False,
        ).stdout  # fmt: skip
        print(f"\nnats-server pprof {how}:\n{out}")


if __name__ == "__main__":
    asyncio.run(main())
