"""Continuous pull from a JetStream durable consumer, like nats.go's ``Messages()``.

nats-py only offers ``fetch()``, which leaves the caller to write the loop,
to notice missed heartbeats and to re-pull after a reconnect. A
:class:`MessageStream` keeps pull requests outstanding on one inbox
subscription so the server can deliver while the caller works:

- the first request asks for ``batch`` messages; once fewer than
  ``threshold`` requested messages are still outstanding, a new request tops
  the buffer up again (pre-buffering);
- each request expires after ``expires`` seconds and asks for idle
  heartbeats; two missed heartbeats surface as :class:`OperationTimeout`
  from the iterator (which stays usable: it re-pulls);
- status messages 404/408/409 are handled (outstanding counts corrected,
  consumer deletion raised as :class:`ConsumerNotFound`, or as
  :class:`StreamNotFound` when ``STREAM.INFO`` says the stream went with it);
- "503 no responders" (a clustered consumer between leaders, its node cut
  off or restarting, or a deleted consumer) is re-pulled with a capped
  backoff; after 5 in a row the stream asks ``CONSUMER.INFO``, and only a
  confirmed missing consumer (:class:`ConsumerNotFound`) or stream
  (:class:`StreamNotFound`) ends the iteration;
- after a reconnect every outstanding request is assumed lost and re-issued,
  and so is what a request still owes past its ``expires`` plus two heartbeats
  (the server ended it without a 408);
- in a priority group (``PullOptions.group``) every request names the group;
  with the ``pinned_client`` policy the stream keeps the ``Nats-Pin-Id`` the
  server puts on the messages it delivers to the pinned client, sends it with
  every request, and forgets it on a "423 Nats-Pin-Id mismatch" (another
  client holds the pin now; this one waits as a standby).

Example::

    async with pull_messages(conn, "ORDERS", "worker") as messages:
        async for msg in messages:
            ...
            await msg.ack()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import orjson

from .._connection import Connection
from .._errors import (
    ConsumerNotFound,
    JetStreamError,
    NoResponders,
    OperationTimeout,
    StreamNotFound,
)
from .._headers import (
    PENDING_BYTES,
    PENDING_MESSAGES,
    PIN_ID,
    first_values,
    parse_block,
    split_status,
)
from .._logthrottle import LogThrottle
from .._message import Message
from .._names import check_consumer_name, check_stream_name
from .._nats import FrameSubscription
from .._retry import stream_missing
from ._options import PullOptions

__all__ = ["MessageStream", "PullOptions", "pull_messages"]

log = logging.getLogger(__name__)

_STATUS = "Status"
#: After this many "503 no responders" answers in a row (and every this many more),
#: ask CONSUMER.INFO whether the consumer still exists.
_NO_RESPONDERS_CHECK = 5
#: Longest delay between re-pulls while nothing responds (seconds).
_MAX_HOLD = 2.0
_DESCRIPTION = "Description"
_PIN_HEADER = b"\r\n" + PIN_ID.encode() + b":"


def _status_headers(block: bytes) -> dict[str, str]:
    """A status frame's headers, with its status line as ``Status`` and ``Description``."""
    status, description = split_status(block)
    headers = first_values(parse_block(block, control=True))
    if status is not None:
        headers[_STATUS] = status
    if description:
        headers[_DESCRIPTION] = description
    return headers


class MessageStream:
    """Continuously pulled messages of one durable pull consumer.

    Create with :func:`pull_messages` (or construct and ``await start()``).
    Iterate it for single messages, or call :meth:`next_batch` for everything
    already buffered. Messages are :class:`~oncestream.Message` objects:
    subject, data, headers, JetStream ``metadata`` (parsed once, on first
    use) and ``ack()`` / ``ack_sync()`` / ``nak()`` / ``term()`` / ``in_progress()``.

    Raises (from iteration):
        OperationTimeout: two idle heartbeats were missed (the stream re-pulls
            and stays usable).
        ConsumerNotFound: the consumer was deleted (a 409, or the server confirmed
            it missing after a run of "no responders").
        StreamNotFound: the stream was deleted (with its consumers): the server
            said so when asked after a 409 "Consumer Deleted" or a run of "no
            responders" (not asked with ``confirm_missing=False``).
        NoResponders: nothing responded for ``unavailable_timeout`` seconds.

    Attributes:
        no_responders_total: "503 no responders" answers received so far.
        consumer_checks: ``CONSUMER.INFO`` checks made after runs of them.
        pin_id: with ``PullOptions.pinned``, the pin the server gave this client
            (None: not pinned, a standby).
        pins_lost: "423" answers: the pin moved to another client.
        requests_lost: requests that ended without a 408 (past their ``expires``
            plus two heartbeats); what they still owed was asked for again.
    """

    def __init__(
        self,
        conn: Connection,
        stream: str,
        consumer: str,
        options: PullOptions | None = None,
        *,
        pin_id: str | None = None,
    ) -> None:
        self.conn = conn
        self.stream = check_stream_name(stream)
        self.consumer = check_consumer_name(consumer)
        self.options = options or PullOptions()
        self._next_subject = f"{conn.prefix}.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self._buffer: deque[Message] = deque()
        self._wakeup = asyncio.Event()
        self._sub: FrameSubscription | None = None
        self._inbox = ""
        self._pending_msgs = 0
        self._pending_bytes = 0
        self._last_activity = time.monotonic()
        self._errors: deque[Exception] = deque()
        self._monitor: asyncio.Task[None] | None = None
        self._stopped = False
        self._draining = False
        self._repull_needed = False
        self.pulls = 0
        self.heartbeats_missed = 0
        self._refill_at = max(1, int(self.options.batch * self.options.threshold))
        self._track_bytes = bool(self.options.max_bytes)
        self._no_responders = 0
        self._unavailable_since: float | None = None
        self._check: asyncio.Task[None] | None = None
        self._unavailable_log = LogThrottle(log, burst=3, interval=30.0)
        self.no_responders_total = 0
        self.consumer_checks = 0
        self._hold_until = 0.0
        self._received = 0
        self._seen_received = 0
        self.pin_id = pin_id
        self.pins_lost = 0
        #: Pins this stream held and lost: a late message still carrying one is not a new pin.
        self._lost_pins: set[str] = set()
        #: The header line of the last pin seen (``\r\nNats-Pin-Id: ...\r\n``): a message
        #: carrying it again changes nothing.
        self._pin_line = b""
        self._pinned = self.options.pinned
        self._last_pull = 0.0
        #: Messages asked for by every request so far; minus ``_pending_msgs``: those
        #: delivered or released (a 404/408's unused part, a reset).
        self._asked = 0
        #: Requests not known to have ended, oldest first: (when it must have ended by,
        #: ``_asked`` after it). The server serves and expires them in that order.
        self._requests: deque[tuple[float, int]] = deque()
        #: Requests that ended without a word (no 408: see _forget_ended_requests).
        self.requests_lost = 0

    async def start(self) -> MessageStream:
        """Subscribe the inbox and send the first pull request."""
        self._inbox = self.conn.new_inbox()
        # Raw frames reach _on_frame synchronously: no nats-py Msg, queue or callback
        # task where the adapter can bypass them (see oncestream._nats).
        self._sub = await self.conn.subscribe_frames(self._inbox, self._on_frame)
        self.conn.on_reconnect(self._on_reconnect)
        await self._pull()
        self._monitor = asyncio.get_running_loop().create_task(self._watch_heartbeats())
        return self

    def _on_frame(
        self, subject: bytes, reply: bytes, data: bytes | bytearray, headers: bytes | None
    ) -> None:
        # A counter, not a clock read: the heartbeat watcher notices it moving.
        self._received += 1
        if reply:
            if self._pinned and headers:
                self._note_pin(headers)
            self._pending_msgs -= 1
            if self._track_bytes:
                self._pending_bytes -= len(data) + len(subject) + len(reply)
            self._buffer.append(
                Message(
                    subject.decode(),
                    reply.decode(),
                    bytes(data),
                    None,
                    self.conn,
                    headers or None,
                )
            )
            if not self._wakeup.is_set():
                self._wakeup.set()
            return
        self._on_status(_status_headers(headers) if headers else {})

    def forget_pin(self) -> None:
        """Pull as a standby from now on; the pin held so far is never taken up again."""
        if self.pin_id is not None:
            self._lost_pins.add(self.pin_id)
        self.pin_id = None
        self._repull_needed = True
        self._wakeup.set()

    def forget_pin_later(self, pin: str) -> None:
        """Never take up ``pin`` (one this client gave up without using it)."""
        self._lost_pins.add(pin)

    def _note_pin(self, headers: bytes) -> None:
        seen = self._pin_line
        if seen and seen in headers:
            return  # the pin of the last message (every message of a pinned client has it)
        at = headers.find(_PIN_HEADER)
        if at < 0:
            return
        start = at + len(_PIN_HEADER)
        end = headers.find(b"\r\n", start)
        if end >= 0:
            self._pin_line = bytes(headers[at : end + 2])
        pin = bytes(headers[start : end if end >= 0 else len(headers)]).strip().decode()
        if pin and pin != self.pin_id and pin not in self._lost_pins:
            self.pin_id = pin

    def _on_status(self, headers: dict[str, str]) -> None:
        status = headers.get(_STATUS, "")
        description = headers.get(_DESCRIPTION, "")
        if status == "503":
            self._on_no_responders()
            return
        if self._unavailable_since is not None:
            self._responders_back()
        if status == "100":
            return
        if status in ("404", "408"):
            # The request ended; the server says how much of it went unused.
            unused = int(headers.get(PENDING_MESSAGES, "0") or 0)
            unused_bytes = int(headers.get(PENDING_BYTES, "0") or 0)
            if unused or unused_bytes:
                self._pending_msgs = max(0, self._pending_msgs - unused)
                self._pending_bytes = max(0, self._pending_bytes - unused_bytes)
            else:
                self._pending_msgs = self._pending_bytes = 0
            self._repull_needed = True
            self._wakeup.set()
            return
        if status == "423":
            # The pin moved to another client (ours expired, or an UNPIN): pull as a
            # standby from now on; what is buffered was delivered under the old pin.
            if self.pin_id is not None:
                self.pins_lost += 1
                log.warning(
                    "pull from %s/%s: the server moved the pin to another client (%s)",
                    self.stream,
                    self.consumer,
                    description or "423",
                )
            self._pending_msgs = self._pending_bytes = 0
            self.forget_pin()
            return
        if status == "409":
            lowered = description.lower()
            if "consumer deleted" in lowered or "consumer is push based" in lowered:
                self._errors.append(
                    ConsumerNotFound(
                        f"consumer {self.consumer!r} on stream {self.stream!r}: {description}",
                        code=409,
                    )
                )
            elif "max bytes" in lowered or "exceeds maxbytes" in lowered:
                self._errors.append(
                    JetStreamError(
                        f"a message of {self.stream} is larger than max_bytes "
                        f"({self.options.max_bytes}): {description}",
                        code=409,
                    )
                )
            else:
                log.debug(
                    "pull request on %s/%s ended: 409 %s", self.stream, self.consumer, description
                )
            self._pending_msgs = self._pending_bytes = 0
            self._repull_needed = True
            self._wakeup.set()
            return
        log.warning(
            "unexpected status %s %s on %s/%s", status, description, self.stream, self.consumer
        )
        self._errors.append(
            JetStreamError(f"pull from {self.stream}/{self.consumer}: {status} {description}")
        )
        self._wakeup.set()

    def _on_no_responders(self) -> None:
        # Nothing serves the pull subject: a clustered consumer between leaders or
        # on a node cut off or restarting, or a deleted consumer. Re-pull with a
        # growing delay; every _NO_RESPONDERS_CHECK in a row, ask the server.
        self._pending_msgs = self._pending_bytes = 0
        self._no_responders += 1
        self.no_responders_total += 1
        now = time.monotonic()
        if self._unavailable_since is None:
            self._unavailable_since = now
        bound = self.options.unavailable_timeout
        if bound is not None and now - self._unavailable_since >= bound:
            self._errors.append(
                NoResponders(
                    f"consumer {self.consumer!r} on stream {self.stream!r}: no responders on "
                    f"{self._next_subject} for {now - self._unavailable_since:.1f}s "
                    f"(unavailable_timeout {bound}s)",
                    transient=True,
                )
            )
            self._responders_back(recovered=False)
            self._repull_needed = True
            self._wakeup.set()
            return
        if self._no_responders % _NO_RESPONDERS_CHECK == 0:
            if not self.options.confirm_missing:
                self._warn_unavailable("not checked (confirm_missing=False)")
            elif self._check is None and not self._stopped:
                self.consumer_checks += 1
                self._check = asyncio.get_running_loop().create_task(self._confirm_consumer())
        delay = min(0.25 * 2 ** min(self._no_responders - 1, 3), _MAX_HOLD)
        self._hold_until = now + delay
        asyncio.get_running_loop().call_later(delay, self._release_hold)

    async def _confirm_consumer(self) -> None:
        """After a run of no responders: missing (raise), existing or unknown (retry)."""
        try:
            await self.conn.consumer_info(self.stream, self.consumer)
        except (ConsumerNotFound, StreamNotFound) as exc:
            # Answered: it is gone (unless responders came back meanwhile).
            if not self._stopped and self._unavailable_since is not None:
                asked = (
                    f"CONSUMER.INFO after {self._no_responders} no-responders answers "
                    f"to {self._next_subject}"
                )
                error: JetStreamError
                if isinstance(exc, StreamNotFound):
                    error = StreamNotFound(
                        f"stream {self.stream!r} not found, so neither is consumer "
                        f"{self.consumer!r} ({asked}: {exc.description})",
                        code=exc.code,
                        err_code=exc.err_code,
                    )
                else:
                    error = ConsumerNotFound(
                        f"consumer {self.consumer!r} not found on stream {self.stream!r} ({asked})",
                        code=exc.code,
                        err_code=exc.err_code,
                    )
                error.__cause__ = exc
                self._errors.append(error)
                self._wakeup.set()
            return
        except Exception as exc:  # timeout, NoResponders, connection lost: cannot tell
            outcome = f"its existence could not be checked ({type(exc).__name__}: {exc})"
        else:
            outcome = "it exists"
        finally:
            self._check = None
        if self._unavailable_since is not None and not self._stopped:
            self._warn_unavailable(outcome)

    def _warn_unavailable(self, outcome: str) -> None:
        since = self._unavailable_since
        elapsed = 0.0 if since is None else time.monotonic() - since
        self._unavailable_log.log(
            logging.WARNING,
            f"unavailable {self.stream}/{self.consumer} {outcome[:40]}",
            "pull from %s/%s: no responders for %.1fs (%d in a row); %s; re-pulling",
            self.stream,
            self.consumer,
            elapsed,
            self._no_responders,
            outcome,
        )

    def _responders_back(self, *, recovered: bool = True) -> None:
        since = self._unavailable_since
        if recovered and since is not None and self._no_responders >= _NO_RESPONDERS_CHECK:
            log.warning(
                "pull from %s/%s: the consumer responds again after %.1fs",
                self.stream,
                self.consumer,
                time.monotonic() - since,
            )
        self._no_responders = 0
        self._unavailable_since = None

    async def _on_reconnect(self) -> None:
        if self._stopped:
            return
        # Requests pending on a server we lost are gone: start over.
        self._pending_msgs = self._pending_bytes = 0
        self._last_activity = time.monotonic()
        with contextlib.suppress(Exception):
            await self._pull()

    def _release_hold(self) -> None:
        self._hold_until = 0.0
        self._repull_needed = True
        self._wakeup.set()

    async def _pull(self, *, at_least_one: bool = False) -> None:
        if self._stopped or self._draining or time.monotonic() < self._hold_until:
            return
        want = self.options.batch - self._pending_msgs
        if want <= 0:
            if not at_least_one:
                return
            want = 1
        request: dict[str, Any] = {
            "batch": want,
            "expires": int(self.options.expires * 1e9),
            "idle_heartbeat": int(self.options.heartbeat * 1e9),
        }
        if self.options.max_bytes:
            request["max_bytes"] = max(1, self.options.max_bytes - self._pending_bytes)
        if self.options.group is not None:
            self._group_fields(request)
        self._repull_needed = False
        self._pending_msgs += want
        self._asked += want
        # Past its expiry plus two heartbeats, a request the server did not end with a
        # 408 is gone all the same.
        now = time.monotonic()
        self._requests.append(
            (now + self.options.expires + 2 * self.options.heartbeat, self._asked)
        )
        if self.options.max_bytes:
            self._pending_bytes = self.options.max_bytes
        self.pulls += 1
        self._last_pull = now
        try:
            await self.conn.publish(self._next_subject, orjson.dumps(request), reply=self._inbox)
        except Exception as exc:
            # Disconnected: the reconnect hook pulls again.
            self._pending_msgs -= want
            self._requests.pop()
            self._asked -= want
            log.debug("pull request not sent: %s", exc)

    def _forget_ended_requests(self, now: float) -> None:
        """Count what requests past their end still owe as released, and re-pull.

        The server ends a request with a 408 that says how much of it went unused,
        but not always: around a consumer leader that lost its quorum mid-request,
        one ended without a word. Its unused part then stayed counted as on its way:
        with more than ``threshold`` of a batch "outstanding" no new request was
        sent, and a pinned member pulled only what its pin refresh topped up, 7
        messages every 5 s, for the rest of a fault trial (seed 52, trial 73).
        """
        requests = self._requests
        settled = self._asked - self._pending_msgs
        while requests and requests[0][1] <= settled:
            requests.popleft()  # served, or released by a 404/408/409 or a reset
        owed_until = settled
        while requests and requests[0][0] <= now:
            _, owed_until = requests.popleft()
            self.requests_lost += 1
        lost = owed_until - settled
        if lost:
            self._pending_msgs = max(0, self._pending_msgs - lost)
            if not requests:
                self._pending_msgs = self._pending_bytes = 0
            log.info(
                "pull from %s/%s: a request ended without a 408; %d messages it owed "
                "are asked for again",
                self.stream,
                self.consumer,
                lost,
            )
            self._repull_needed = True
            self._wakeup.set()

    def _group_fields(self, request: dict[str, Any]) -> None:
        opts = self.options
        request["group"] = opts.group
        if self.pin_id is not None:
            request["id"] = self.pin_id
        if opts.min_pending:
            request["min_pending"] = opts.min_pending
        if opts.min_ack_pending:
            request["min_ack_pending"] = opts.min_ack_pending

    async def _refresh_pin(self) -> None:
        """A pinned client that sent no request for ``pin_refresh`` seconds sends one.

        The server releases a pin after the consumer's ``priority_timeout``
        without a request carrying it; a full buffer (a long batch) sends none.
        """
        refresh = self.options.pin_refresh or self.options.expires
        if self.pin_id is None or time.monotonic() - self._last_pull < refresh:
            return
        await self._pull(at_least_one=True)

    async def _maybe_refill(self) -> None:
        if self._repull_needed or self._pending_msgs < self._refill_at:
            await self._pull()

    async def _watch_heartbeats(self) -> None:
        heartbeat = self.options.heartbeat
        while not self._stopped:
            await asyncio.sleep(heartbeat)
            if self._stopped or self._draining:
                return
            if not self.conn.is_connected or time.monotonic() < self._hold_until:
                # Nothing outstanding to send heartbeats (disconnected, or waiting
                # to re-pull after no responders).
                self._last_activity = time.monotonic()
                continue
            if self._received != self._seen_received:
                self._seen_received = self._received
                self._last_activity = time.monotonic()
            self._forget_ended_requests(time.monotonic())
            if self._pinned:
                await self._refresh_pin()
            if time.monotonic() - self._last_activity > 2 * heartbeat:
                self.heartbeats_missed += 1
                self._errors.append(
                    OperationTimeout(
                        f"pull from {self.stream}/{self.consumer}: no heartbeat for "
                        f"{2 * heartbeat:.1f}s; pulling again"
                    )
                )
                self._pending_msgs = self._pending_bytes = 0
                self._last_activity = time.monotonic()
                await self._pull()
                self._wakeup.set()

    def buffered(self) -> int:
        """Messages received and not yet handed out."""
        return len(self._buffer)

    def buffered_replies(self) -> list[str]:
        """Reply subjects of the messages received and not yet handed out.

        Their ack wait runs from delivery: a caller busy with earlier messages
        keeps them alive with in-progress acks to these subjects.
        """
        return [m.reply for m in self._buffer]

    async def next_batch(
        self, max_messages: int = 0, timeout: float | None = None
    ) -> list[Message]:
        """Return the buffered messages (at least one), waiting up to ``timeout``.

        Args:
            max_messages: return at most this many (0 = all buffered).
            timeout: seconds to wait for the first message (None = forever);
                an empty list means the timeout passed or the stream stopped.

        Raises:
            OperationTimeout: heartbeats were missed.
            ConsumerNotFound: the consumer was deleted.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._buffer:
            if self._errors:
                raise await self._explained(self._errors.popleft())
            if self._stopped or self._draining:
                return []
            if self._repull_needed:
                await self._pull()
            self._wakeup.clear()
            if self._buffer:
                break
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return []
            try:
                async with asyncio.timeout(remaining):
                    await self._wakeup.wait()
            except TimeoutError:
                return []
        if self._unavailable_since is not None:
            self._responders_back()
        buffer = self._buffer
        if max_messages <= 0 or max_messages >= len(buffer):
            batch = list(buffer)
            buffer.clear()
        else:
            batch = [buffer.popleft() for _ in range(max_messages)]
        await self._maybe_refill()
        return batch

    async def _explained(self, error: Exception) -> Exception:
        """A 409 "Consumer Deleted" also comes when the whole stream was deleted: ask."""
        if not (
            isinstance(error, ConsumerNotFound)
            and error.code == 409
            and self.options.confirm_missing
        ):
            return error
        gone = await stream_missing(self.conn, self.stream)
        if gone is None:
            return error
        explained = StreamNotFound(
            f"stream {self.stream!r} was deleted (and consumer {self.consumer!r} with it): "
            "the pull ended with '409 Consumer Deleted' and STREAM.INFO says the stream "
            "does not exist",
            code=gone.code,
            err_code=gone.err_code,
        )
        explained.__cause__ = error
        return explained

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Message]:
        while True:
            if not self._buffer:
                batch = await self.next_batch()
                if not batch:
                    return
                self._buffer.extendleft(reversed(batch))
            yield self._buffer.popleft()
            if self._pending_msgs < self._refill_at or self._repull_needed:
                await self._pull()

    def halt(self) -> None:
        """Stop pulling and end :meth:`next_batch` waits now (safe from a signal handler)."""
        self._stopped = self._draining = True
        if self._check is not None:
            self._check.cancel()
        self._wakeup.set()

    def take_unprocessed(self) -> list[Message]:
        """Remove and return every buffered message (e.g. to nak them on shutdown)."""
        batch = list(self._buffer)
        self._buffer.clear()
        return batch

    async def stop(self, *, drain: bool = False) -> None:
        """Stop pulling.

        Args:
            drain: keep handing out already-buffered messages until the buffer
                is empty; without it iteration ends at once and buffered
                messages stay unacknowledged (the server redelivers them after
                ``ack_wait``; use :meth:`take_unprocessed` to nak them sooner).
        """
        self._draining = True
        if not drain:
            self._stopped = True
        check = self._check
        if check is not None:
            # A CONSUMER.INFO in flight must not hold up the stop (nor outlive it).
            check.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await check
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._monitor
            self._monitor = None
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None
        self._wakeup.set()

    async def __aenter__(self) -> MessageStream:
        if self._sub is None:
            await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def pull_messages(
    conn: Connection,
    stream: str,
    consumer: str,
    options: PullOptions | None = None,
    *,
    pin_id: str | None = None,
) -> MessageStream:
    """A continuous pull on an existing durable pull consumer.

    Use as ``async with pull_messages(conn, "ORDERS", "worker") as msgs:``
    (``async with`` starts it) and iterate ``msgs``; or ``await
    pull_messages(...).start()``.

    Args:
        conn: a connection (its JetStream prefix/domain is used for the pull subject).
        stream: stream name.
        consumer: durable pull consumer name.
        options: batch, max bytes, threshold, expiry, heartbeat, priority group.
        pin_id: a pin this client already holds (pinned priority groups).
    """
    return MessageStream(conn, stream, consumer, options, pin_id=pin_id)
