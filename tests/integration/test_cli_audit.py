"""`oncestream audit` end to end: exit codes and --json."""

from __future__ import annotations

import asyncio
import json

import orjson
from typer.testing import CliRunner

from oncestream import ConnectOptions, connect
from oncestream.cli import app
from oncestream.server import NatsServer
from oncestream.streams import StreamSpec, ensure_stream


async def _setup(url: str) -> None:
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        await ensure_stream(conn, StreamSpec(name="IN", subjects=("in.>",)))
        await ensure_stream(conn, StreamSpec(name="OUT", subjects=("out.>",)))
        js = conn.nc.jetstream()
        for i in range(20):
            await js.publish("in.a", orjson.dumps({"id": i}), headers={"Nats-Msg-Id": str(i)})
            if i != 3:
                await js.publish("out.a", b"", headers={"Nats-Msg-Id": str(i)})
        await js.publish("out.a", b"", headers={"Nats-Msg-Id": "5x"})


async def _repair(url: str) -> None:
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        await conn.nc.jetstream().publish("out.a", b"", headers={"Nats-Msg-Id": "3"})
        await conn.api("STREAM.MSG.DELETE.OUT", {"seq": 20})  # the stray "5x"


def test_cli_audit_ok_and_failure(nats_server: NatsServer) -> None:
    asyncio.run(_setup(nats_server.url))
    runner = CliRunner()
    args = ["audit", "--server", nats_server.url, "--input", "IN", "--output", "stream:OUT"]
    failed = runner.invoke(app, [*args, "--json"])
    assert failed.exit_code == 1, failed.output
    data = json.loads(failed.stdout)
    assert data["ok"] is False
    out = data["outputs"][0]
    assert (out["missing"], out["unexpected"], out["missing_samples"]) == (1, 1, ["3"])

    table = runner.invoke(app, args)
    assert table.exit_code == 1
    assert "FAILED" in table.stdout and "missing" in table.stdout

    bad = runner.invoke(app, [*args[:-1], "kafka:OUT"])
    assert bad.exit_code == 2

    asyncio.run(_repair(nats_server.url))
    ok = runner.invoke(app, [*args, "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["ok"] is True
