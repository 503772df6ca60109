"""A Processor bound to a consumer in another account: only MSG.NEXT and acks are imported."""

from __future__ import annotations

import asyncio
import sqlite3

from harness import publish_n
from oncestream import ConnectOptions, Processor, ProcessorOptions, SQLiteLedger, connect
from oncestream.streams import add_stream
from tests import server_configs
from tests.handlers import record


async def test_bind_across_accounts_with_api_prefix(server_factory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = server_configs.cross_account_consumer(tmp_path / "x", stream="ORDERS", consumer="app")
    server = server_factory(config, "xacct")
    hub_opts = ConnectOptions(servers=(server.url,), user="hub", password="hub-pw")
    app_opts = ConnectOptions(
        servers=(server.url,), user="app", password="app-pw", api_prefix="JS.acc@hub.API"
    )
    async with await connect(hub_opts) as hub:
        await add_stream(hub, {"name": "ORDERS", "subjects": ["orders.>"], "storage": "file"})
        await hub.api(
            "CONSUMER.CREATE.ORDERS.app",
            {"stream_name": "ORDERS", "config": {"durable_name": "app", "ack_policy": "explicit"}},
        )
        await publish_n(hub, "orders.x", 300)

        async with await connect(app_opts) as app:
            options = ProcessorOptions(bind=True, batch=100, ack_wait=5, expires=5)
            proc = Processor(
                app,
                "ORDERS",
                "app",
                record,
                ledger=SQLiteLedger(tmp_path / "l.db"),
                options=options,
            )
            task = asyncio.create_task(proc.run())
            try:
                await proc.wait_until(lambda s: s.applied >= 300, timeout=30)
            finally:
                await proc.stop()
                await task
            assert proc.stats.double_acks > 0 and proc.stats.double_ack_failures == 0
        info = await hub.consumer_info("ORDERS", "app")
        assert info["num_ack_pending"] == 0 and info["ack_floor"]["stream_seq"] == 300
    con = sqlite3.connect(tmp_path / "l.db")
    assert con.execute("SELECT count(*), count(DISTINCT id) FROM effects").fetchone() == (300, 300)
