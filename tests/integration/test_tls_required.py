"""TLS that cannot be downgraded (issue 19): asked for, it is required of every server.

A relay in front of each real nats-server (tests/_wiretap.py) records every
byte the client sends, so the tests prove what reached the wire: against a
plaintext server the password never leaves the client, on the first connect
and on a reconnect; against a TLS server (required or only offered) the
client's first bytes are a TLS ClientHello.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from oncestream import (
    ConfigError,
    ConnectError,
    Connection,
    ConnectOptions,
    TlsNotOffered,
    connect,
)
from oncestream.server import NatsServer
from tests import server_configs
from tests._wiretap import WireTap

PASSWORD = "wire-Secret-8713"
TLS_RECORD = 0x16  # a TLS handshake record: the ClientHello


@pytest.fixture
def plain_server(server_factory: Callable[..., NatsServer], tmp_path: Path) -> NatsServer:
    """A real nats-server without TLS that requires app/PASSWORD."""
    config = server_configs.user_password(tmp_path / "plain", user="app", password=PASSWORD)
    return server_factory(config, "plain")


def _tls_server(
    server_factory: Callable[..., NatsServer], tmp_path: Path, files: dict[str, Path], **kw: bool
) -> NatsServer:
    config = server_configs.tls(
        tmp_path / "tls",
        cert_file=files["cert"],
        key_file=files["key"],
        ca_file=files["ca"],
        verify=False,
        user="app",
        password=PASSWORD,
        **kw,
    )
    return server_factory(config, "tls-offered" if kw else "tls")


@pytest.fixture
def tap_plain(plain_server: NatsServer) -> Iterator[WireTap]:
    with WireTap(plain_server.port) as tap:
        yield tap


def _asked(tap: WireTap, ca: Path) -> dict[str, ConnectOptions]:
    """Every way of asking for TLS, each with the password given differently."""
    fast = {"connect_timeout": 2, "reconnect_wait": 0.05}
    return {
        "tls:// URL and a CA": ConnectOptions(
            servers=(tap.url("tls"),), user="app", password=PASSWORD, tls_ca_file=str(ca), **fast
        ),
        "nats:// URL and a CA": ConnectOptions(
            servers=(tap.url(),), user="app", password=PASSWORD, tls_ca_file=str(ca), **fast
        ),
        "tls:// URL alone, password in it": ConnectOptions(
            servers=(tap.url("tls").replace("//", f"//app:{PASSWORD}@"),), **fast
        ),
        "tls:// URL, token": ConnectOptions(servers=(tap.url("tls"),), token=PASSWORD, **fast),
    }


async def test_the_password_never_reaches_a_plaintext_server(
    tap_plain: WireTap, tls_files: dict[str, Path]
) -> None:
    for what, options in _asked(tap_plain, tls_files["ca"]).items():
        start = time.monotonic()
        with pytest.raises(TlsNotOffered) as info:
            await connect(options)
        assert time.monotonic() - start < 3, what
        assert f"127.0.0.1:{tap_plain.port} does not offer TLS" in str(info.value), what
        assert PASSWORD not in str(info.value) and PASSWORD not in repr(info.value)
        assert tap_plain.accepted > 0, f"{what}: the client never reached the server"
        assert PASSWORD.encode() not in tap_plain.sent, f"{what}: the password was sent"
        assert b"CONNECT" not in tap_plain.sent, f"{what}: CONNECT was sent"
    # The tap sees credentials when they are sent: without TLS asked, they are.
    plain = ConnectOptions(servers=(tap_plain.url(),), user="app", password=PASSWORD)
    async with await connect(plain) as conn:
        await conn.flush()
    assert PASSWORD.encode() in tap_plain.sent


def test_websocket_without_tls_and_tls_options_is_refused(tls_files: dict[str, Path]) -> None:
    with pytest.raises(ConfigError, match="plain WebSocket"):
        ConnectOptions(servers=("ws://127.0.0.1:8080",), tls_ca_file=str(tls_files["ca"]))
    with pytest.raises(ConfigError, match="use wss://"):
        ConnectOptions(servers=("wss://127.0.0.1:8080", "ws://127.0.0.1:8081"))


async def test_tls_required_and_tls_offered_servers_get_tls_from_the_first_byte(
    server_factory: Callable[..., NatsServer],
    tmp_path: Path,
    tls_files: dict[str, Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    required = _tls_server(server_factory, tmp_path, tls_files)
    offered = _tls_server(server_factory, tmp_path, tls_files, allow_non_tls=True)
    ca = str(tls_files["ca"])
    for server, scheme in ((required, "tls"), (required, "nats"), (offered, "nats")):
        with WireTap(server.port) as tap:
            options = ConnectOptions(
                servers=(tap.url(scheme),), user="app", password=PASSWORD, tls_ca_file=ca
            )
            async with await connect(options) as conn:
                await conn.flush()
            assert tap.first_bytes and tap.first_bytes[0][0] == TLS_RECORD, tap.first_bytes
            assert PASSWORD.encode() not in tap.sent
    # Control: without TLS asked for, the TLS-offering server takes a plaintext login.
    with WireTap(offered.port) as tap:
        plain = ConnectOptions(servers=(tap.url(),), user="app", password=PASSWORD)
        async with await connect(plain) as conn:
            await conn.flush()
        assert tap.sent.startswith(b"CONNECT") and PASSWORD.encode() in tap.sent
    # nats-py's TLS upgrade made asyncio warn at every close; not any more.
    assert "eof_received" not in caplog.text


class _Watch(logging.Handler):
    """Events for a connection's refused reconnects (its warning) and its successful ones."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.get_running_loop()
        self.refused = asyncio.Event()
        self.reconnected = asyncio.Event()
        self.logger = logging.getLogger("oncestream._connection")

    def emit(self, record: logging.LogRecord) -> None:
        if "reconnect refused" in record.getMessage():
            self.loop.call_soon_threadsafe(self.refused.set)

    def __enter__(self) -> _Watch:
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self)

    def follow(self, conn: Connection) -> None:
        async def reconnected() -> None:
            self.reconnected.set()

        conn.on_reconnect(reconnected)

    async def either(self) -> None:
        """Wait (10 s at most) until a reconnect was refused or succeeded."""
        waiters = {asyncio.ensure_future(e.wait()) for e in (self.refused, self.reconnected)}
        try:
            async with asyncio.timeout(10):
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()


async def test_a_reconnect_to_a_plaintext_server_is_refused(
    server_factory: Callable[..., NatsServer],
    tmp_path: Path,
    tls_files: dict[str, Path],
    plain_server: NatsServer,
) -> None:
    tls = _tls_server(server_factory, tmp_path, tls_files)
    with _Watch() as watch, WireTap(tls.port) as tap:
        options = ConnectOptions(
            servers=(tap.url("tls"),),
            user="app",
            password=PASSWORD,
            tls_ca_file=str(tls_files["ca"]),
            reconnect_wait=0.05,
        )
        async with await connect(options) as conn:
            watch.follow(conn)
            await conn.flush()
            # The address now leads to a plaintext server with the same login.
            tap.upstream = plain_server.port
            seen = len(tap.sent)
            tap.cut()
            await watch.either()
            assert PASSWORD.encode() not in tap.sent[seen:], "sent to the plaintext server"
            assert b"CONNECT" not in tap.sent[seen:]
            assert watch.refused.is_set() and not conn.is_connected
            # Back to TLS: the connection recovers.
            tap.upstream = tls.port
            tap.cut()
            async with asyncio.timeout(10):
                await watch.reconnected.wait()
            await conn.flush()


async def test_without_a_working_guard_tls_connections_are_refused(
    monkeypatch: pytest.MonkeyPatch, tap_plain: WireTap, tls_files: dict[str, Path]
) -> None:
    """A nats-py whose handshake the probe does not recognise: refuse, never risk plaintext."""
    from oncestream._nats import _tls

    monkeypatch.setattr(_tls, "_guard", (False, "scripted handshake changed"))
    options = _asked(tap_plain, tls_files["ca"])["tls:// URL and a CA"]
    with pytest.raises(ConnectError, match="scripted handshake changed") as info:
        await connect(options)
    assert not isinstance(info.value, TlsNotOffered)
    assert tap_plain.accepted == 0, "nothing may be attempted"
    # Without TLS asked for, nats-py's own client connects.
    plain = ConnectOptions(servers=(tap_plain.url(),), user="app", password=PASSWORD)
    async with await connect(plain) as conn:
        await conn.flush()


async def test_the_probe_notices_a_hook_that_no_longer_guards(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from oncestream._nats import _tls

    assert await _tls._probe() == (True, "handshake probed")
    monkeypatch.setattr(_tls.Client, "_insist_on_tls", lambda self, info: None)
    ok, why = await _tls._probe()
    assert not ok and "plaintext" in why, why


async def test_a_server_learnt_from_the_cluster_must_do_tls_too(
    server_factory: Callable[..., NatsServer], tmp_path: Path, tls_files: dict[str, Path]
) -> None:
    """A (TLS) and B (no TLS) form a cluster; B advertises the relay as its client address.

    The client connects to A and learns B from A's INFO (gossip). When A stops,
    the reconnect to B is refused: the password never reaches B.
    """
    from oncestream.server import Authorization, ClusterConfig, ServerConfig, ServerTLS, TLSConfig
    from oncestream.server._internal import free_ports

    route_a, route_b = free_ports(2)
    login = Authorization(user="app", password=PASSWORD)
    tls = ServerTLS(
        tls=TLSConfig(
            cert_file=tls_files["cert"], key_file=tls_files["key"], ca_file=tls_files["ca"]
        )
    )

    def cluster(port: int, peer: int) -> ClusterConfig:
        return ClusterConfig(name="g", port=port, routes=(f"nats-route://127.0.0.1:{peer}",))

    with WireTap(0) as tap:
        node_b = server_factory(
            ServerConfig(
                server_name="gossip-b",
                blocks=(login, cluster(route_b, route_a)),
                extra={"client_advertise": f"127.0.0.1:{tap.port}"},
            ),
            "gossip-b",
        )
        tap.upstream = node_b.port
        node_a = server_factory(
            ServerConfig(server_name="gossip-a", blocks=(tls, login, cluster(route_a, route_b))),
            "gossip-a",
        )
        discovered = asyncio.Event()

        async def on_discovered() -> None:
            discovered.set()

        options = ConnectOptions(
            servers=(f"tls://127.0.0.1:{node_a.port}",),
            user="app",
            password=PASSWORD,
            tls_ca_file=str(tls_files["ca"]),
            reconnect_wait=0.05,
        )
        with _Watch() as watch:
            async with await connect(options, discovered_server_cb=on_discovered) as conn:
                watch.follow(conn)
                gossip = f"127.0.0.1:{tap.port}"
                if not any(u.netloc == gossip for u in conn.nc.discovered_servers):
                    async with asyncio.timeout(10):
                        await discovered.wait()
                node_a.close()
                await watch.either()
                assert tap.accepted > 0, "the client never tried the server it learnt"
                assert PASSWORD.encode() not in tap.sent, "sent to the server learnt by gossip"
                assert b"CONNECT" not in tap.sent
                assert watch.refused.is_set()
