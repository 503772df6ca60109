"""Cross-account: a Processor in IMPORT_CLIENT consumes ACC's aggregate through imports only.

Account ``ACC`` exports the minimum for the durable pull consumer ``dur`` on
``aggregate`` (``CONSUMER.MSG.NEXT``, acks, flow control); ``IMPORT_CLIENT``
imports it under ``JS.acc@hub.API`` and may publish nothing else. The
Processor connects at the leaf, binds to the stream and consumer without any
lookups, and applies each message exactly once; every other request is denied
with PermissionDenied, promptly (not a timeout).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from oncestream import ConnectOptions, PermissionDenied, connect
from oncestream.server import HubLeaf
from oncestream.streams import delete_stream
from oncestream.streams._spec import StreamSource, StreamSpec, ensure_stream, seconds_to_ns
from tests._scenario import assert_exactly_once, publish_ids, wait_messages

N = 3000
PREFIX = "JS.acc@hub.API"


async def _prepare(topo: HubLeaf, ids: list[str]) -> None:
    async with await connect(topo.options("leaf")) as leaf:
        await ensure_stream(leaf, StreamSpec(name="test", subjects=("test",)))
        await publish_ids(leaf, "test", ids, stream="test")
    async with await connect(topo.options("hub")) as hub:
        source = StreamSource(name="test", domain="leaf")
        await ensure_stream(hub, StreamSpec(name="aggregate", sources=(source,)))
        await wait_messages(hub, "aggregate", len(ids))
        config = {
            "durable_name": "dur",
            "ack_policy": "explicit",
            "deliver_policy": "all",
            "ack_wait": seconds_to_ns(30),
            "max_ack_pending": 10_000,
        }
        await hub.api(
            "CONSUMER.CREATE.aggregate.dur", {"stream_name": "aggregate", "config": config}
        )


def _client_options(topo: HubLeaf) -> ConnectOptions:
    # Connected at the leaf, as in the walk-through; the import routes to the hub's ACC.
    return topo.options("leaf", account="IMPORT_CLIENT", api_prefix=PREFIX, request_timeout=5)


async def test_everything_not_exported_is_denied_promptly(topo: HubLeaf) -> None:
    await _prepare(topo, [f"d-{i}" for i in range(10)])
    async with await connect(_client_options(topo)) as conn:
        for call in (
            lambda: conn.stream_info("aggregate"),
            lambda: conn.consumer_info("aggregate", "dur"),
            lambda: conn.api("CONSUMER.CREATE.aggregate.other", {"stream_name": "aggregate"}),
            lambda: delete_stream(conn, "aggregate"),
        ):
            start = time.monotonic()
            with pytest.raises(PermissionDenied, match="not permitted"):
                await call()
            assert time.monotonic() - start < 2.0, "denial must not wait for the request timeout"
        # The account's own JetStream API and plain subjects are denied as well.
        own = await connect(_client_options(topo).replace(api_prefix=None))
        try:
            with pytest.raises(PermissionDenied):
                await own.stream_info("test")
            await own.nc.publish("test", b"not allowed")
            await own.nc.flush()
            # The earlier denial is already recorded: wait for this one.
            for _ in range(100):
                if any('"test"' in e for e in own.permission_errors):
                    break
                await own.nc.flush()
            assert any('"test"' in e for e in own.permission_errors)
        finally:
            await own.close()


@pytest.mark.parametrize(("server", "domain"), [("leaf", "leaf"), ("hub", "hub"), ("leaf", "hub")])
async def test_denial_in_any_domain_is_immediate(topo: HubLeaf, server: str, domain: str) -> None:
    """In the server's own domain the violation names the mapped $JS.API subject (issue 10)."""
    options = topo.options(server, account="IMPORT_CLIENT", domain=domain, request_timeout=5)
    async with await connect(options) as conn:
        for call in (lambda: conn.stream_info("test"), lambda: conn.api("STREAM.LIST", {})):
            start = time.monotonic()
            with pytest.raises(PermissionDenied, match="not permitted"):
                await call()
            assert time.monotonic() - start < 2.0, "denial must not wait for the request timeout"


def test_cli_denial_in_own_domain_exits_2_at_once(topo: HubLeaf) -> None:
    import subprocess
    import sys

    user, password = topo.credentials("IMPORT_CLIENT")
    cli = str(Path(sys.executable).parent / "oncestream")
    # What starting the CLI costs on this machine now (a loaded CI runner: seconds),
    # so that only the time spent on the denial is compared with the request timeout.
    start = time.monotonic()
    subprocess.run([cli, "--version"], capture_output=True, timeout=60, check=True)
    startup = time.monotonic() - start
    start = time.monotonic()
    out = subprocess.run(
        [cli, "status", "aggregate", "-s", topo.url("leaf"), "--user", user, "--domain", "leaf"],
        capture_output=True, text=True, timeout=60, check=False,
        env={"NATS_PASSWORD": password, "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert out.returncode == 2 and "PermissionDenied" in out.stderr, out.stderr
    spent = time.monotonic() - start - startup
    assert spent < 3.5, f"must not wait for the 5 s request timeout ({spent:.1f} s)"
    assert password not in out.stdout + out.stderr


async def test_processor_binds_through_imported_prefix(topo: HubLeaf, tmp_path: Path) -> None:
    from oncestream import process as processor_module
    from oncestream.ledger import SQLiteLedger

    ids = [f"x-{i}" for i in range(N)]
    await _prepare(topo, ids)
    db = tmp_path / "effects.db"

    def handler(msg: Any, tx: Any) -> None:
        tx.execute("CREATE TABLE IF NOT EXISTS effects (msg_id TEXT)")
        tx.execute("INSERT INTO effects VALUES (?)", ((msg.headers or {}).get("Nats-Msg-Id"),))

    async def run_until(applied: int) -> float:
        options = processor_module.ProcessorOptions(bind=True, batch=200, expires=2.0)
        processor = processor_module.Processor(
            _client_options(topo),
            "aggregate",
            "dur",
            handler,
            ledger=SQLiteLedger(db),
            options=options,
        )
        start = time.monotonic()
        task = asyncio.create_task(processor.run())
        deadline = start + 120
        while processor.stats.applied < applied and not task.done():
            assert time.monotonic() < deadline, f"applied {processor.stats.applied}/{applied}"
            await asyncio.sleep(0.05)
        await processor.stop()
        await task
        return time.monotonic() - start

    # Two runs: the second resumes where the first stopped (consumer + ledger).
    first = await run_until(N // 2)
    second = await run_until(N - _count(db))
    with sqlite3.connect(db) as check:
        applied = [row[0] for row in check.execute("SELECT msg_id FROM effects")]
    assert_exactly_once(applied, ids)
    async with await connect(topo.options("hub")) as hub:
        info = await hub.consumer_info("aggregate", "dur")
    assert info["num_pending"] == 0 and info["num_ack_pending"] == 0
    assert info["ack_floor"]["stream_seq"] == N
    print(
        f"\ncross-account: Processor in IMPORT_CLIENT at the leaf via {PREFIX} applied {N} "
        f"msgs exactly once in two runs ({first:.2f}s + {second:.2f}s); consumer fully acked"
    )


def _count(db: Path) -> int:
    with sqlite3.connect(db) as check:
        return int(check.execute("SELECT count(*) FROM effects").fetchone()[0])
