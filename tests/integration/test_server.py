"""The embedded nats-server: start, readiness, restart keeping the store, stop by PID."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oncestream import ConfigError, ConnectError, ConnectOptions, connect
from oncestream.server import NatsServer, ServerConfig
from oncestream.streams import StreamSpec, ensure_stream
from tests import server_configs


async def test_restart_keeps_port_and_store(tmp_path: Path) -> None:
    server = NatsServer(server_configs.jetstream(tmp_path), work_dir=tmp_path).start()
    try:
        url, pid = server.url, server.pid
        conn = await connect(ConnectOptions(servers=(url,)))
        await ensure_stream(conn, StreamSpec(name="KEEP", subjects=("keep.>",)))
        await conn.nc.publish("keep.a", b"x")
        await conn.close()

        server.restart()
        assert server.url == url
        assert server.pid != pid

        conn = await connect(ConnectOptions(servers=(url,)))
        info = await conn.stream_info("KEEP")
        assert info["state"]["messages"] == 1
        await conn.close()
    finally:
        server.close()
    assert server.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid or -1, 0)


async def test_connect_to_stopped_server_fails_fast(tmp_path: Path) -> None:
    server = NatsServer(server_configs.jetstream(tmp_path), work_dir=tmp_path).start()
    url = server.url
    server.close()
    with pytest.raises(ConnectError, match=r"127\.0\.0\.1"):
        await connect(ConnectOptions(servers=(url,), connect_timeout=1))


def test_non_loopback_host_is_refused() -> None:
    with pytest.raises(ConfigError, match="loopback"):
        ServerConfig(host="0.0.0.0")


def test_rendered_config_passes_server_check(tmp_path: Path) -> None:
    server = NatsServer(server_configs.jetstream(tmp_path, domain="hub"), work_dir=tmp_path)
    server.check_config()
    assert 'domain: "hub"' in server.config_file.read_text()
