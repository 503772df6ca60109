"""A TCP relay on 127.0.0.1 in front of a real server that records every byte clients send.

Tests use it to prove what reached the wire: that a password never left the
client towards a server without TLS, or that the first bytes after the
server's INFO were a TLS ClientHello. The upstream can be switched and the
open connections cut, so a client reconnects to another server through the
same address (a downgrade on reconnect). Either direction can be held (bytes
wait in the relay): held replies and then a cut lose acks the server sent
for what it stored; held requests and then a cut lose what the client sent
before the server saw it.

Example::

    with WireTap(server.port) as tap:
        ... connect to tap.url("tls") ...
        assert b"s3cret" not in tap.sent
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from types import TracebackType

__all__ = ["WireTap"]


class WireTap:
    """Relays 127.0.0.1:``port`` to 127.0.0.1:``upstream``; :attr:`sent` is what clients wrote.

    Attributes:
        upstream: the port connections are relayed to (changeable; new connections only).
        on_request: called with each chunk a client sent, before it is relayed (in the
            relay's thread); e.g. to stop the server just before a given request.
        sent: every byte received from clients, all connections in order of arrival.
        first_bytes: the first chunk each client connection sent.
        accepted: connections accepted so far.
    """

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.on_request: Callable[[bytes], None] | None = None
        self.sent = bytearray()
        self.first_bytes: list[bytes] = []
        self.accepted = 0
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._closed = False
        # Per direction (True: client -> server): set while bytes flow.
        self._flowing = {True: threading.Event(), False: threading.Event()}
        for event in self._flowing.values():
            event.set()
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def url(self, scheme: str = "nats") -> str:
        """``scheme://127.0.0.1:port`` of the relay."""
        return f"{scheme}://127.0.0.1:{self.port}"

    def cut(self) -> None:
        """Close every open connection (both sides), as a network failure would."""
        with self._lock:
            sockets, self._open = self._open, []
        for sock in sockets:
            _close(sock)

    def hold(self, *, replies: bool = True, requests: bool = False) -> None:
        """Keep what servers send (``replies``) / clients send (``requests``) in the relay."""
        if replies:
            self._flowing[False].clear()
        if requests:
            self._flowing[True].clear()

    def release(self) -> None:
        """Let held bytes flow again (those of cut connections are gone)."""
        for event in self._flowing.values():
            event.set()

    def close(self) -> None:
        """Stop accepting, cut every connection and join the relay threads."""
        self._closed = True
        self.release()
        _close(self._listener)
        self.cut()
        self._accepting.join(timeout=5)
        for thread in list(self._threads):
            thread.join(timeout=5)

    def __enter__(self) -> WireTap:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream), timeout=5)
            except OSError:
                _close(client)
                continue
            server.settimeout(None)
            with self._lock:
                self.accepted += 1
                self._open += [client, server]
            first = [True]
            for source, target, record in ((client, server, True), (server, client, False)):
                thread = threading.Thread(
                    target=self._pump, args=(source, target, record, first), daemon=True
                )
                self._threads.append(thread)
                thread.start()

    def _pump(
        self, source: socket.socket, target: socket.socket, record: bool, first: list[bool]
    ) -> None:
        try:
            while chunk := source.recv(65536):
                self._flowing[record].wait()
                if record:
                    with self._lock:
                        self.sent += chunk
                        if first[0]:
                            self.first_bytes.append(bytes(chunk))
                            first[0] = False
                    if self.on_request is not None:
                        self.on_request(chunk)
                target.sendall(chunk)
        except OSError:
            pass
        finally:
            _close(source)
            _close(target)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
