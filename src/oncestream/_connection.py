"""Connecting to NATS: requests, publishes, subscriptions and the JetStream API.

:class:`Connection` is what components (Publisher, pull loop, Processor,
readers, Spark source and sink, audit) use instead of the raw nats-py client:
it translates nats-py exceptions into oncestream ones (:func:`translate_error`)
for the operations it offers, keeps the reconnect listeners and the JetStream
API prefix, and hands frame-level work to its :class:`~oncestream._nats.Wire`
(the one module that touches nats-py internals, with a public-API fallback).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import nats
import nats.errors
import nats.js.errors
import orjson
from nats.aio.client import Client

from ._errors import (
    AuthenticationError,
    ConnectError,
    ConsumerNotFound,
    JetStreamError,
    MessageTooLarge,
    NoResponders,
    OncestreamError,
    OperationTimeout,
    PermissionDenied,
    StreamNotFound,
    TlsNotOffered,
    jetstream_error,
)
from ._logthrottle import LogThrottle
from ._nats import (
    FrameSubscription,
    FrameTarget,
    ServerWithoutTls,
    Wire,
    attach,
    new_client,
    tls_guard,
)
from ._options import ConnectOptions
from ._private import scrub

__all__ = ["Connection", "connect", "tls_context", "translate_error"]

log = logging.getLogger(__name__)

Callback = Callable[[], Awaitable[None]]
#: ``listener(kind, subject, text)``: kind ``"publish"`` or ``"subscription"``, the
#: subject as the server reported it (lower-cased by nats-py), the server's text.
DenialListener = Callable[[str, str, str], None]

_VIOLATION = re.compile(r'permissions violation for (publish|subscription) to "([^"]*)"')


def translate_error(exc: BaseException, *, what: str = "request") -> OncestreamError:
    """Map a nats-py exception to the oncestream exception tree.

    Args:
        exc: the exception raised by nats-py.
        what: a short description of the operation, used in the message.
    """
    if isinstance(exc, OncestreamError):
        return exc
    if isinstance(exc, nats.js.errors.APIError):
        return jetstream_error(exc)
    if isinstance(exc, nats.errors.NoRespondersError):
        return NoResponders(f"{what}: no responders (nothing listens on that subject)")
    if isinstance(exc, nats.errors.MaxPayloadError):
        return MessageTooLarge(f"{what}: message exceeds the server's max_payload")
    if isinstance(exc, nats.errors.TimeoutError | asyncio.TimeoutError | TimeoutError):
        return OperationTimeout(f"{what}: timed out")
    if isinstance(exc, nats.errors.AuthorizationError):
        return AuthenticationError(f"{what}: authorization violation")
    text = str(exc)
    if "authorization violation" in text.lower() or "authentication" in text.lower():
        return AuthenticationError(f"{what}: the server rejected the credentials")
    if "permissions violation" in text.lower():
        return PermissionDenied(f"{what}: {text}")
    if isinstance(exc, nats.errors.Error | OSError):
        return ConnectError(f"{what}: {type(exc).__name__}: {text or 'connection failed'}")
    return OncestreamError(f"{what}: {type(exc).__name__}: {text}")


_TWO_WORD_OPS = {"MSG", "PEER", "LEADER", "DURABLE"}


def _name_missing(error: JetStreamError, subject: str) -> JetStreamError:
    """Name the stream (and consumer) of ``subject`` in a not-found error.

    ``STREAM.INFO.S``, ``STREAM.MSG.GET.S``, ``CONSUMER.INFO.S.C``,
    ``CONSUMER.DURABLE.CREATE.S.C``, ``CONSUMER.MSG.NEXT.S.C``, ``DIRECT.GET.S``...
    """
    if not isinstance(error, StreamNotFound | ConsumerNotFound):
        return error
    parts = subject.split(".")
    names = parts[3:] if len(parts) > 3 and parts[1] in _TWO_WORD_OPS else parts[2:]
    if not names or parts[0] not in ("STREAM", "CONSUMER", "DIRECT"):
        return error
    stream = names[0]
    if isinstance(error, ConsumerNotFound) and len(names) > 1:
        text = f"consumer {names[1]!r} not found on stream {stream!r}"
    else:
        text = f"stream {stream!r} not found"
    named = type(error)(text, code=error.code, err_code=error.err_code)
    named.__cause__ = error.__cause__
    return named


class Connection:
    """A NATS connection bound to one JetStream API prefix.

    Create it with :func:`connect`. JetStream API calls go through :meth:`api`,
    core-NATS work through :meth:`request`, :meth:`publish` and the frame
    methods, so errors arrive typed.

    Attributes:
        nc: the escape hatch: the underlying nats-py ``Client``, for what
            oncestream does not wrap (say, nats-py's own JetStream context). What
            is done through it bypasses oncestream's error translation and
            guarantees; closing the Connection closes it.
        options: the options it was made with.
        prefix: the JetStream API prefix (``$JS.API``, ``$JS.<domain>.API``, ...).
    """

    def __init__(self, nc: Client, options: ConnectOptions, wire: Wire | None = None) -> None:
        self.nc = nc
        self.options = options
        self.prefix = options.js_prefix
        self._wire = wire if wire is not None else Wire(nc, fast=False, reason="no probe")
        self.permission_errors: list[str] = []
        self.reconnects = 0
        self._reconnect_listeners: list[Callback] = []
        self._denial_listeners: list[DenialListener] = []
        # Pending API requests by lower-cased subject: the server reports a denied
        # publish asynchronously (-ERR, lower-cased by nats-py) and sends no reply,
        # so the request would otherwise only end with a timeout.
        self._denied_waiters: dict[str, asyncio.Future[str]] = {}
        # The server's text when it refused this user's subscription to its reply
        # inboxes: no request can get a reply then.
        self.inbox_denied: str | None = None

    def _permission_violation(self, text: str) -> None:
        self.permission_errors.append(text)
        lowered = text.lower()
        match = _VIOLATION.search(lowered)
        kind, subject = match.groups() if match else ("", "")
        inbox = kind == "subscription" and subject.startswith(self._inbox_prefix())
        if inbox and self.inbox_denied is None:
            self.inbox_denied = text
        for key, waiter in list(self._denied_waiters.items()):
            if (inbox or f'"{key}"' in lowered) and not waiter.done():
                waiter.set_result(text)
        for listener in list(self._denial_listeners):
            listener(kind, subject, text)

    def _inbox_prefix(self) -> str:
        return self.new_inbox().partition(".")[0].lower() + "."

    def subscription_denial(self, subject: str) -> str | None:
        """The server's text if it refused this connection's subscription to ``subject``."""
        wanted = f'subscription to "{subject.lower()}"'
        return next((e for e in self.permission_errors if wanted in e.lower()), None)

    def on_permission_denied(self, listener: DenialListener) -> None:
        """Call ``listener(kind, subject, text)`` for each permissions violation reported."""
        self._denial_listeners.append(listener)

    def remove_permission_listener(self, listener: DenialListener) -> None:
        """Stop calling ``listener`` (no error if it was not added)."""
        if listener in self._denial_listeners:
            self._denial_listeners.remove(listener)

    def _denied(self, what: str, text: str) -> PermissionDenied:
        if self.inbox_denied is not None:
            return PermissionDenied(
                f"{what}: no reply can arrive: the server refused this user's subscription to "
                f"its reply inbox ({self.inbox_denied}); the user needs permission to "
                "subscribe to _INBOX.>"
            )
        return PermissionDenied(f"{what}: not permitted for this user ({text})")

    @property
    def fast_path(self) -> tuple[bool, str]:
        """Whether frames bypass nats-py's public API, and why (see :mod:`oncestream._nats`)."""
        return self._wire.fast, self._wire.reason

    @property
    def multi_value_headers(self) -> bool:
        """Whether a header may carry several values on this connection (not on the fallback)."""
        return bool(self._wire.multi_value_headers)

    def write_now(self, frames: list[bytes]) -> None:
        """Queue complete ``PUB``/``HPUB`` frames for the socket at once, without awaiting.

        Raises whatever the transport raises while disconnected (the frames are
        dropped: the Publisher re-sends what is unacknowledged after a reconnect).
        """
        self._wire.write_now(frames)

    @property
    def max_payload(self) -> int:
        """Largest payload (headers + data) the connected server accepts."""
        return int(self.nc.max_payload)

    @property
    def is_connected(self) -> bool:
        """Whether the client is connected right now (False while reconnecting)."""
        return bool(self.nc.is_connected)

    @property
    def is_closed(self) -> bool:
        """Whether the connection was closed for good."""
        return bool(self.nc.is_closed)

    def new_inbox(self) -> str:
        """A unique inbox subject of this connection."""
        return str(self.nc.new_inbox())

    def on_reconnect(self, callback: Callback) -> None:
        """Call ``callback`` after each successful reconnect."""
        self._reconnect_listeners.append(callback)

    def remove_reconnect_listener(self, callback: Callback) -> None:
        """Stop calling ``callback`` after reconnects (no error if it was not added)."""
        if callback in self._reconnect_listeners:
            self._reconnect_listeners.remove(callback)

    async def flush(self, timeout: float | None = None) -> None:
        """Round trip to the server: everything written before has reached it.

        Raises:
            OperationTimeout: no answer within ``timeout`` (default ``request_timeout``).
        """
        try:
            await self._wire.flush(timeout or self.options.request_timeout)
        except Exception as exc:
            raise translate_error(exc, what="flush") from exc

    async def publish(
        self,
        subject: str,
        payload: bytes = b"",
        *,
        reply: str = "",
        headers: dict[str, str] | None = None,
    ) -> None:
        """Core-NATS publish (no PubAck: use a :class:`~oncestream.Publisher` for JetStream)."""
        try:
            await self.nc.publish(subject, payload, reply=reply, headers=headers)
        except Exception as exc:
            raise translate_error(exc, what=f"publish to {subject}") from exc

    async def request(
        self,
        subject: str,
        payload: bytes = b"",
        timeout: float | None = None,
        *,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """Core-NATS request; the reply is nats-py's ``Msg``.

        Raises:
            OperationTimeout: no reply in ``timeout`` (default ``request_timeout``).
            NoResponders: nothing listens on ``subject``.
        """
        if self.inbox_denied is not None:
            raise self._denied(f"request to {subject}", self.inbox_denied)
        try:
            return await self.nc.request(
                subject, payload, timeout=timeout or self.options.request_timeout, headers=headers
            )
        except Exception as exc:
            if self.inbox_denied is not None:
                raise self._denied(f"request to {subject}", self.inbox_denied) from exc
            raise translate_error(exc, what=f"request to {subject}") from exc

    async def subscribe_frames(self, subject: str, target: FrameTarget) -> FrameSubscription:
        """Subscribe ``subject``; raw frames go to ``target`` (see :mod:`oncestream._nats`)."""
        try:
            return await self._wire.subscribe_frames(subject, target)
        except Exception as exc:
            raise translate_error(exc, what=f"subscribe {subject}") from exc

    async def send_frames(self, frames: bytes, *, what: str = "publish") -> None:
        """Send complete PUB/HPUB frames through the client's outgoing buffer."""
        try:
            await self._wire.send(frames)
        except Exception as exc:
            raise translate_error(exc, what=what) from exc

    async def publish_many(self, subjects: Sequence[str], payload: bytes) -> None:
        """Publish ``payload`` (e.g. ``+ACK``) to every subject; failures are ignored.

        An ack that does not arrive only causes a redelivery.
        """
        try:
            await self._wire.publish_many(subjects, payload)
        except Exception as exc:
            log.debug("bulk publish to %d subjects failed: %s", len(subjects), exc)

    async def api(
        self, subject: str, payload: dict[str, Any] | None = None, *, timeout: float | None = None
    ) -> dict[str, Any]:
        """Call a JetStream API endpoint and return the decoded response.

        Args:
            subject: the endpoint after the prefix, e.g. ``"STREAM.INFO.ORDERS"``.
            payload: JSON request body, or None for an empty one.
            timeout: seconds (default ``options.request_timeout``).

        Raises:
            JetStreamError: (or a subclass) when the server answers with an error.
            OperationTimeout: when nothing answers in time.
        """
        body = orjson.dumps(payload) if payload is not None else b""
        full = f"{self.prefix}.{subject}"
        if self.inbox_denied is not None:
            raise self._denied(full, self.inbox_denied)
        # In the server's own domain it maps $JS.<domain>.API.x to $JS.API.x and
        # reports a denial for the mapped subject: wait for either.
        keys = {full.lower(), f"$js.api.{subject}".lower() if self.options.domain else ""} - {""}
        denied: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        for key in keys:
            self._denied_waiters[key] = denied
        request = asyncio.ensure_future(
            self.nc.request(full, body, timeout=timeout or self.options.request_timeout)
        )
        try:
            waitables: set[asyncio.Future[Any]] = {request, denied}
            await asyncio.wait(waitables, return_when=asyncio.FIRST_COMPLETED)
            if not request.done():
                request.cancel()
                raise self._denied(full, denied.result())
            reply = request.result()
        except nats.errors.NoRespondersError as exc:
            raise NoResponders(
                f"no JetStream API answers on {full!r}: JetStream is not enabled there, "
                f"or the domain/apiPrefix is wrong"
            ) from exc
        except PermissionDenied:
            raise
        except Exception as exc:
            denial = next(
                (e for e in self.permission_errors for k in keys if f'"{k}"' in e.lower()), None
            )
            if denial is not None or self.inbox_denied is not None:
                raise self._denied(full, denial or "") from exc
            raise translate_error(exc, what=full) from exc
        finally:
            for key in keys:
                if self._denied_waiters.get(key) is denied:
                    del self._denied_waiters[key]
            if not denied.done():
                denied.cancel()
            if not request.done():  # this call was cancelled: no orphan request task
                request.cancel()
        response: dict[str, Any] = orjson.loads(reply.data) if reply.data else {}
        if "error" in response:
            raise _name_missing(jetstream_error(response["error"]), subject)
        return response

    async def stream_info(self, stream: str) -> dict[str, Any]:
        """``STREAM.INFO``: the stream's config and state."""
        return await self.api(f"STREAM.INFO.{stream}")

    async def consumer_info(self, stream: str, consumer: str) -> dict[str, Any]:
        """``CONSUMER.INFO``: the consumer's config and state."""
        return await self.api(f"CONSUMER.INFO.{stream}.{consumer}")

    async def close(self) -> None:
        """Flush and close the connection."""
        if not self.nc.is_closed:
            try:
                await self.nc.flush(timeout=2)
            except Exception:
                pass
            try:
                await self.nc.close()
            except OSError as exc:
                # The server went away with writes still buffered (e.g. acks): they
                # cannot be sent; closing must not fail because of that.
                log.debug("closing the connection: buffered writes dropped (%s)", exc)
            except asyncio.CancelledError:
                # nats-py waits for the socket's close; a server killed meanwhile can end
                # that wait with CancelledError although nobody cancelled the caller (seen
                # in the fault campaign: a Publisher that had every ack failed its close).
                # A real cancellation of the caller still propagates.
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise
                log.debug("closing the connection: the socket's close was cancelled")

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def connect(options: ConnectOptions | None = None, **overrides: Any) -> Connection:
    """Connect to NATS.

    Args:
        options: where and how to connect (default: ``nats://127.0.0.1:4222``).
        **overrides: extra keyword arguments for ``nats.connect`` (advanced).

    When ``options.tls_required`` (a ``tls://``/``wss://`` URL or a TLS file
    option), every server must do TLS on every connect and reconnect; one that
    does not is refused before any credential is written to it.

    Raises:
        AuthenticationError: the server rejected the credentials.
        TlsNotOffered: TLS was asked for and the server does not offer it.
        ConnectError: no server could be reached.

    Example::

        async with await connect(ConnectOptions(servers=(url,))) as conn:
            info = await conn.stream_info("ORDERS")
    """
    options = options or ConnectOptions()
    where = ", ".join(options.safe_servers)
    secrets = options.secrets()
    guarded, why = await tls_guard()
    if options.tls_required and not guarded:
        raise ConnectError(
            f"refusing to connect to {where}: TLS was asked for, but with the installed "
            f"nats-py oncestream cannot make sure a server without TLS never receives the "
            f"credentials ({why}); install a nats-py version oncestream supports"
        )
    holder: dict[str, Connection] = {}
    errors: list[BaseException] = []
    refused = LogThrottle(log, burst=1, interval=30.0)
    # nats-py 2.16 hangs in connect() after a failed TLS handshake; a TLS error
    # while connecting is final anyway, so it aborts the attempt (see below).
    tls_failed: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()

    async def error_cb(exc: Exception) -> None:
        errors.append(exc)
        if isinstance(exc, ssl.SSLError) and "conn" not in holder and not tls_failed.done():
            tls_failed.set_result(exc)
        text = scrub(str(exc), secrets)
        conn = holder.get("conn")
        if conn is not None and "permissions violation" in text.lower():
            conn._permission_violation(text)
        if isinstance(exc, ServerWithoutTls) and conn is not None:
            refused.log(logging.WARNING, exc.server, "reconnect refused: %s", text)
        log.debug("nats error: %s", text)

    async def reconnected_cb() -> None:
        conn = holder.get("conn")
        if conn is None:
            return
        conn.reconnects += 1
        for callback in list(conn._reconnect_listeners):
            await callback()

    servers, credentials = options.client_settings()
    kwargs: dict[str, Any] = {
        "servers": servers,
        "name": options.name,
        "connect_timeout": options.connect_timeout,
        "reconnect_time_wait": options.reconnect_wait,
        # A server that is down at start-up should fail fast; the configured
        # attempts apply to reconnects once the first connection succeeded.
        "max_reconnect_attempts": 1,
        "error_cb": error_cb,
        "reconnected_cb": reconnected_cb,
        "tls": tls_context(options),
        **credentials,
        "user_credentials": options.creds,
    }
    if options.nkey_seed is not None:
        if os.path.isfile(options.nkey_seed):
            kwargs["nkeys_seed"] = options.nkey_seed
        else:
            kwargs["nkeys_seed_str"] = options.nkey_seed
    kwargs.update(overrides)
    nc = new_client(require_tls=options.tls_required, guarded=guarded)
    try:
        await _connect_or_tls_failure(nc, kwargs, tls_failed, where)
    except Exception as exc:
        for err in errors:
            if isinstance(err, ServerWithoutTls):
                raise TlsNotOffered(
                    f"the server at {err.server} does not offer TLS, but TLS was asked for "
                    "(a tls:// or wss:// URL, or a TLS file option); nothing was sent to it, "
                    "credentials included. Enable TLS on that server or connect to one that has it"
                ) from err
        for err in errors:
            text = str(err).lower()
            if "authorization violation" in text or "authentication" in text:
                raise AuthenticationError(
                    f"the server at {where} rejected the credentials"
                ) from exc
        reason = scrub(str(exc or errors), secrets)
        if isinstance(exc, nats.errors.NoServersError | OSError | asyncio.TimeoutError):
            raise ConnectError(f"cannot connect to NATS at {where}: {reason}") from exc
        if isinstance(exc, OncestreamError):
            raise
        raise ConnectError(f"connect to {where}: {type(exc).__name__}: {reason}") from exc
    nc.options["max_reconnect_attempts"] = options.max_reconnect_attempts
    if not tls_failed.done():
        tls_failed.cancel()
    conn = Connection(nc, options, await attach(nc))
    holder["conn"] = conn
    return conn


def tls_context(options: ConnectOptions) -> ssl.SSLContext | None:
    """The SSL context for ``options`` (None when TLS was not asked for).

    The files were checked when the options were built (``_credentials``).
    """
    if not options.tls_required:
        return None
    context = ssl.create_default_context(cafile=options.tls_ca_file)
    if options.tls_cert_file and options.tls_key_file:
        context.load_cert_chain(options.tls_cert_file, options.tls_key_file)
    return context


async def _connect_or_tls_failure(
    nc: Client, kwargs: dict[str, Any], tls_failed: asyncio.Future[BaseException], where: str
) -> None:
    attempt = asyncio.ensure_future(nc.connect(**kwargs))
    waitables: set[asyncio.Future[Any]] = {attempt, tls_failed}
    try:
        await asyncio.wait(waitables, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        attempt.cancel()
        raise
    if attempt.done():
        attempt.result()
        return
    attempt.cancel()
    try:
        async with asyncio.timeout(1.0):
            await nc.close()
    except Exception:
        pass
    reason = tls_failed.result()
    raise ConnectError(
        f"TLS handshake with {where} failed: {getattr(reason, 'reason', None) or reason}"
    ) from reason
