"""`dlq replay` of a partitioned stream's dead letters, against a real nats-server.

A partitioned stream stores ``t.cli`` as ``<partition>.t.cli``, and a dead letter
records that stored subject, which the stream's subjects (``t.*``) do not capture.
Before, `dlq replay` refused every such letter (``no stream captures it now``, exit
1); it republishes to the published subject now, so the copy lands in the same
partition and the group member running it applies it once.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

from oncestream import (
    ConnectOptions,
    GroupMember,
    GroupOptions,
    ProcessorOptions,
    SQLiteLedger,
)
from oncestream.process import partition_consumer
from oncestream.streams import Partitioning
from tests.integration._cli import cli, cli_json, publish

STREAM, DLQ, GROUP, PARTITIONS = "PS", "PS_DLQ", "svc", 3
BROKEN = b"99"


def _handler(fixed: bool) -> Any:
    def handle(msg: Any, tx: Any) -> None:
        if not fixed and msg.data == BROKEN:
            raise ValueError("cannot handle 99")
        tx.execute("CREATE TABLE IF NOT EXISTS effects (id INTEGER, subject TEXT)")
        tx.execute("INSERT INTO effects VALUES (?, ?)", (int(msg.data), msg.subject))

    return handle


def _run_member(url: str, folder: Path, until: Any, *, fixed: bool) -> dict[str, int]:
    """One member running every partition until ``until(totals)``; its totals."""

    async def main() -> dict[str, int]:
        member = GroupMember(
            ConnectOptions(servers=(url,)), STREAM, GROUP, _handler(fixed),
            ledger=lambda p: SQLiteLedger(folder / f"svc-{p}.db"),
            options=GroupOptions(member="m1", heartbeat=0.2, member_ttl=1),
            processor_options=ProcessorOptions(
                batch=50, max_deliver=1, backoff=(0.1,), dead_letter_stream=DLQ,
                pinned_ttl=2.0, prune_interval=0,
            ),
        )  # fmt: skip
        task = asyncio.create_task(member.run())
        try:
            await member.wait_running()
            await member.wait_for(lambda m: until(m.stats.totals()), 30)
        finally:
            member.request_stop()
            await task
        return member.stats.totals()

    return asyncio.run(main())


def _effects(folder: Path) -> dict[int, list[tuple[int, str]]]:
    found: dict[int, list[tuple[int, str]]] = {}
    for p in range(PARTITIONS):
        path = folder / f"svc-{p}.db"
        if path.exists():
            with sqlite3.connect(path) as con:
                found[p] = sorted(con.execute("SELECT id, subject FROM effects"))
    return found


def test_a_dead_letter_of_a_partitioned_stream_is_replayed_into_its_partition(
    nats_server, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    cli_json(url, "stream", "add", STREAM, "--subjects", "t.*", "--partitions", str(PARTITIONS))
    layout = Partitioning(subjects="t.*", partitions=PARTITIONS)
    keys = [f"t.k{i}" for i in range(6)]
    for i, subject in enumerate(keys):
        publish(url, subject, [b"%d" % i])
    publish(url, "t.cli", [BROKEN])
    home = layout.partition_of("t.cli")

    first = _run_member(url, tmp_path, lambda t: t["dead_lettered"] and t["applied"] >= 6,
                        fixed=False)  # fmt: skip
    assert (first["applied"], first["dead_lettered"]) == (6, 1)
    (letter,) = cli_json(url, "dlq", "ls", DLQ)
    assert (letter["subject"], letter["consumer"]) == (
        f"{home}.t.cli",
        partition_consumer(GROUP, home),
    )

    # --subject matches the stored subject, --consumer the letter's consumer.
    assert cli_json(url, "dlq", "ls", DLQ, "--subject", "*.t.cli") == [letter]
    assert cli_json(url, "dlq", "ls", DLQ, "--consumer", "svc-p9") == []
    replay = cli(url, "dlq", "replay", DLQ, "--all", "--force", "--json")
    assert replay.exit_code == 0, replay.stdout + replay.stderr
    copy = cli_json(url, "stream", "get", STREAM, "--last-for", f"{home}.t.cli")
    assert copy["seq"] == 8 and copy["data"] == "99"
    assert copy["headers"]["Oncestream-Replay-For"] == [partition_consumer(GROUP, home)]
    # Not the pin its original was delivered under: the member would take it for a pin
    # the server moved on, and step down.
    assert "Nats-Pin-Id" not in copy["headers"]
    assert cli_json(url, "dlq", "ls", DLQ) == []

    second = _run_member(url, tmp_path, lambda t: t["applied"] >= 1, fixed=True)
    assert second["applied"] == 1
    effects = _effects(tmp_path)
    assert effects[home].count((99, f"{home}.t.cli")) == 1
    applied = sorted(i for rows in effects.values() for i, _ in rows)
    assert applied == [0, 1, 2, 3, 4, 5, 99]
    for i, subject in enumerate(keys):  # every key in its own partition's ledger
        assert (i, layout.stored_subject(subject)) in effects[layout.partition_of(subject)]
