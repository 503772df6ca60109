"""`oncestream tail` and `oncestream dlq ls|show|replay` against a real nats-server."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

from oncestream import Connection, ConnectOptions, Processor, ProcessorOptions, SQLiteLedger
from oncestream.process._replay import DeadLetter, _publish, list_dead_letters
from oncestream.read import iter_messages
from tests.integration._cli import cli, cli_json, publish, with_conn

BROKEN = {b"3", b"5", b"8"}


def _handler(fixed: bool) -> Any:
    def handle(msg: Any, tx: Any) -> None:
        if not fixed and msg.data in BROKEN:
            raise ValueError(f"cannot parse record {msg.data.decode()}")
        tx.execute("CREATE TABLE IF NOT EXISTS effects (id INTEGER NOT NULL)")
        tx.execute("INSERT INTO effects (id) VALUES (?)", (int(msg.data),))

    return handle


def _process(url: str, db: Path, *, fixed: bool, applied: int, dead: int = 0) -> Any:
    async def main() -> Any:
        options = ProcessorOptions(
            batch=50, max_deliver=1, dead_letter_stream="ORDERS_DLQ", backoff=(0.1,)
        )
        processor = Processor(
            ConnectOptions(servers=(url,)), "ORDERS", "billing", _handler(fixed),
            ledger=SQLiteLedger(str(db)), options=options,
        )  # fmt: skip
        task = asyncio.create_task(processor.run())
        await processor.wait_until(lambda s: s.applied >= applied and s.dead_lettered >= dead, 30)
        await processor.stop()
        return await task

    return asyncio.run(main())


def _effects(db: Path) -> list[int]:
    con = sqlite3.connect(db)
    try:
        return sorted(r[0] for r in con.execute("SELECT id FROM effects"))
    finally:
        con.close()


def test_tail(nats_server) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    cli_json(url, "stream", "add", "T", "--subjects", "t.>")
    publish(url, "t.a", [b"%d" % i for i in range(1, 13)], Trace="x1")
    publish(url, "t.b", [b"\x00\x01\xff binary", b"long " + b"y" * 500, b"line1\nline2\x1b[31m"])
    last = cli(url, "tail", "T")
    lines = last.stdout.splitlines()
    assert last.exit_code == 0 and len(lines) == 10 and lines[0].startswith("#6 ")
    assert "<binary, 10 bytes: 00 01 ff" in last.stdout
    assert "…(+" in last.stdout and "\x1b" not in last.stdout and "\\x1b[31m" in last.stdout
    some = cli(url, "tail", "T", "--subject", "t.a", "--from", "last:2", "--headers")
    assert [ln.split()[0] for ln in some.stdout.splitlines() if ln.startswith("#")] == [
        "#11",
        "#12",
    ]
    assert "    Trace: x1" in some.stdout
    rows = [
        json.loads(ln) for ln in cli(url, "tail", "T", "--from", "13", "--json").stdout.splitlines()
    ]
    assert [r["seq"] for r in rows] == [13, 14, 15]
    assert "data_base64" in rows[0] and rows[1]["data"].startswith("long y")
    timed = cli(url, "tail", "T", "--from", "1h", "--subject", "t.b", "--json")
    assert [json.loads(ln)["seq"] for ln in timed.stdout.splitlines()] == [13, 14, 15]
    assert cli(url, "tail", "T", "--from", "2999-01-01T00:00:00Z").stdout == ""
    # never acks, creates no consumer
    assert cli_json(url, "stream", "info", "T")["state"]["consumer_count"] == 0

    missing = cli(url, "tail", "NOPE")
    assert missing.exit_code == 2 and "stream 'NOPE' not found" in missing.stderr
    for bad in ("last:0", "last:x", "soon"):
        assert cli(url, "tail", "T", "--from", bad).exit_code == 2, bad


def test_tail_follow_stops_on_sigterm(nats_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os
    import signal
    import subprocess
    import sys

    url = nats_server.url
    cli_json(url, "stream", "add", "F", "--subjects", "f.>")
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-c", "from oncestream.cli import main; main()", "tail", "F",
         "--follow", "--from", "1", "--server", url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root,
        env=dict(os.environ, PYTHONPATH=str(root)),
    )  # fmt: skip
    try:
        publish(url, "f.x", [b"first"])
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until tail printed the message
        assert line.startswith("#1 ") and "first" in line
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err


def test_dead_letters_replayed_once(nats_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    db = tmp_path / "billing.db"
    cli_json(url, "stream", "add", "ORDERS", "--subjects", "orders.>")
    publish(url, "orders.eu", [b"%d" % i for i in range(1, 11)])
    stats = _process(url, db, fixed=False, applied=7, dead=3)
    assert stats.dead_lettered == 3 and _effects(db) == [1, 2, 4, 6, 7, 9, 10]

    letters = cli_json(url, "dlq", "ls", "ORDERS_DLQ")
    assert [(x["stream"], x["orig_seq"], x["subject"]) for x in letters] == [
        ("ORDERS", 3, "orders.eu"),
        ("ORDERS", 5, "orders.eu"),
        ("ORDERS", 8, "orders.eu"),
    ]
    assert "cannot parse record 3" in letters[0]["error"]
    table = cli(url, "dlq", "ls", "ORDERS_DLQ")
    assert table.exit_code == 0 and "cannot parse record 5" in table.stdout
    tail = cli(url, "tail", "ORDERS_DLQ", "--headers")
    assert "Oncestream-Error: ValueError: cannot parse record 8" in tail.stdout
    shown = cli(url, "dlq", "show", "ORDERS_DLQ", str(letters[1]["seq"]))
    assert shown.exit_code == 0 and "Oncestream-Sequence: 5" in shown.stdout

    assert cli(url, "dlq", "replay", "ORDERS_DLQ", "--all").exit_code == 2  # not a terminal
    first = cli_json(url, "dlq", "replay", "ORDERS_DLQ", "--seq", f"-{letters[1]['seq']}",
                     "--force")  # fmt: skip
    assert first["replayed"] == [letters[0]["seq"], letters[1]["seq"]]
    rest = cli_json(url, "dlq", "replay", "ORDERS_DLQ", "--all", "--force")
    assert rest["replayed"] == [letters[2]["seq"]]
    again = cli_json(url, "dlq", "replay", "ORDERS_DLQ", "--all", "--force")
    assert again == {
        "selected": 0, "replayed": [], "already_replayed": [], "deleted_by_another": [], "kept": {}
    }  # fmt: skip
    assert cli_json(url, "dlq", "ls", "ORDERS_DLQ") == []
    assert cli_json(url, "stream", "info", "ORDERS_DLQ")["state"]["messages"] == 0

    _process(url, db, fixed=True, applied=3)
    assert _effects(db) == list(range(1, 11))
    replayed = [
        json.loads(x)
        for x in cli(url, "tail", "ORDERS", "--from", "11", "--json").stdout.splitlines()
    ]
    assert [r["data"] for r in replayed] == ["3", "5", "8"]
    assert replayed[0]["headers"]["Nats-Msg-Id"] == [f"replay:ORDERS_DLQ:{letters[0]['seq']}"]


def test_replay_after_crash_and_expired_window(nats_server) -> None:  # type: ignore[no-untyped-def]
    """A crash between republish and delete, re-run after the duplicate window expired."""
    url = nats_server.url
    cli_json(url, "stream", "add", "S", "--subjects", "s.>", "--dupe-window", "500ms")
    cli_json(url, "stream", "add", "S_DLQ", "--subjects", "S_DLQ.>")
    publish(url, "S_DLQ.S", [b"payload"], **{
        "Oncestream-Stream": "S", "Oncestream-Sequence": "1", "Oncestream-Subject": "s.x",
        "Oncestream-Consumer": "c", "Oncestream-Attempts": "5", "Oncestream-Error": "boom",
    })  # fmt: skip

    async def crash_after_publish(conn: Connection) -> None:
        # What replay does up to the republish, then "crashes" before deleting.
        (letter,) = await list_dead_letters(conn, "S_DLQ")
        marker = {"Oncestream-Replay-Marker": "1", "Oncestream-Replay-After": "0",
                  "Nats-Msg-Id": "replay-marker:S_DLQ:1"}  # fmt: skip
        await _publish(conn, letter.dlq_subject, b"", marker)
        await _publish(conn, "s.x", letter.data, letter.replay_headers())

    with_conn(url, crash_after_publish)

    async def window_expired(conn: Connection) -> None:
        # The probe id is stored again only once a full window passed since its first
        # publish, which came after the republish: then the republish's window is over.
        async with asyncio.timeout(10):
            while True:
                probe = await _publish(conn, "s.probe", b"", {"Nats-Msg-Id": "probe"})
                if int(str(probe["seq"])) >= 3:
                    return
                await asyncio.sleep(0.1)

    with_conn(url, window_expired)
    report = cli_json(url, "dlq", "replay", "S_DLQ", "--all", "--force")
    assert report == {
        "selected": 1, "replayed": [], "already_replayed": [1], "deleted_by_another": [], "kept": {}
    }  # fmt: skip

    async def copies(conn: Connection) -> list[DeadLetter | Any]:
        return [m async for m in iter_messages(conn, "S", subject="s.x")]

    assert len(with_conn(url, copies)) == 1
    assert cli_json(url, "stream", "info", "S_DLQ")["state"]["messages"] == 0


def test_dlq_errors(nats_server) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    for args in (["ls", "NOPE"], ["show", "NOPE", "1"], ["replay", "NOPE", "--all", "--force"]):
        result = cli(url, "dlq", *args)
        assert result.exit_code == 2 and "stream 'NOPE' not found" in result.stderr, args
    cli_json(url, "stream", "add", "D", "--subjects", "d.>")
    missing = cli(url, "dlq", "show", "D", "4")
    assert missing.exit_code == 1 and "no message 4 in stream 'D'" in missing.stderr
    for args in (
        ["replay", "D"],
        ["replay", "D", "--all", "--seq", "3"],
        ["replay", "D", "--seq", "5-2", "--force"],
        ["ls", "D", "--seq", "x"],
        ["show", "D"],
    ):
        result = cli(url, "dlq", *args)
        assert result.exit_code == 2, (args, result.stderr)
