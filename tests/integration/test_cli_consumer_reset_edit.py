"""`oncestream consumer reset` and `consumer edit` against a real nats-server (2.14+)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

import oncestream.process._handedback as handedback
from oncestream import (
    ConnectOptions,
    OperationTimeout,
    PostgresLedger,
    Processor,
    ProcessorOptions,
    SQLiteLedger,
)
from oncestream.ledger._internal import read_handed_back
from oncestream.streams import ResetTarget, reset_consumer
from tests.integration._cli import cli, cli_json, publish, with_conn


def _pending(url: str, stream: str, name: str) -> int:
    return int(cli_json(url, "consumer", "info", stream, name)["num_pending"])


def test_consumer_reset(nats_server) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    cli_json(url, "stream", "add", "R", "--subjects", "r.>")
    publish(url, "r.a", [b"%d" % i for i in range(1, 11)])
    cli_json(url, "consumer", "add", "R", "c")
    assert _pending(url, "R", "c") == 10

    planned = cli(url, "consumer", "reset", "R", "c", "--to-seq", "4", "--dry-run")
    assert planned.exit_code == 0, planned.stderr
    assert "dry run: would reset consumer R/c to seq 4" in planned.stdout
    assert _pending(url, "R", "c") == 10  # nothing changed

    def reset(*args: str) -> dict[str, Any]:
        return cli_json(url, "consumer", "reset", "R", "c", *args, "--force")  # type: ignore[no-any-return]

    assert reset("--to-end")["seq"] == 11 and _pending(url, "R", "c") == 0
    done = reset("--to-seq", "4")
    assert done["seq"] == 4 and done["after"]["ack_floor_seq"] == 3
    assert _pending(url, "R", "c") == 7
    assert reset("--to-start")["seq"] == 1 and _pending(url, "R", "c") == 10
    sixth = cli_json(url, "stream", "get", "R", "6")
    assert reset("--to-time", sixth["time"])["seq"] == 6 and _pending(url, "R", "c") == 5
    assert reset("--to-time", "2999-01-01T00:00:00Z")["seq"] == 11
    assert reset("--to-time", "1h")["seq"] == 1  # everything was stored in the last hour
    text = cli(url, "consumer", "reset", "R", "c", "--to-seq", "2", "--force")
    assert text.exit_code == 0 and "reset consumer R/c to seq 2: 9 pending" in text.stdout

    # The library function, as the CLI uses it.
    async def back_to_start(conn: Any) -> int:
        return (await reset_consumer(conn, "R", "c", ResetTarget(start=True))).seq

    assert with_conn(url, back_to_start) == 1

    # The server refuses: deliver policy new, and a start sequence above the target.
    cli_json(url, "consumer", "add", "R", "fresh", "--deliver", "new")
    refused = cli(url, "consumer", "reset", "R", "fresh", "--to-seq", "1", "--force")
    assert refused.exit_code == 1
    assert "refused to reset consumer R/fresh to seq 1: invalid reset" in refused.stderr
    assert "deliver_policy 'new'" in refused.stderr
    dry = cli(url, "consumer", "reset", "R", "fresh", "--to-seq", "1", "--dry-run")
    assert dry.exit_code == 0 and "the server would refuse" in dry.stdout
    cli_json(url, "consumer", "add", "R", "later", "--deliver", "5")
    below = cli(url, "consumer", "reset", "R", "later", "--to-seq", "3", "--force")
    assert below.exit_code == 1 and "below start seq" in below.stderr
    assert cli_json(url, "consumer", "reset", "R", "later", "--to-seq", "7", "--force")["seq"] == 7


def test_consumer_reset_usage(nats_server) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    cli_json(url, "stream", "add", "R", "--subjects", "r.>")
    cli_json(url, "consumer", "add", "R", "c")
    for args, said in (
        ([], "exactly one of --to-seq, --to-time, --to-start or --to-end (got none)"),
        (["--to-start", "--to-end"], "(got --to-start and --to-end)"),
        (["--to-seq", "0"], "--to-seq must be a stream sequence >= 1, got 0"),
        (["--to-time", "soon"], "--to-time must be an ISO 8601 time"),
        (["--to-end"], "refusing to reset R/c without --force"),  # stdin is not a terminal
    ):
        result = cli(url, "consumer", "reset", "R", "c", *args)
        assert result.exit_code == 2 and said in result.stderr, (args, result.stderr)
    assert "'soon'" in cli(url, "consumer", "reset", "R", "c", "--to-time", "soon").stderr
    missing = cli(url, "consumer", "reset", "R", "nope", "--to-end", "--force")
    assert missing.exit_code == 2 and "consumer 'nope' not found on stream 'R'" in missing.stderr


def _run_processor(url: str, db: Path, until: Any) -> Any:
    def handle(msg: Any, tx: Any) -> None:
        tx.execute("CREATE TABLE IF NOT EXISTS effects (id INTEGER NOT NULL)")
        tx.execute("INSERT INTO effects (id) VALUES (?)", (int(msg.data),))

    async def main() -> Any:
        processor = Processor(
            ConnectOptions(servers=(url,)), "P", "billing", handle,
            ledger=SQLiteLedger(str(db)), options=ProcessorOptions(batch=10),
        )  # fmt: skip
        task = asyncio.create_task(processor.run())
        await processor.wait_until(until, 30)
        await processor.stop()
        return await task

    return asyncio.run(main())


def test_reset_of_a_processors_consumer_is_safe(nats_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Moved back before every message it applied, the Processor applies none of them again."""
    url, db, count = nats_server.url, tmp_path / "effects.db", 25
    cli_json(url, "stream", "add", "P", "--subjects", "p.>")
    publish(url, "p.x", [b"%d" % i for i in range(1, count + 1)])
    first = _run_processor(url, db, lambda s: s.applied >= count)
    assert first.applied == count
    assert cli(url, "consumer", "wait", "P", "billing", "--timeout", "10s").exit_code == 0

    moved = cli_json(url, "consumer", "reset", "P", "billing", "--to-time", "1h", "--force")
    assert moved["seq"] == 1 and moved["after"]["pending"] == count

    again = _run_processor(url, db, lambda s: s.suppressed + s.applied >= count)
    assert (again.applied, again.suppressed) == (0, count)
    assert cli(url, "consumer", "wait", "P", "billing", "--timeout", "10s").exit_code == 0
    con = sqlite3.connect(db)
    try:
        rows = [r[0] for r in con.execute("SELECT id FROM effects ORDER BY id")]
    finally:
        con.close()
    assert rows == list(range(1, count + 1))  # each effect exactly once


def test_consumer_edit(nats_server) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    cli_json(url, "stream", "add", "E", "--subjects", "e.>")
    cli_json(url, "consumer", "add", "E", "c", "--ack-wait", "30s", "--max-deliver", "5")
    edited = cli(url, "consumer", "edit", "E", "c", "--ack-wait", "10s", "--max-ack-pending", "50",
                 "--description", "billing")  # fmt: skip
    assert edited.exit_code == 0, edited.stderr
    assert edited.stdout.splitlines() == [
        "updated consumer E/c:",
        "  ack_wait: 30s -> 10s",
        "  description: - -> 'billing'",
        "  max_ack_pending: 10000 -> 50",
    ]
    config = cli_json(url, "consumer", "info", "E", "c")["config"]
    assert config["ack_wait"] == 10 * 10**9 and config["max_ack_pending"] == 50
    assert config["description"] == "billing" and config["max_deliver"] == 5  # untouched
    # A backoff: the server sets ack_wait to its first delay, and the diff says so.
    backoff = cli_json(url, "consumer", "edit", "E", "c", "--backoff", "2s,5s")
    assert backoff["changed"] == ["ack_wait: 10s -> 2s", "backoff: none -> [2s, 5s]"]
    as_json = cli_json(url, "consumer", "edit", "E", "c", "--max-deliver", "8", "--backoff", "none")
    assert as_json["changed"] == ["backoff: [2s, 5s] -> none", "max_deliver: 5 -> 8"]

    fixed = cli(url, "consumer", "edit", "E", "c", "--ack", "all")
    assert fixed.exit_code == 1
    assert "refused to update consumer E/c: ack policy can not be updated" in fixed.stderr
    assert "remove and re-create it" in fixed.stderr
    assert cli_json(url, "consumer", "info", "E", "c")["config"]["ack_policy"] == "explicit"

    for args, said in (
        ([], "nothing to change"),
        (["--max-deliver", "0"], "--max-deliver must be -1 or >= 1, got 0"),
        (["--ack-wait", "soon"], "--ack-wait must be a duration"),
        (["--ack", "maybe"], "--ack must be explicit, all or none, got 'maybe'"),
        (["--backoff", "1s,1s,1s,1s,1s,1s,1s,1s,1s"], "--backoff has 9 delays"),
    ):
        result = cli(url, "consumer", "edit", "E", "c", *args)
        assert result.exit_code == 2 and said in result.stderr, (args, result.stderr)
    missing = cli(url, "consumer", "edit", "E", "nope", "--max-deliver", "3")
    assert missing.exit_code == 2 and "consumer 'nope' not found" in missing.stderr
    assert (
        json.loads(cli(url, "consumer", "info", "E", "c", "--json").stdout)["config"]["max_deliver"]
        == 8
    )


def _run_failing_7(
    url: str, db: Path, until: Any, watch: float = 0.0, record: list[int] | None = None
) -> Any:
    """A Processor that fails seq 7 (a 60 s backoff, no dead-letter stream) until stopped;
    with ``record``, it stops once the ledger's record of handed-back messages is that
    (bounded); with ``watch``, it runs that long more unless it finds a forgotten
    message first."""

    def handle(msg: Any, tx: Any) -> None:
        if msg.metadata.stream_seq == 7:
            raise ValueError("poison")
        tx.execute("CREATE TABLE IF NOT EXISTS effects (id INTEGER NOT NULL)")
        tx.execute("INSERT INTO effects (id) VALUES (?)", (int(msg.data),))

    async def main() -> Any:
        processor = Processor(
            ConnectOptions(servers=(url,)), "P", "billing", handle,
            ledger=SQLiteLedger(str(db)), options=ProcessorOptions(batch=10, backoff=(60.0,)),
        )  # fmt: skip
        task = asyncio.create_task(processor.run())
        await processor.wait_until(until, 30)
        for _ in range(100 if record is not None else 0):  # written in the background
            if read_handed_back(str(db), "P", "billing") == record:
                break
            await asyncio.sleep(0.05)
        if watch:  # several checks of the handed-back record (FORGOTTEN_CHECK patched)
            with contextlib.suppress(OperationTimeout):
                await processor.wait_until(lambda s: s.forgotten > 0, watch)
        await processor.stop()
        return await task

    return asyncio.run(main())


def test_a_reset_forward_with_the_ledger_skips_a_handed_back_message(
    nats_server, tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """docs/processing.md: a failed message the Processor handed back and a reset forward
    skips on purpose is dropped from the ledger's record with --ledger (the next run
    skips it); without, the next run would take it as forgotten by the server."""
    monkeypatch.setattr(handedback, "FORGOTTEN_CHECK", 0.2)
    monkeypatch.setattr(handedback, "RECORD_INTERVAL", 0.2)
    url, db = nats_server.url, tmp_path / "effects.db"
    cli_json(url, "stream", "add", "P", "--subjects", "p.>")
    publish(url, "p.x", [b"%d" % i for i in range(1, 11)])
    first = _run_failing_7(url, db, lambda s: s.failed >= 1 and s.applied >= 9, record=[7])
    assert (first.applied, first.failed) == (9, 1)
    assert read_handed_back(str(db), "P", "billing") == [7]
    tables = _tables(db)
    planned = cli_json(
        url, "consumer", "reset", "P", "billing", "--to-seq", "8", "--ledger", str(db), "--dry-run"
    )
    assert planned["handed_back_skipped"] == [7]
    assert read_handed_back(str(db), "P", "billing") == [7]  # a dry run changes nothing
    assert _tables(db) == tables
    done = cli(
        url, "consumer", "reset", "P", "billing", "--to-seq", "8", "--ledger", str(db), "--force"
    )
    assert done.exit_code == 0, done.output
    assert "handed back seq 7" in done.output and "skips them" in done.output
    assert read_handed_back(str(db), "P", "billing") == []
    publish(url, "p.x", [b"11"])
    again = _run_failing_7(url, db, lambda s: s.applied >= 1, watch=1.5)
    assert (again.applied, again.failed, again.forgotten, again.exhausted) == (1, 0, 0, 0)


def _tables(db: Path) -> list[str]:
    con = sqlite3.connect(db)
    try:
        return sorted(r[0] for r in con.execute("SELECT name FROM sqlite_master"))
    finally:
        con.close()


def test_a_consumer_created_again_does_not_inherit_the_record(
    nats_server, tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """docs/processing.md: the record belongs to the consumer's life. A consumer deleted and
    created again under its name (here with deliver policy new, which the server never
    resets to an old sequence) starts with none: before, the old seq 7 was taken as
    forgotten, the move back to it was refused and every run failed."""
    monkeypatch.setattr(handedback, "FORGOTTEN_CHECK", 0.2)
    monkeypatch.setattr(handedback, "RECORD_INTERVAL", 0.2)
    url, db = nats_server.url, tmp_path / "effects.db"
    cli_json(url, "stream", "add", "P", "--subjects", "p.>")
    publish(url, "p.x", [b"%d" % i for i in range(1, 11)])
    _run_failing_7(url, db, lambda s: s.failed >= 1 and s.applied >= 9, record=[7])
    assert cli(url, "consumer", "rm", "P", "billing", "--force").exit_code == 0
    cli_json(url, "consumer", "add", "P", "billing", "--deliver", "new")
    publish(url, "p.x", [b"11"])
    again = _run_failing_7(url, db, lambda s: s.applied >= 1, watch=1.5)
    assert (again.applied, again.forgotten, again.exhausted) == (1, 0, 0)


@pytest.mark.postgres
def test_a_reset_whose_ledger_role_may_not_drop_changes_nothing(
    nats_server, postgres_server, postgres_url, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """A role that may only read the ledger: the dry run reads (creates nothing), the reset
    that would skip a recorded handed-back message fails (exit 1) before it moves the
    consumer, saying what to do, and never prints the password."""
    url = nats_server.url
    cli_json(url, "stream", "add", "P", "--subjects", "p.>")
    publish(url, "p.x", [b"%d" % i for i in range(1, 11)])
    with PostgresLedger(postgres_url) as ledger:
        ledger.record_handed_back("P", "billing", "life", {3: 1}, [])
    cli_json(url, "consumer", "add", "P", "billing")
    role = postgres_server.password_role("reader", "Sup3rSecretPw")
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("GRANT USAGE ON SCHEMA public TO reader")
        admin.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader")
    reader = role.replace("reader@", "reader:Sup3rSecretPw@").rsplit("/", 1)[0]
    reader += "/" + postgres_url.rsplit("/", 1)[1]
    args = ("consumer", "reset", "P", "billing", "--to-seq", "5", "--ledger", reader, "--force")
    planned = cli_json(url, *args, "--dry-run")
    assert planned["handed_back_skipped"] == [3]
    refused = cli(url, *args)
    text = refused.output + refused.stderr
    assert refused.exit_code == 1, text
    assert "The reset was not made" in text and "permission denied" in text
    assert "Sup3rSecretPw" not in text
    assert int(cli_json(url, "consumer", "info", "P", "billing")["num_pending"]) == 10
    assert read_handed_back(postgres_url, "P", "billing") == [3]
