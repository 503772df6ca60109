"""TLS that cannot be downgraded, and TLS upgrades that close quietly.

nats-py upgrades a connection to TLS only when the server's INFO says
``tls_required``: with a ``tls://`` URL or a CA file but a server that does
not do TLS, it writes CONNECT (user, password, token, signature) in plaintext.
:class:`Client` closes that hole. Its ``_process_info`` hook runs on every
connect and reconnect (to configured and to gossip-discovered servers alike),
after the server's INFO is read and before nats-py writes CONNECT; when the
client requires TLS it

* lets nats-py upgrade when the server requires TLS (or the transport already is TLS),
* asks for the upgrade when the server offers it without requiring it
  (``tls_available``: ``allow_non_tls`` servers sniff the ClientHello), and
* raises :class:`ServerWithoutTls` otherwise, so nothing more is written.

:func:`tls_guard` probes the hook once per process by driving nats-py's own
``_process_connect_init`` against a scripted transport: a plaintext INFO must
end in :class:`ServerWithoutTls` with nothing written, a TLS-offering INFO in an
upgrade before any write. If that fails (a nats-py whose handshake changed),
connections that require TLS are refused (see ``oncestream.connect``): a
pre-flight INFO check on a separate socket would prove nothing about the
connection that then sends the password, nor about reconnects.

Independently, nats-py's ``TcpTransport.connect_tls`` hands ``start_tls()`` a
new ``StreamReaderProtocol`` whose ``connection_made`` asyncio never calls, so
the protocol believes it is not over SSL and asyncio logs "returning true from
eof_received() has no effect when using ssl" at every TLS connection's close.
:class:`_Transport` tells the protocol about its transport.
"""

from __future__ import annotations

import asyncio
import inspect
import ssl
from typing import Any
from urllib.parse import urlparse

import nats.errors
from nats.aio.client import Client as _NatsClient
from nats.aio.client import Srv
from nats.aio.transport import TcpTransport

__all__ = ["Client", "ServerWithoutTls", "new_client", "tls_guard"]


class ServerWithoutTls(nats.errors.Error):
    """The server does not offer TLS but the client requires it; nothing was sent to it.

    Attributes:
        server: ``host:port`` of the server (never credentials).
    """

    def __init__(self, server: str) -> None:
        self.server = server
        super().__init__(f"nats: the server at {server} does not offer TLS")

    def __str__(self) -> str:
        return str(self.args[0])


class _Transport(TcpTransport):
    """nats-py's TCP transport whose TLS upgrade tells the new protocol it is over SSL."""

    async def connect_tls(
        self,
        uri: Any,
        ssl_context: ssl.SSLContext,
        buffer_size: int,
        connect_timeout: int,
    ) -> None:
        assert self._io_writer, "connect() must be called first"
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        protocol = asyncio.StreamReaderProtocol(reader)
        hostname = uri if isinstance(uri, str) else uri.hostname
        async with asyncio.timeout(connect_timeout):
            transport = await loop.start_tls(
                self._io_writer.transport, protocol, ssl_context, server_hostname=hostname
            )
        assert transport is not None, "start_tls() returned no transport"
        # start_tls() does not call connection_made() on the protocol it is given.
        protocol.connection_made(transport)
        self._io_reader = reader
        self._io_writer = asyncio.StreamWriter(transport, protocol, reader, loop)


class Client(_NatsClient):
    """nats-py's client that never sends CONNECT in plaintext when :attr:`require_tls` is set."""

    #: Set before ``connect()``: every server must do TLS.
    require_tls: bool = False
    #: Use :class:`_Transport` for TCP connections (set when the probe found it usable).
    quiet_tls_close: bool = False

    async def _connect_to_server(self, s: Any) -> None:
        await super()._connect_to_server(s)
        if self.quiet_tls_close and type(self._transport) is TcpTransport:
            # nats-py creates its transport here (it replaces any unconnected one):
            # _Transport only changes connect_tls() and has no state of its own.
            self._transport.__class__ = _Transport

    async def _process_info(self, info: dict[str, Any], initial_connection: bool = False) -> None:
        if initial_connection and self.require_tls:
            self._insist_on_tls(info)
        await super()._process_info(info, initial_connection)

    def _insist_on_tls(self, info: dict[str, Any]) -> None:
        server = self._current_server
        assert server is not None, "called from _process_connect_init only"
        if self.options.get("tls_handshake_first") or server.uri.scheme == "wss":
            return  # the transport is TLS from the first byte
        if info.get("tls_required"):
            return  # nats-py upgrades before CONNECT
        if info.get("tls_available"):
            # An allow_non_tls server: nats-py upgrades when INFO says tls_required.
            info["tls_required"] = True
            self._server_info["tls_required"] = True
            return
        raise ServerWithoutTls(f"{server.uri.hostname}:{server.uri.port}")


class _Upgraded(Exception):
    pass


class _Written(Exception):
    pass


class _ScriptedTransport:
    """Plays a server that sends one INFO line; stops the client at its first write or upgrade."""

    def __init__(self, info: bytes) -> None:
        self.info = info
        self.events: list[str] = []

    async def readline(self) -> bytes:
        return self.info

    def write(self, payload: bytes) -> None:
        self.events.append("write")
        raise _Written

    async def drain(self) -> None:
        return None

    async def connect_tls(self, *args: Any, **kwargs: Any) -> None:
        self.events.append("tls")
        raise _Upgraded


_PROBE_INFOS = {
    "plaintext": b'INFO {"server_id":"probe","auth_required":true}\r\n',
    "tls_available": b'INFO {"server_id":"probe","auth_required":true,"tls_available":true}\r\n',
    "tls_required": b'INFO {"server_id":"probe","auth_required":true,"tls_required":true}\r\n',
}


class _ProbeClient(Client):
    def _connect_command(self) -> bytes:
        return b"CONNECT {}\r\n"


async def _run_handshake(info: bytes) -> tuple[str, list[str]]:
    client = _ProbeClient()
    client.require_tls = True
    client.options = {
        "tls_handshake_first": False,
        "connect_timeout": 1,
        "verbose": False,
        # Never used for a handshake (the scripted transport stops at the upgrade): a bare
        # client context, not create_default_context(), whose loading of the system CA
        # certificates took 30 ms of CPU, three times in every process that connects.
        "tls": ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT),
    }
    client._current_server = Srv(urlparse("nats://127.0.0.1:4222"))
    transport = _ScriptedTransport(info)
    client._transport = transport  # type: ignore[assignment]
    try:
        await client._process_connect_init()
    except ServerWithoutTls:
        return "refused", transport.events
    except _Upgraded:
        return "upgraded", transport.events
    except _Written:
        return "wrote CONNECT", transport.events
    return "connected", transport.events


async def _probe() -> tuple[bool, str]:
    try:
        params = list(inspect.signature(_NatsClient._process_info).parameters)
        if params != ["self", "info", "initial_connection"]:
            return False, f"Client._process_info takes {params}"
        if list(inspect.signature(_NatsClient._connect_to_server).parameters) != ["self", "s"]:
            return False, "Client._connect_to_server changed"
        expected = {
            "plaintext": ("refused", []),
            "tls_available": ("upgraded", ["tls"]),
            "tls_required": ("upgraded", ["tls"]),
        }
        for name, info in _PROBE_INFOS.items():
            got = await _run_handshake(info)
            if got != expected[name]:
                return False, f"a scripted {name} handshake gave {got}, expected {expected[name]}"
    except Exception as exc:
        return False, f"probing nats-py's handshake failed: {type(exc).__name__}: {exc}"
    return True, "handshake probed"


def _transport_usable() -> bool:
    try:
        params = list(inspect.signature(TcpTransport.connect_tls).parameters)
        transport = TcpTransport()  # type: ignore[no-untyped-call]
    except Exception:
        return False
    return params == ["self", "uri", "ssl_context", "buffer_size", "connect_timeout"] and all(
        hasattr(transport, name) for name in ("_io_reader", "_io_writer")
    )


_guard: tuple[bool, str] | None = None


async def tls_guard() -> tuple[bool, str]:
    """Whether :class:`Client` can guarantee TLS with the installed nats-py (probed once)."""
    global _guard
    if _guard is None:
        _guard = await _probe()
    return _guard


def new_client(*, require_tls: bool, guarded: bool) -> Any:
    """The nats-py client for one connection.

    ``guarded`` is :func:`tls_guard`'s verdict: when True, a :class:`Client`
    (refusing plaintext servers when ``require_tls``); when False, nats-py's
    own client, which must then not be used with ``require_tls`` (the caller refuses).
    """
    if not guarded:
        if require_tls:
            raise RuntimeError("no TLS guard: refuse connections that require TLS")
        return _NatsClient()
    client = Client()
    client.require_tls = require_tls
    client.quiet_tls_close = _transport_usable()
    return client
