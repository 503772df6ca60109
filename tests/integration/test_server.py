"""The embedded nats-server: start, readiness, restart keeping the store, stop by PID."""

from __future__ import annotations

import os
import re
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
        # Stored before the restart (a plain publish may still be on its way when the
        # server is killed: the run of 1d15e2b found 0 messages after it).
        ack = await conn.nc.request("keep.a", b"x", timeout=5)
        assert b'"seq":1' in ack.data
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


def test_env_reaches_the_server_process_and_bad_names_are_refused(tmp_path: Path) -> None:
    """The Go runtime's heap settings have no config key: ``env`` sets them for the
    server process alone (this process's environment is left as it was), a restart
    included; what it refuses is named, a value never shown."""
    given = {"GOMEMLIMIT": "1GiB", "GOGC": "off"}
    server = NatsServer(server_configs.jetstream(tmp_path), work_dir=tmp_path, env=given)
    given["GOGC"] = "50"  # the server keeps the env it was given
    server.start()
    try:
        for _ in range(2):
            seen = set(Path(f"/proc/{server.pid}/environ").read_bytes().split(b"\0"))
            assert {b"GOMEMLIMIT=1GiB", b"GOGC=off"} <= seen
            server.restart()
        assert "GOMEMLIMIT" not in os.environ
    finally:
        server.close()
    refused = {
        "": "env name '' is not allowed: letters, digits and '_'",
        "my-var": "env name 'my-var' is not allowed",  # dash would drop it silently
        "1ABC": "env name '1ABC' is not allowed",
        "TOKEN=hunter2": "env name 'TOKEN=...' is not allowed",
    }
    for name, message in refused.items():
        with pytest.raises(ConfigError, match=re.escape(message)) as caught:
            NatsServer(work_dir=tmp_path, env={name: "x"})
        assert "hunter2" not in str(caught.value)
    for value, message in (
        ("hunter2\0", "must not hold a NUL"),
        (b"hunter2", "must be a string, not bytes"),
        ("hunter2\ud800", "not valid text"),
        ("h" * 131_072, "more than the 131071 Linux passes"),
    ):
        with pytest.raises(ConfigError, match=f"env SECRET: .*{message}") as caught:
            NatsServer(work_dir=tmp_path, env={"SECRET": value})  # type: ignore[dict-item]
        assert "hunter2" not in str(caught.value)
    with pytest.raises(ConfigError, match="env must be a mapping of names to values, not str"):
        NatsServer(work_dir=tmp_path, env="GOGC=off")  # type: ignore[arg-type]
    # nats-server -t runs with it too: a bad runtime setting is found before start().
    bad = NatsServer(server_configs.jetstream(tmp_path), work_dir=tmp_path, env={"GOMEMLIMIT": "x"})
    with pytest.raises(ConfigError, match="GOMEMLIMIT"):
        bad.check_config()
