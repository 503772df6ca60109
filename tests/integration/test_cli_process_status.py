"""`oncestream process` (a real worker subprocess) and `oncestream status --json`."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from harness import publish_n

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from oncestream.cli import main; main()"]


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    return subprocess.run(
        [*CLI, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


async def test_process_then_status(nats_server, conn, make_stream, tmp_path) -> None:  # type: ignore[no-untyped-def]
    await make_stream("CLI", ("cli.>",))
    await publish_n(conn, "cli.x", 2000)
    db = tmp_path / "work.db"
    ledger = f"sqlite:///{db}"  # four slashes: an absolute path
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = await asyncio.create_subprocess_exec(
        *CLI, "process", "--handler", "tests.handlers:record", "--stream", "CLI",
        "--consumer", "w", "--ledger", ledger, "--batch", "200", "--progress", "0.5",
        "--server", nats_server.url,
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        async with asyncio.timeout(60):
            while True:
                await asyncio.sleep(0.2)
                assert proc.returncode is None, await proc.communicate()
                try:
                    info = await conn.consumer_info("CLI", "w")
                except Exception:
                    continue
                if info["num_pending"] == 0 and info["num_ack_pending"] == 0:
                    break
        proc.send_signal(signal.SIGTERM)
        _out, err_bytes = await asyncio.wait_for(proc.communicate(), 30)
        err = err_bytes.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.communicate()
    assert proc.returncode == 0, err
    assert "applied=2000" in " ".join(err.split()), err
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(*), count(DISTINCT id) FROM effects").fetchone() == (
        2000,
        2000,
    )
    con.close()

    result = _cli("status", "CLI", "w", "--ledger", ledger, "--json", "--server", nats_server.url)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["stream"]["messages"] == 2000 and report["stream"]["last_seq"] == 2000
    assert report["stream"]["consumers"] == 1
    (row,) = report["consumers"]
    assert row["consumer"] == "w" and row["ack_floor"] == 2000 and row["ack_pending"] == 0
    assert row["ledger_applied"] == 2000

    listing = json.loads(_cli("status", "--json", "--server", nats_server.url).stdout)
    assert [s["stream"] for s in listing["streams"]] == ["CLI"]
    table = _cli("status", "CLI", "--server", nats_server.url)
    assert table.returncode == 0 and "ack_floor" in table.stdout and "2,000" in table.stdout


def test_process_bad_arguments_exit_2(nats_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    base = ["process", "--stream", "S", "--consumer", "c", "--server", nats_server.url]
    bad_handler = _cli(
        *base, "--handler", "no_such_module:f", "--ledger", f"sqlite:///{tmp_path}/x.db"
    )
    assert bad_handler.returncode == 2 and "cannot import" in bad_handler.stderr
    bad_ledger = _cli(*base, "--handler", "tests.handlers:record", "--ledger", "mysql://h/db")
    assert bad_ledger.returncode == 2 and "sqlite:// or postgresql://" in bad_ledger.stderr
