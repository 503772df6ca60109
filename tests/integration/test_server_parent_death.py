"""A server dies with the process that started it, however that process dies (Linux).

A process killed by a signal runs no clean-up: before, each nats-server it had
started (``NatsServer``, so ``oncestream server``, the demo, the tests) and each
PostgreSQL test server (harness/) ran on with no parent (5 nats-servers and 2
PostgreSQL servers after a crashed test run). Now the kernel kills them: the
parent-death signal of ``oncestream.server._lifeline``. Each case starts a parent
process, checks by PID that its servers run, kills the parent, and checks by PID
that they ended. A server started from a thread that ended first (the executor
thread of ``asyncio.to_thread``) must outlive that thread: the signal follows
the thread that forked it, and every server is forked by one thread that lives
as long as its process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import ended, find_pg_bin

ROOT = Path(__file__).resolve().parents[2]

#: The parent: servers started three ways, their PIDs printed, then it waits to be killed.
PARENT = r"""
import asyncio, json, sys, threading
from pathlib import Path
from oncestream.server import NatsServer

work = Path(sys.argv[1])
kinds = sys.argv[2].split(",")
pids = {}
if "main" in kinds:
    pids["main"] = NatsServer(work_dir=work / "main").start().pid

if "to_thread" in kinds:
    async def in_a_thread():
        return await asyncio.to_thread(lambda: NatsServer(work_dir=work / "thread").start())

    server = asyncio.run(in_a_thread())  # its executor thread has ended when this returns
    assert not [t for t in threading.enumerate() if t.name.startswith("asyncio_")]
    pids["to_thread"] = server.pid

if "thread" in kinds:
    box = []
    worker = threading.Thread(target=lambda: box.append(NatsServer(work_dir=work / "t").start()))
    worker.start()
    worker.join()
    pids["thread"] = box[0].pid

if "postgres" in kinds:
    sys.path.insert(0, sys.argv[3])
    from harness import PostgresServer

    pg = PostgresServer().start()
    pids["postgres"] = pg.pid

print(json.dumps(pids), flush=True)
sys.stdin.read()
"""


def _children(pid: int) -> set[int]:
    """The PIDs of ``pid``'s children and their descendants, now."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                kids = {int(k) for k in (task / "children").read_text().split()}
            except OSError:
                continue
            todo.extend(kids - found)
            found |= kids
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.fixture
def survivors() -> Iterator[dict[int, bytes]]:
    """PIDs a test expects to end, with a fragment of their command line: any still
    running at teardown is SIGKILLed (by PID, checked against the fragment)."""
    watched: dict[int, bytes] = {}
    yield watched
    for pid, fragment in watched.items():
        if not ended(pid, 0) and fragment in _cmdline(pid):
            os.kill(pid, signal.SIGKILL)


def _start_parent(tmp_path: Path, kinds: str) -> tuple[subprocess.Popen[str], dict[str, int]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path), kinds, str(ROOT)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        proc.wait(timeout=30)
        raise AssertionError(f"the parent exited {proc.returncode} before starting its servers")
    return proc, json.loads(line)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV], ids=["SIGKILL", "SIGSEGV"])
def test_nats_servers_die_with_their_parent(
    tmp_path: Path, sig: signal.Signals, survivors: dict[int, bytes]
) -> None:
    parent, pids = _start_parent(tmp_path, "main,to_thread,thread")
    for pid in pids.values():
        survivors[pid] = str(tmp_path).encode()
    try:
        for kind, pid in pids.items():  # the threads that started two of them have ended
            assert not ended(pid, 0), f"the {kind} server (pid {pid}) did not outlive its thread"
    finally:
        os.kill(parent.pid, sig)
        parent.wait(timeout=30)
    assert parent.returncode == -sig
    left = {kind: pid for kind, pid in pids.items() if not ended(pid, 10)}
    assert not left, f"nats-servers outlived their parent (killed by {sig.name}): {left}"


def test_a_postgres_test_server_dies_with_its_parent(
    tmp_path: Path, survivors: dict[int, bytes]
) -> None:
    find_pg_bin()  # installed by make test (scripts/install-test-services)
    parent, pids = _start_parent(tmp_path, "postgres")
    postmaster = pids["postgres"]
    family = {postmaster} | _children(postmaster)  # its checkpointer, writer, ...
    for pid in family:
        survivors[pid] = b"postgres"
    try:
        assert not ended(postmaster, 0)
        assert len(family) > 1, "the postmaster has no children yet"
    finally:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=30)
    left = sorted(pid for pid in family if not ended(pid, 20))
    assert not left, f"PostgreSQL processes outlived their parent: {left}"


def test_oncestream_server_takes_its_nats_server_along(survivors: dict[int, bytes]) -> None:
    cli = subprocess.Popen(
        [str(Path(sys.executable).parent / "oncestream"), "server", "--port", "-1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert cli.stdout is not None
    try:
        line = cli.stdout.readline()
        assert "nats-server ready at" in line, line
        pid = int(line.rsplit("(pid ", 1)[1].split(")")[0])
        survivors[pid] = b"nats-server"
        assert not ended(pid, 0)
    finally:
        cli.kill()  # SIGKILL: no Ctrl-C handling, no atexit
        cli.wait(timeout=30)
    assert ended(pid, 10), f"nats-server pid {pid} outlived `oncestream server`"
