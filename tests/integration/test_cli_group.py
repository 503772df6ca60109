"""`oncestream stream add --partitions`, `process --member`, `status` and `doctor` on a group.

Two CLI members share a partitioned stream; status shows each partition's owner and
lag and the live members; SIGTERM hands the partitions over and exits 0; doctor
checks the partitioned setup; a stream partitioned in place keeps what it held.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from harness import publish_n
from tests.integration._cli import cli, cli_json

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from oncestream.cli import main; main()"]


async def _member(url: str, folder: Path, name: str, *extra: str) -> asyncio.subprocess.Process:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return await asyncio.create_subprocess_exec(
        *CLI, "process", "--handler", "tests.handlers:record", "--stream", "JOBS",
        "--consumer", "svc", "--member", name, "--ledger", f"sqlite:///{folder}/svc-{{partition}}.db",
        "--takeover-after", "2s", "--member-ttl", "2s", "--progress", "0", "--server", url,
        *extra,
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


async def _stop(proc: asyncio.subprocess.Process) -> int:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode


def _applied(folder: Path) -> list[int]:
    ids: list[int] = []
    for path in folder.glob("svc-*.db"):
        with sqlite3.connect(path) as con:
            try:
                ids += [r[0] for r in con.execute("SELECT id FROM effects")]
            except sqlite3.OperationalError:
                pass  # a partition no message reached yet
    return ids


def _count(db: Path) -> int:
    try:
        with sqlite3.connect(db) as con:
            return int(con.execute("SELECT count(*) FROM effects").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


async def _until(check, timeout: float) -> None:  # type: ignore[no-untyped-def]
    """Poll ``check`` (run in a thread: it may run the CLI, which runs its own loop)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await asyncio.to_thread(check):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met")
        await asyncio.sleep(0.2)  # other processes' ledgers and the server: polled


async def test_cli_members_status_and_doctor(nats_server, conn, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    added = await asyncio.to_thread(
        cli_json, url, "stream", "add", "JOBS", "--subjects", "jobs.*", "--partitions", "4",
        "--partition-key", "1",
    )  # fmt: skip
    assert added["config"]["subject_transform"]["dest"] == "{{partition(4,1)}}.jobs.{{wildcard(1)}}"
    info = await asyncio.to_thread(cli, url, "stream", "info", "JOBS")
    assert "4 partitions of jobs.* by token 1" in info.stdout
    members = [await _member(url, tmp_path, "a"), await _member(url, tmp_path, "b")]
    try:
        for i in range(200):
            await publish_n(conn, f"jobs.k{i % 20}", 1, start=i)
        await _until(lambda: len(_applied(tmp_path)) >= 200, 60)

        def spread() -> bool:
            report = cli_json(url, "status", "JOBS")
            group = report["partitions"]["groups"][0]
            return {r["owner"] for r in group["partitions"]} == {"a", "b"}

        await _until(spread, 30)
        report = await asyncio.to_thread(cli_json, url, "status", "JOBS")
        group = report["partitions"]["groups"][0]
        assert group["group"] == "svc"
        assert [m["member"] for m in group["members"]] == ["a", "b"]
        assert [r["consumer"] for r in group["partitions"]] == [f"svc-p{p}" for p in range(4)]
        assert all(r["pending"] == 0 for r in group["partitions"])
        shown = (await asyncio.to_thread(cli, url, "status", "JOBS")).stdout
        assert "partitions of group svc" in shown and "members of group svc" in shown
        doctor = await asyncio.to_thread(cli, url, "doctor", "JOBS", "--json")
        findings = json.loads(doctor.stdout)["findings"]
        checks = {(f["check"], f["severity"]) for f in findings}
        assert ("partitions", "ok") in checks and ("members", "ok") in checks, findings
        # A clean stop of one member: the other takes its partitions and applies the rest.
        assert await _stop(members[0]) == 0
        for i in range(200, 300):
            await publish_n(conn, f"jobs.k{i % 20}", 1, start=i)
        await _until(lambda: len(_applied(tmp_path)) >= 300, 60)
        await _until(lambda: {r["owner"] for r in
                              cli_json(url, "status", "JOBS")["partitions"]["groups"][0]
                              ["partitions"]} == {"b"}, 30)  # fmt: skip
    finally:
        for proc in members:
            await _stop(proc)
    ids = _applied(tmp_path)
    assert sorted(ids) == list(range(300)), "every message applied exactly once"
    # tail shows the stored subjects; a --subject on the published ones reads every partition.
    tailed = await asyncio.to_thread(
        cli, url, "tail", "JOBS", "--subject", "jobs.k1", "--from", "1", "--json"
    )
    assert tailed.exit_code == 0, tailed.output
    lines = [json.loads(line) for line in tailed.stdout.splitlines()]
    assert len(lines) == 15 and {m["subject"].split(".", 1)[1] for m in lines} == {"jobs.k1"}
    assert lines[0]["subject"].split(".")[0].isdigit()


async def test_partitioning_a_stream_in_place_keeps_what_it_holds(  # type: ignore[no-untyped-def]
    nats_server, conn, tmp_path: Path
) -> None:
    """Old messages keep their subjects: the old consumer finishes them, the group starts
    after it (--after) and applies only the new ones; nothing is applied twice or lost."""
    url = nats_server.url
    await asyncio.to_thread(cli_json, url, "stream", "add", "JOBS", "--subjects", "jobs.*")
    for i in range(50):
        await publish_n(conn, f"jobs.k{i % 5}", 1, start=i)
    refused = await asyncio.to_thread(
        cli, url, "stream", "add", "JOBS", "--subjects", "jobs.*", "--partitions", "4"
    )
    assert refused.exit_code == 2
    edited = await asyncio.to_thread(
        cli, url, "stream", "edit", "JOBS", "--partitions", "4", "--partition-key", "1"
    )
    assert edited.exit_code == 0, edited.output
    assert "the 50 messages stored before keep their subjects" in " ".join(edited.stdout.split())
    for i in range(50, 100):
        await publish_n(conn, f"jobs.k{i % 5}", 1, start=i)
    # A member told to start after a consumer that does not exist is refused (a typo
    # would otherwise wait for ever).
    early = await _member(url, tmp_path, "a", "--after", "old")
    assert await asyncio.wait_for(early.wait(), 60) == 2
    # The consumer that processed the stream: it takes only the unmapped subjects.
    old_db = tmp_path / "old.db"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    old = await asyncio.create_subprocess_exec(
        *CLI, "process", "--handler", "tests.handlers:slow_record", "--stream", "JOBS",
        "--consumer", "old", "--filter-subject", "jobs.*", "--ledger", f"sqlite:///{old_db}",
        "--batch", "5", "--progress", "0", "--server", url,
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        await _until(lambda: _count(old_db) > 0, 30)
        member = await _member(url, tmp_path, "a", "--after", "old")
        try:
            # While "old" has messages left, the group applies nothing.
            while _count(old_db) < 50:
                assert _applied(tmp_path) == [], "the group applied before --after finished"
                await asyncio.sleep(0.05)
            await _until(lambda: len(_applied(tmp_path)) >= 50, 60)
        finally:
            assert await _stop(member) == 0
    finally:
        assert await _stop(old) == 0
    with sqlite3.connect(old_db) as con:
        old_ids = [r[0] for r in con.execute("SELECT id FROM effects")]
    assert sorted(old_ids) == list(range(50))
    assert sorted(_applied(tmp_path)) == list(range(50, 100))


async def test_cli_member_acks_each_batch_once(nats_server, conn, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`process --member ... --ack-policy all`: the partitions' consumers ack once a batch."""
    url = nats_server.url
    await asyncio.to_thread(
        cli_json, url, "stream", "add", "JOBS", "--subjects", "jobs.*", "--partitions", "2",
        "--partition-key", "1",
    )  # fmt: skip
    member = await _member(url, tmp_path, "a", "--ack-policy", "all")
    try:
        for i in range(60):
            await publish_n(conn, f"jobs.k{i % 6}", 1, start=i)
        await _until(lambda: len(_applied(tmp_path)) >= 60, 60)
    finally:
        assert await _stop(member) == 0
    assert sorted(_applied(tmp_path)) == list(range(60)), "every message applied exactly once"
    for partition in range(2):
        info = await conn.consumer_info("JOBS", f"svc-p{partition}")
        assert info["config"]["ack_policy"] == "all"
        assert info["num_ack_pending"] == 0 and info["num_pending"] == 0, info


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--member", "a", "--standby"], "--standby do not apply with --member"),
        (["--member", "a", "--static-member", "0/2"], "exclude each other"),
        (["--static-member", "2/2"], "0 <= index < count"),
        (["--static-member", "x"], "--static-member must be I/N"),
        (["--after", "old"], "--after applies only with --member"),
        (["--member", "a.b"], "member: 'a.b' is not a valid consumer name"),
        (["--member", "a", "--member-ttl", "0.5s"], "member_ttl must be whole seconds"),
    ],
)
def test_bad_member_arguments_exit_2(nats_server, tmp_path, args, message) -> None:  # type: ignore[no-untyped-def]
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    result = subprocess.run(
        [*CLI, "process", "--stream", "S", "--consumer", "c", "--handler",
         "tests.handlers:record", "--ledger", f"sqlite:///{tmp_path}/x-{{partition}}.db",
         "--server", nats_server.url, *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert message in " ".join(result.stderr.split())


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _lone_member(url: str, ledger: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    return subprocess.run(
        [*CLI, "process", "--stream", "JOBS", "--consumer", "c", "--member", "m",
         "--handler", "tests.handlers:record", "--ledger", ledger, "--server", url],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_every_partitions_sqlite_ledger_is_checked_before_any_starts(nats_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Partition 2's ledger is not a database: exit 2 naming it, before any file or
    consumer is made (the member used to make partitions 0, 1 and 3's first)."""
    url = nats_server.url
    added = cli(url, "stream", "add", "JOBS", "--subjects", "jobs.*", "--partitions", "4")
    assert added.exit_code == 0, added.output
    folder = tmp_path / "ledgers"  # tmp_path holds the server's store too
    folder.mkdir()
    (folder / "led-2.db").write_text("not a database\n")
    result = _lone_member(url, f"sqlite:///{folder}/led-{{partition}}.db")
    assert result.returncode == 2, result.stderr
    assert f"{folder}/led-2.db is not an SQLite database" in " ".join(result.stderr.split())
    assert sorted(p.name for p in folder.iterdir()) == ["led-2.db"]  # none made
    assert (folder / "led-2.db").read_text() == "not a database\n"  # untouched
    assert cli_json(url, "consumer", "ls", "JOBS") == []


def test_a_member_whose_database_refuses_it_exits_1(nats_server) -> None:  # type: ignore[no-untyped-def]
    """As a lone Processor does, instead of restarting its partitions every second
    forever; the password is not printed (the start line printed it)."""
    url = nats_server.url
    added = cli(url, "stream", "add", "JOBS", "--subjects", "jobs.*", "--partitions", "4")
    assert added.exit_code == 0, added.output
    result = _lone_member(url, f"postgresql://u:hunter2-secret@127.0.0.1:{_closed_port()}/d")
    assert result.returncode == 1, result.stderr
    output = result.stdout + result.stderr
    assert "cannot open" in output and "u:***@" in output
    assert "hunter2" not in output
