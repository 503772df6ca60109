"""A minimal NATS protocol client written from the protocol text, for tests and torture.

It shares no code with oncestream or nats-py, so a test can write header bytes
exactly as given (nats-py trims them, oncestream refuses some) and read the
server's answers without either library's parsing in between. Only what the
tests need: CONNECT, SUB, HPUB with a reply subject, and MSG/HMSG frames back;
pipelined PUB requests (:meth:`RawClient.request_many`), which the fault
campaign's independent stream reader (``torture/rawread.py``) uses.

Example::

    async with RawClient(url) as raw:
        ack = await raw.request_hpub("orders.x", b"NATS/1.0\\r\\nNats-Msg-Id:  a\\r\\n\\r\\n", b"x")
        print(ack)   # the PubAck JSON as a dict
"""

from __future__ import annotations

import asyncio
import itertools
import json
import secrets
from typing import Any
from urllib.parse import urlsplit

__all__ = ["RawClient"]


class RawClient:
    """One plain-TCP NATS connection (no TLS, no auth) speaking the protocol by hand."""

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 4222
        self.timeout = timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._ids = itertools.count(1)
        # Reply subjects are account-wide: two clients of one server must not share them.
        self._token = secrets.token_hex(6)

    async def __aenter__(self) -> RawClient:
        async with asyncio.timeout(self.timeout):
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        info = await self._line()
        assert info.startswith(b"INFO "), info
        connect = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True}
        self._writer.write(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n")
        await self._writer.drain()
        assert await self._line() == b"PONG", "the server did not answer PING"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._writer is not None:
            self._writer.close()
            await self._writer.wait_closed()

    async def _line(self) -> bytes:
        assert self._reader is not None
        async with asyncio.timeout(self.timeout):
            while True:
                line = (await self._reader.readuntil(b"\r\n"))[:-2]
                if line == b"PING":
                    assert self._writer is not None
                    self._writer.write(b"PONG\r\n")
                    continue
                if line.startswith(b"-ERR"):
                    raise RuntimeError(line.decode(errors="replace"))
                if line == b"+OK":
                    continue
                return line

    async def request_hpub(self, subject: str, header: bytes, payload: bytes) -> dict[str, Any]:
        """Publish with exactly ``header`` (a ``NATS/1.0`` block) and return the JSON reply."""
        assert self._reader is not None and self._writer is not None
        sid = next(self._ids)
        inbox = f"_RAW.{self._token}.{sid}"
        total = len(header) + len(payload)
        self._writer.write(
            b"SUB %b %d\r\nUNSUB %d 1\r\nHPUB %b %b %d %d\r\n%b%b\r\n"
            % (
                inbox.encode(),
                sid,
                sid,
                subject.encode(),
                inbox.encode(),
                len(header),
                total,
                header,
                payload,
            )
        )
        await self._writer.drain()
        line = await self._line()
        op, *args = line.split(b" ")
        size = int(args[-1])
        async with asyncio.timeout(self.timeout):
            frame = await self._reader.readexactly(size + 2)
        body = frame[int(args[-2]) : size] if op == b"HMSG" else frame[:size]
        return dict(json.loads(body)) if body else {"status": frame[:size].decode()}

    async def request_many(
        self, requests: list[tuple[str, bytes]], window: int = 256
    ) -> list[tuple[bytes, bytes]]:
        """Send each ``(subject, payload)`` with its own reply subject, ``window`` at a time.

        Returns ``(header, body)`` per request, in order (``header`` empty for a
        plain MSG; a status-only answer such as 503 "no responders" has it and an
        empty body). A request without an answer within ``timeout`` raises TimeoutError.
        """
        assert self._reader is not None and self._writer is not None
        sid = next(self._ids)
        prefix = f"_RAWM.{self._token}.{sid}."
        self._writer.write(f"SUB {prefix}* {sid}\r\n".encode())
        out: list[tuple[bytes, bytes]] = []
        for first in range(0, len(requests), window):
            chunk = requests[first : first + window]
            frames = b"".join(
                b"PUB %b %b%d %d\r\n%b\r\n"
                % (subject.encode(), prefix.encode(), first + i, len(payload), payload)
                for i, (subject, payload) in enumerate(chunk)
            )
            self._writer.write(frames)
            await self._writer.drain()
            answers: dict[int, tuple[bytes, bytes]] = {}
            while len(answers) < len(chunk):
                line = await self._line()
                op, subject, *args = line.split(b" ")
                size = int(args[-1])
                async with asyncio.timeout(self.timeout):
                    frame = (await self._reader.readexactly(size + 2))[:size]
                split = int(args[-2]) if op == b"HMSG" else 0
                index = int(subject.rsplit(b".", 1)[1])
                # A second answer to an earlier request (two leaders answering across
                # an election) must neither count for this window nor replace the first.
                if first <= index < first + len(chunk) and index not in answers:
                    answers[index] = (frame[:split], frame[split:])
            out += [answers[first + i] for i in range(len(chunk))]
        self._writer.write(f"UNSUB {sid}\r\n".encode())
        await self._writer.drain()
        return out
