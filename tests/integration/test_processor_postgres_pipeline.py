"""A per-message handler on a PostgreSQL ledger pays no round trip per message (pipeline mode).

A TCP proxy between the Processor and PostgreSQL counts round trips: a turn is the
client sending after the server answered. Effects and ledger rows stay one transaction;
a statement failing in the middle of a pipelined batch fails only its message.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from harness import free_port, publish_n
from oncestream import Connection, PostgresLedger, Processor, ProcessorOptions
from oncestream.server import NatsServer

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]


class TurnCounter:
    """A TCP proxy to ``target`` on 127.0.0.1 counting request/response turns."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.turns = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TurnCounter:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", self.port)
        )
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            # Close the proxied connections inside the loop, before it is closed.
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.close()

    async def _serve(self, client_r: Any, client_w: Any) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        last = ["server"]  # a turn starts when the client sends after the server did

        async def pipe(src: Any, dst: Any, side: str) -> None:
            try:
                while data := await src.read(65536):
                    if side == "client" and last[0] == "server":
                        with self._lock:
                            self.turns += 1
                    last[0] = side
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(client_r, server_w, "client"), pipe(server_r, client_w, "server"))


def _through(url: str, port: int) -> str:
    return re.sub(r"@127\.0\.0\.1:\d+/", f"@127.0.0.1:{port}/", url)


def _insert(msg: Any, tx: Any) -> None:
    tx.execute("INSERT INTO effects (id) VALUES (%s)", (int(msg.data),))


@pytest.mark.parametrize("pipelined", [True, False], ids=["pipeline", "no_pipeline"])
async def test_a_batch_costs_a_few_round_trips_not_one_per_message(
    conn: Connection, make_stream: Any, postgres_url: str, pipelined: bool
) -> None:
    total = 1000
    await make_stream("JOBS", ("jobs.>",))
    await publish_n(conn, "jobs.x", total)
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("CREATE TABLE effects (id BIGINT NOT NULL)")
    port = int(re.search(r":(\d+)/", postgres_url).group(1))  # type: ignore[union-attr]
    with TurnCounter(port) as proxy:
        ledger = PostgresLedger(_through(postgres_url, proxy.port), pipeline=pipelined)
        opts = ProcessorOptions(batch=total, prune_interval=0)
        proc = Processor(conn, "JOBS", "w", _insert, ledger=ledger, options=opts)
        task = asyncio.create_task(proc.run())
        try:
            await proc.wait_until(lambda s: s.applied >= total)
        finally:
            await proc.stop()
            await task
        turns, batches = proxy.turns, proc.stats.batches
    with psycopg.connect(postgres_url) as check:
        assert check.execute("SELECT count(*), count(DISTINCT id) FROM effects").fetchone() == (
            total,
            total,
        )
    print(f"pipeline={pipelined}: {turns} round trips for {total} messages in {batches} batches")
    if pipelined:
        # Open and close, the ledger registry's check, registration and row read at
        # start and its watch (a read every 5 s), then per batch: BEGIN, the prune
        # horizons' lock and read, the consumer's registry row, the claim, the
        # pipeline's end and the commit (32 turns for one batch of 1000 at 9144863).
        assert turns <= 30 + 9 * batches < total / 4
    else:
        assert turns >= total  # what the pipeline saves: one round trip per message


@pytest.mark.parametrize("merge", [False, True], ids=["one_insert_each", "merge_inserts"])
async def test_a_statement_failing_inside_a_pipelined_batch_fails_only_its_message(
    conn: Connection, make_stream: Any, postgres_url: str, merge: bool
) -> None:
    """The 150th insert violates a CHECK: its error arrives later in the pipeline (so
    the message it names is not known), the batch is rolled back and split in halves
    until the failing message is alone; the message is dead-lettered, the 299 others
    applied once, in a few commits (before: one each), with ``merge_inserts`` too (the
    merged INSERT holding it fails as a whole, and the halves pin the failure on its
    message)."""
    await make_stream("JOBS", ("jobs.>",))
    await publish_n(conn, "jobs.x", 300)
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("CREATE TABLE effects (id BIGINT NOT NULL CHECK (id <> 149))")
    opts = ProcessorOptions(
        batch=300, max_deliver=2, backoff=(0.1,), dead_letter_stream="DLQ", prune_interval=0
    )
    ledger = PostgresLedger(postgres_url, merge_inserts=merge)
    proc = Processor(conn, "JOBS", "w", _insert, ledger=ledger, options=opts)
    commits = _count_commits(proc)
    task = asyncio.create_task(proc.run())
    try:
        await proc.wait_until(lambda s: s.applied >= 299 and s.dead_lettered == 1, timeout=60)
    finally:
        await proc.stop()
        await task
    with psycopg.connect(postgres_url) as check:
        rows = check.execute("SELECT count(*), count(DISTINCT id) FROM effects").fetchone()
        ledger_rows = check.execute("SELECT count(*) FROM oncestream_applied").fetchone()
    assert rows == (299, 299)
    assert ledger_rows == (300,)  # the 299 applied and the dead letter's row
    assert proc.stats.failed == 2
    dead = await conn.stream_info("DLQ")
    assert dead["state"]["messages"] == 1
    # The batches, plus 2 * ceil(log2(300)) for the halves down to the failing message.
    assert commits[0] <= proc.stats.batches + 2 * 9, (commits, proc.stats)


async def test_a_handler_raising_for_a_few_messages_costs_a_few_commits(
    conn: Connection, make_stream: Any, postgres_url: str
) -> None:
    """A per-message handler refusing 3 of 1,000 messages (its own exception, which
    names its message even in pipeline mode): the batch is applied again in the parts
    before, between and after them, each refusal alone; 997 applied once in a few
    commits. Before, the batch holding a refusal was applied one message per
    transaction (a commit and its fsync each: ~160 msg/s on a busy 2-core machine)."""
    await make_stream("JOBS", ("jobs.>",))
    await publish_n(conn, "jobs.x", 1000)
    refused = {10, 500, 990}
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("CREATE TABLE effects (id BIGINT NOT NULL)")

    def handler(msg: Any, tx: Any) -> None:
        if int(msg.data) in refused:
            raise ValueError(f"refused {int(msg.data)}")
        _insert(msg, tx)

    opts = ProcessorOptions(batch=1000, prune_interval=0, backoff=(30.0,))
    proc = Processor(conn, "JOBS", "w", handler, ledger=PostgresLedger(postgres_url), options=opts)
    commits = _count_commits(proc)
    task = asyncio.create_task(proc.run())
    try:
        await proc.wait_until(lambda s: s.applied >= 997 and s.failed >= 3, timeout=60)
    finally:
        await proc.stop()
        await task
    with psycopg.connect(postgres_url) as check:
        rows = check.execute("SELECT count(*), count(DISTINCT id) FROM effects").fetchone()
    assert rows == (997, 997)
    assert proc.stats.failed == 3
    # Per batch holding refusals: one commit before each and one after the last.
    assert commits[0] <= proc.stats.batches + len(refused), (commits, proc.stats)


def _count_commits(proc: Processor) -> list[int]:
    """The Processor's commits, counted as they happen (its stats' observers)."""
    commits = [0]

    def observe(kind: str, seconds: float) -> None:
        commits[0] += kind == "commit"

    proc.stats.observers.append(observe)
    return commits


def _docs_block(marker: str) -> str:
    text = (ROOT / "docs" / "processing.md").read_text()
    at = text.index(marker)
    block = re.search(r"```python\n(.*?)```", text[at:], re.S)
    assert block is not None
    return block.group(1)


def test_the_copy_batch_handler_of_the_docs_runs(
    nats_server: NatsServer, postgres_url: str, tmp_path: Path
) -> None:
    code = _docs_block("test_the_copy_batch_handler_of_the_docs_runs")
    assert 'DB = "postgresql://app@127.0.0.1:5432/shop"' in code
    code = code.replace("postgresql://app@127.0.0.1:5432/shop", postgres_url)
    code = code.replace("nats://127.0.0.1:4222", nats_server.url)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
