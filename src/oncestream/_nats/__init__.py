"""The only place that touches nats-py's private internals: probe, fast path, public fallback.

oncestream's hot paths (pipelined publishes, bulk acks, range reads, the pull
loop) are limited by nats-py's per-message Python work, so they reach below
its public API: raw frames are written to the transport, and received frames of
our own subscriptions are sliced out of the parser's buffer. Every such access lives in
this package. :func:`attach` runs when :func:`oncestream.connect` connects:

1. once per process it probes the installed nats-py: the attributes exist,
   have the expected shapes, and nats-py's ``Parser`` with the fast path
   installed delivers a scripted byte stream (split at awkward places)
   exactly as expected;
2. per client it checks the client's parser and transport;
3. it logs once which path it took and why.

If any check fails, or ``ONCESTREAM_NATS_FASTPATH=0`` is set, the returned
:class:`Wire` uses nats-py's public API instead (``subscribe`` with a
callback, ``publish``): slower, same results, except that the public API
carries one value per header name.

Before connecting, :func:`new_client` gives the client itself: one whose
handshake refuses a server without TLS when TLS is required (see ``_tls``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import inspect
import logging
import os
from collections.abc import Sequence
from typing import Any

from ._parser import FrameHandler, FrameSink, FrameTarget, install, is_status, status_code
from ._public import frame_of, split_frames
from ._tls import ServerWithoutTls, new_client, tls_guard

__all__ = [
    "FASTPATH_ENV",
    "FrameHandler",
    "FrameSink",
    "FrameSubscription",
    "FrameTarget",
    "ServerWithoutTls",
    "Wire",
    "attach",
    "exception_retrieved",
    "is_status",
    "new_client",
    "server_info",
    "status_code",
    "tls_guard",
]

log = logging.getLogger(__name__)

#: Set to ``0`` to force nats-py's public API (e.g. to rule out the fast path).
FASTPATH_ENV = "ONCESTREAM_NATS_FASTPATH"

_library: tuple[bool, str] | None = None
_logged: set[tuple[bool, str]] = set()


def fastpath_wanted() -> bool:
    """False when ``ONCESTREAM_NATS_FASTPATH`` is 0/false/no/off."""
    return os.environ.get(FASTPATH_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


class _StubClient:
    """What nats-py's Parser calls back into, recording instead of acting."""

    def __init__(self, parser_class: Any) -> None:
        self.slow: list[tuple[int, bytes, bytes, bytes, bytes | None]] = []
        self._ps = parser_class(self)

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        self.slow.append((sid, bytes(subject), bytes(reply), bytes(data), headers))

    async def _process_ping(self) -> None:
        return None

    async def _process_pong(self) -> None:
        return None

    async def _process_info(self, info: Any) -> None:
        return None

    async def _process_err(self, err: Any) -> None:
        return None


_SCRIPT = (
    b"MSG a 7 r.1 2\r\nhi\r\n"
    b"MSG b 9 2\r\nyo\r\n"
    b"HMSG c 7 18 20\r\nNATS/1.0\r\nK: v\r\n\r\nok\r\n"
    b"PING\r\n"
    b"MSG d 8 3\r\nack\r\n"
    b"HMSG e 8 16 16\r\nNATS/1.0 503\r\n\r\n\r\n"
)


async def _probe_library() -> tuple[bool, str]:
    """Whether the installed nats-py has the internals the fast path needs, behaving as expected."""
    try:
        from nats.aio.client import Client
        from nats.aio.subscription import Subscription
        from nats.protocol.parser import Parser

        process = inspect.signature(Client._process_msg)
        if list(process.parameters) != ["self", "sid", "subject", "reply", "data", "headers"]:
            return False, f"Client._process_msg takes {list(process.parameters)}"
        for name in ("_process_msg", "_send_command", "_flush_pending"):
            if not inspect.iscoroutinefunction(getattr(Client, name, None)):
                return False, f"Client.{name} is not a coroutine function"
        sub = Subscription(None, id=5, subject="probe")
        if sub._id != 5:
            return False, "Subscription has no _id"
        stub = _StubClient(Parser)
        handlers = install(stub)
        sink = FrameSink(10, True, lambda: None)
        calls: list[tuple[bytes, bytes, bytes, bytes | None]] = []
        handlers[7] = sink
        handlers[8] = lambda s, r, d, h: calls.append((bytes(s), bytes(r), bytes(d), h))
        for pos in range(0, len(_SCRIPT), 5):
            await stub._ps.parse(_SCRIPT[pos : pos + 5])
        expected_calls = [(b"d", b"", b"ack", None), (b"e", b"", b"", b"NATS/1.0 503\r\n\r\n")]
        if (
            sink.datas != [b"hi", b"ok"]
            or sink.replies != [b"r.1", b""]
            or sink.headers != [None, b"NATS/1.0\r\nK: v\r\n\r\n"]
            or calls != expected_calls
            or stub.slow != [(9, b"b", b"", b"yo", None)]
            or stub._ps.buf
        ):
            return False, "nats-py's parser did not deliver the probe frames as expected"
    except Exception as exc:
        return False, f"probing nats-py internals failed: {type(exc).__name__}: {exc}"
    return True, "internals probed"


def _client_ready(nc: Any) -> str | None:
    """Why this connected client cannot take the fast path, or None if it can."""
    from nats.protocol.parser import Parser

    parser = getattr(nc, "_ps", None)
    if not isinstance(parser, Parser) or not isinstance(getattr(parser, "buf", None), bytearray):
        return "the client has no nats-py Parser with a byte buffer"
    if not callable(getattr(getattr(nc, "_transport", None), "writelines", None)):
        return "the client's transport has no writelines()"
    if not hasattr(nc, "_flush_queue"):
        return "the client has no _flush_queue"
    if not isinstance(getattr(nc, "_pending", None), list) or not isinstance(
        getattr(nc, "_pending_data_size", None), int
    ):
        return "the client has no _pending command list"
    return None


def _write_pending(nc: Any) -> None:
    """Write nats-py's queued commands (SUB, UNSUB, PUB) to the transport now.

    nats-py queues commands for its flusher task but writes PING and our raw
    frames straight to the transport, so either could overtake a queued SUB:
    a PubAck addressed to an inbox the server does not know yet, a flush whose
    PONG comes before the server has even seen the subscription. This is the
    flusher's own step, done inline; nothing awaits in between.
    """
    if nc._pending_data_size > 0 and nc._transport is not None:
        nc._transport.writelines(nc._pending[:])
        nc._pending = []
        nc._pending_data_size = 0


async def attach(nc: Any) -> Wire:
    """The :class:`Wire` for a freshly connected nats-py client (probing on first use)."""
    global _library
    version = _version()
    if not fastpath_wanted():
        fast, reason = False, f"{FASTPATH_ENV}=0"
    else:
        if _library is None:
            _library = await _probe_library()
        fast, reason = _library
        if fast:
            problem = _client_ready(nc)
            if problem is not None:
                fast, reason = False, problem
    key = (fast, reason)
    if key not in _logged:
        _logged.add(key)
        if fast:
            log.debug("nats-py %s: using the fast path (%s)", version, reason)
        else:
            log.warning(
                "nats-py %s: using the public-API path (%s); slower, same results", version, reason
            )
    return Wire(nc, fast=fast, reason=reason)


def _version() -> str:
    try:
        return importlib.metadata.version("nats-py")
    except importlib.metadata.PackageNotFoundError:
        return "(unknown version)"


def server_info(nc: Any) -> dict[str, Any]:
    """The ``INFO`` the connected server sent, as nats-py keeps it (``{}`` when it has none).

    nats-py has no public accessor for it beyond the version; ``cluster`` (the
    cluster's name, absent on a server outside a cluster) and ``server_name`` are
    what callers read.
    """
    info = getattr(nc, "_server_info", None)
    return dict(info) if isinstance(info, dict) else {}


def exception_retrieved(future: asyncio.Future[Any]) -> bool:
    """Whether someone already retrieved ``future``'s exception (False when unknown)."""
    return not getattr(future, "_log_traceback", True)


class FrameSubscription:
    """A subscription whose frames go to a :class:`FrameSink` or a frame handler."""

    def __init__(self, wire: Wire, sub: Any, sid: int | None) -> None:
        self._wire = wire
        self._sub = sub
        self._sid = sid

    async def unsubscribe(self) -> None:
        """Stop routing and unsubscribe (best effort: the connection may be gone)."""
        if self._sid is not None and self._wire._handlers is not None:
            self._wire._handlers.pop(self._sid, None)
            self._sid = None
        try:
            await self._sub.unsubscribe()
        except Exception as exc:
            log.debug("unsubscribe failed: %s", exc)


class Wire:
    """One client's frame-level operations, on the fast path or nats-py's public API.

    Attributes:
        fast: True when the fast path is installed on this client.
        reason: why this path was taken (for logs and tests).
    """

    def __init__(self, nc: Any, *, fast: bool, reason: str) -> None:
        self.nc = nc
        self.fast = fast
        self.reason = reason
        self._handlers: dict[int, FrameTarget] | None = install(nc) if fast else None
        self._backlog: list[bytes] = []
        self._writer: asyncio.Task[None] | None = None

    @property
    def multi_value_headers(self) -> bool:
        """Whether a header name may carry several values (not on the public API)."""
        return self.fast

    async def flush(self, timeout: float) -> None:
        """Round trip to the server after every command written or queued before.

        nats-py's own ``flush`` writes its PING ahead of the commands still queued
        for its flusher task, so the PONG could come before the server saw them
        (and before the error it sends for a refused SUB). On the public-API path,
        a second round trip comes after the flusher has written them.
        """
        nc = self.nc
        if self.fast and nc.is_connected:
            _write_pending(nc)
            await nc.flush(timeout=timeout)
            return
        await nc.flush(timeout=timeout)
        await nc.flush(timeout=timeout)

    async def subscribe_frames(self, subject: str, target: FrameTarget) -> FrameSubscription:
        """Subscribe ``subject``; its frames go to ``target`` as raw bytes.

        nats-py keeps the subscription (re-subscribed after a reconnect); only
        the per-message work is bypassed.
        """
        if self._handlers is not None:
            sub = await self.nc.subscribe(subject)
            sid = int(sub._id)
            self._handlers[sid] = target
            return FrameSubscription(self, sub, sid)
        add = target.add if isinstance(target, FrameSink) else target

        async def on_msg(msg: Any) -> None:
            add(*frame_of(msg))

        sub = await self.nc.subscribe(
            subject, cb=on_msg, pending_msgs_limit=0, pending_bytes_limit=0
        )
        return FrameSubscription(self, sub, None)

    def write_now(self, frames: list[bytes]) -> None:
        """Write complete PUB/HPUB frames now; dropped while disconnected (callers re-send)."""
        nc = self.nc
        if not nc.is_connected:
            return
        if self.fast:
            transport = nc._transport
            if transport is not None:
                _write_pending(nc)  # a queued SUB (a new reply inbox) goes first
                transport.writelines(frames)
            return
        self._backlog.extend(frames)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        while self._backlog:
            frames, self._backlog = self._backlog, []
            for frame in frames:
                await self._publish_frames(frame, suppress=True)

    async def _publish_frames(self, buffer: bytes, *, suppress: bool) -> None:
        for subject, reply, payload, headers in split_frames(buffer):
            try:
                await self.nc.publish(subject, payload, reply=reply, headers=headers)
            except Exception as exc:
                if not suppress:
                    raise
                log.debug("publish to %s failed (callers retry): %s", subject, exc)

    async def send(self, frames: bytes) -> None:
        """Queue complete frames in nats-py's outgoing buffer and have it flushed."""
        if self.fast:
            await self.nc._send_command(frames)
            await self.nc._flush_pending()
            return
        await self._publish_frames(frames, suppress=False)

    async def publish_many(self, subjects: Sequence[str], payload: bytes) -> None:
        """Publish ``payload`` to every subject (no reply), in one buffered write when fast."""
        if not self.fast or not self.nc.is_connected:
            for subject in subjects:
                with contextlib.suppress(Exception):
                    await self.nc.publish(subject, payload)
            return
        tail = b" %d\r\n%s\r\n" % (len(payload), payload)
        await self.nc._send_command(b"".join([b"PUB " + s.encode() + tail for s in subjects]))
        if self.nc._flush_queue is not None and self.nc._flush_queue.empty():
            await self.nc._flush_pending()
