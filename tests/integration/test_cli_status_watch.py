"""`oncestream status --watch --json`: one JSON object per refresh with rates, lag and ETA;
a mirror's lag in `status`."""

from __future__ import annotations

import json

from harness import publish_n
from oncestream import Connection
from oncestream.streams import StreamSource, StreamSpec, ensure_stream
from tests.integration._cli import cli, cli_json, with_conn


async def _setup(conn: Connection) -> None:
    await ensure_stream(conn, StreamSpec(name="WJ", subjects=("wj.>",)))
    await ensure_stream(conn, StreamSpec(name="WJ_COPY", mirror=StreamSource(name="WJ")))
    await publish_n(conn, "wj.x", 40)


def test_watch_json_lines_with_lag_and_eta(nats_server) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    with_conn(url, _setup)
    cli_json(url, "consumer", "add", "WJ", "slow")
    result = cli(
        url, "status", "WJ", "slow", "--watch", "--json", "--count", "3", "--interval", "0.1"
    )
    assert result.exit_code == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(lines) == 3
    first, last = lines[0], lines[-1]
    assert first["seconds"] == 0 and last["seconds"] > 0
    assert last["stream"]["stream"] == "WJ" and "in/s" in last["stream"]
    (consumer,) = last["consumers"]
    assert consumer["lag"] == 40 and consumer["acked/s"] == 0.0
    assert consumer["eta_seconds"] is None  # 40 behind, nothing acked: stalled
    assert first["consumers"][0]["eta_seconds"] is None  # no rate measured yet


def test_watch_table_shows_lag_and_eta_and_upstreams(nats_server) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    with_conn(url, _setup)
    cli_json(url, "consumer", "add", "WJ", "slow")
    table = cli(url, "status", "WJ", "--watch", "--count", "2", "--interval", "0.1")
    assert table.exit_code == 0, table.stderr
    assert "lag" in table.stdout and "eta" in table.stdout and "stalled" in table.stdout
    mirror = cli_json(url, "status", "WJ_COPY")
    (upstream,) = mirror["upstreams"]
    assert upstream["kind"] == "mirror" and upstream["origin"] == "WJ"
    assert upstream["lag"] >= 0 and "idle_seconds" in upstream
    shown = cli(url, "status", "WJ_COPY")
    assert "mirror and sources of WJ_COPY" in shown.stdout
