"""Atomic batches (JetStream atomic batch publish, nats-server >= 2.12): sessions and chunks.

A batch is up to 1000 messages sent back to back with ``Nats-Batch-Id`` and
``Nats-Batch-Sequence``; only the last one (``Nats-Batch-Commit: 1``) carries
a reply subject, and the server stores all of them or none (the stream needs
``allow_atomic``). What nats-server does with them (``server/stream.go``,
``processJetStreamAtomicBatchMsg``, and ``server/jetstream_batching.go``,
read on 2.15):

- Each message is staged as it arrives. The commit message runs every staged
  message's header checks (``Nats-Expected-Stream``,
  ``Nats-Expected-Last-Subject-Sequence``, ``Nats-Msg-Id`` de-duplication)
  and stores them all, or answers with the first refusal and stores none. A
  msg id the stream holds inside its duplicate window refuses the whole batch
  with err_code 10201, as does an id repeated within the batch.
- A staged batch whose commit message never arrives is abandoned after the
  batch timeout (``getCleanupTimeout``: 10 s, or the server's
  ``jetstream.limits.max_batch_timeout``). It can never commit later: only
  its commit message commits it, and that message answers "incomplete"
  (10176) when the batch is gone by then. At most 50 atomic batches per
  stream (1000 per server) are staged at once; the first message of one more
  is dropped without a reply (it has none), so its commit answers 10176 too.
- One goroutine per stream processes the stream's ingest queue in order
  (``internalLoop``): atomic batch messages and plain publishes alike. A
  publish sent after a batch on the same connection is therefore processed
  after the batch's commit message, if that message reaches the server at all.
- Only a clustered stream's leader subscribes to its subjects. While it has
  none (an election, or too few of its servers up) a commit message, like any
  publish, is answered 503 "no responders", as it is for a subject no stream
  captures (:mod:`._noresponders`). That 503 proves the commit message reached
  no stream, so the attempt committed nothing and never will: sending the
  batch again is safe. It says nothing about an earlier attempt, which a
  leader may have committed just before it died, nor about the stream's
  progress: a settle probe answered 503 settles nothing.

Two senders share the frames and the reply inbox here:
:class:`AtomicBatchSender` sends a producer session's batches one at a time
(its first message carries ``Nats-Expected-Last-Subject-Sequence``, so at
most one attempt of a batch can commit), and
:class:`~oncestream.publish._atomic.AtomicPublisher` pipelines chunks of rows
with deterministic msg ids and never re-sends a chunk whose fate it does not
know (the Spark sink's ``ingest=atomic``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from .._connection import Connection
from .._errors import (
    ConfigError,
    ErrCode,
    JetStreamError,
    NoResponders,
    PublishFailed,
    jetstream_error,
)
from .._headers import (
    BATCH_COMMIT,
    BATCH_ID,
    BATCH_SEQ,
    BLOCK_START_B,
    EXPECTED_LAST_SUBJECT_SEQ,
    EXPECTED_STREAM,
    MSG_ID,
    HeaderValues,
    build_block,
)
from .._nats import FrameSubscription
from .._retry import retrying
from ..streams import require_server
from ..streams._internal import check_server_bugs
from ._frames import check_subject, too_large
from ._noresponders import look_up, no_leader_cause
from ._options import PublisherOptions

__all__ = [
    "ATOMIC_SINCE",
    "MAX_BATCH",
    "AtomicBatchSender",
    "BatchRecord",
    "Replies",
    "ack_response",
    "batch_frames",
    "check_atomic",
    "commit_result",
    "probe_frame",
    "settles",
]

log = logging.getLogger(__name__)

ATOMIC_SINCE = (2, 12)
#: The server's default (and a stream's usual) largest atomic batch.
MAX_BATCH = 1000
#: The settle probe's expected stream: no stream is named this (names cannot contain
#: '.'), so whichever stream captures the probe's subject refuses it (10060), unstored.
_PROBE_STREAM = "oncestream.settle"
_PROBE_HEADER = BLOCK_START_B + b"%b: %b\r\n\r\n" % (
    EXPECTED_STREAM.encode(),
    _PROBE_STREAM.encode(),
)

BatchRecord = tuple[int, bytes, "Mapping[str, str] | None"]


def check_atomic(what: str, stream: str, config: Mapping[str, Any], conn: Connection) -> None:
    """Refuse atomic batches into ``stream`` unless its ``config`` and the server allow them.

    Raises:
        ConfigError: naming ``what`` asked for them, the stream and how to enable them.
    """
    require_server(conn, ATOMIC_SINCE, what)
    check_server_bugs(conn, "publish", replicas=int(config.get("num_replicas") or 1))
    if not config.get("allow_atomic"):
        raise ConfigError(
            f"{what} needs atomic batch publish, but stream {stream!r} does not set "
            f"allow_atomic: enable it with `oncestream stream edit {stream} --allow-atomic` "
            f"(nats-server {ATOMIC_SINCE[0]}.{ATOMIC_SINCE[1]}+)"
        )


def batch_frames(
    batch_id: str,
    subjects: Sequence[bytes],
    datas: Sequence[bytes],
    ids: Sequence[str],
    headers: Sequence[HeaderValues | None] | None,
    reply: bytes,
    *,
    expect: Mapping[str, str],
    first: Mapping[str, str] | None = None,
    max_payload: int = 0,
) -> bytes:
    """The HPUB frames of one atomic batch; only the commit (last) message has ``reply``.

    Args:
        expect: control headers of every message (``Nats-Expected-Stream``).
        first: control headers of the first message only.
        max_payload: the server's limit for headers + data of one message (0: unchecked).

    Raises:
        MessageTooLarge: a message above ``max_payload`` (sent, it would close the
            connection, not just fail the batch).
    """
    control = "".join(f"{k}: {v}\r\n" for k, v in expect.items()) + f"{BATCH_ID}: {batch_id}\r\n"
    # The common row (a msg id, no user headers) formatted in one step.
    head = BLOCK_START_B + b"%b: %%b\r\n%b%b: %%d\r\n%%b\r\n" % (
        MSG_ID.encode(),
        control.encode().replace(b"%", b"%%"),
        BATCH_SEQ.encode(),
    )
    commit = f"{BATCH_COMMIT}: 1\r\n".encode()
    opening = "".join(f"{k}: {v}\r\n" for k, v in (first or {}).items()).encode()
    last = len(ids)
    frames = []
    for index in range(last):
        n = index + 1
        extra = headers[index] if headers is not None else None
        if extra:
            control_headers = {**expect, BATCH_ID: batch_id, BATCH_SEQ: str(n)}
            if n == 1 and first:
                control_headers.update(first)
            if n == last:
                control_headers[BATCH_COMMIT] = "1"
            hdr = build_block(ids[index], extra, control_headers)
        else:
            tail = (opening if n == 1 else b"") + (commit if n == last else b"")
            hdr = head % (ids[index].encode(), n, tail)
        data = datas[index]
        size = len(hdr) + len(data)
        if max_payload and size > max_payload:
            raise too_large(ids[index], subjects[index].decode(), size, max_payload)
        target = b"%b %b" % (subjects[index], reply) if n == last else subjects[index]
        frames.append(b"HPUB %b %d %d\r\n%b%b\r\n" % (target, len(hdr), size, hdr, data))
    return b"".join(frames)


def probe_frame(subject: bytes, reply: bytes) -> bytes:
    """A settle probe to ``subject``: refused (10060) by whichever stream captures it.

    Its reply comes from the stream's ingest loop, after everything this
    connection sent to that stream before it (see the module docstring); only
    a full ingest queue (10167) or no stream reached (503: none captures the
    subject, or its stream has no leader) answers otherwise.
    """
    return b"HPUB %b %b %d %d\r\n%b\r\n" % (
        subject,
        reply,
        len(_PROBE_HEADER),
        len(_PROBE_HEADER),
        _PROBE_HEADER,
    )


def ack_response(data: bytes, subject: str, what: str) -> Any:
    """The decoded ack of a publish to ``subject``, refusals raised.

    Args:
        what: the ack's name in the malformed-ack message (``"PubAck"``).

    Raises:
        NoResponders: the publish reached no stream (503, no body): none captures
            ``subject``, or its stream has no leader (see the module docstring).
        JetStreamError: the typed refusal (err_code kept), or an ack that is not JSON.
    """
    if not data:
        raise NoResponders(
            f'no stream answered on subject {subject!r} ("no responders": none captures it, '
            "or its stream has no leader)"
        )
    try:
        response = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise JetStreamError(f"malformed {what}: {data!r}") from exc
    if "error" in response:
        raise jetstream_error(response["error"])
    return response


def commit_result(data: bytes, subject: str) -> tuple[int, int]:
    """``(seq, count)`` of a batch's commit ack.

    Raises:
        NoResponders: the commit reached no stream (503): the batch is not stored.
        JetStreamError: the typed refusal (err_code kept), or a malformed ack.
    """
    response = ack_response(data, subject, "batch commit ack")
    return int(response.get("seq", 0)), int(response.get("count", -1))


def settles(data: bytes) -> bool:
    """Whether a settle probe's reply came from the stream's ingest loop.

    Two replies do not: 10167 (the ingest queue was full, the probe dropped)
    and a 503 (no body: the probe reached no stream). A 503 also comes from a
    stream without a leader, whose old leader may have committed the batch
    before it died, so it does not say that no stream holds the batch; the
    caller asks the server whether any stream captures the subject.
    """
    if not data:
        return False
    with contextlib.suppress(orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
        error = orjson.loads(data).get("error") or {}
        return int(error.get("err_code") or 0) != ErrCode.TOO_MANY_REQUESTS
    return False


class _NoCommitAck(Exception):
    """An attempt of a batch got no commit ack in time: the one error worth another."""


class Replies:
    """The reply inbox of atomic batches and settle probes: one future per reply subject."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._inbox = b""
        self._sub: FrameSubscription | None = None
        self._futures: dict[bytes, asyncio.Future[bytes]] = {}
        self._token = 0

    async def start(self) -> None:
        """Subscribe to the inbox."""
        if self._sub is None:
            inbox = self.conn.new_inbox()
            self._inbox = inbox.encode() + b"."
            self._sub = await self.conn.subscribe_frames(inbox + ".*", self._on_reply)

    async def close(self) -> None:
        """Unsubscribe; replies still outstanding are never delivered."""
        self._futures.clear()
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None

    def expect(
        self, future: asyncio.Future[bytes] | None = None
    ) -> tuple[bytes, asyncio.Future[bytes]]:
        """A new reply subject and the future its reply resolves (``future``, or a new one)."""
        self._token += 1
        token = b"%d" % self._token
        if future is None:
            future = asyncio.get_running_loop().create_future()
        self._futures[token] = future
        return self._inbox + token, future

    def forget(self, reply: bytes) -> None:
        """A reply to ``reply`` no longer matters."""
        self._futures.pop(reply.rsplit(b".", 1)[-1], None)

    def _on_reply(
        self, subject: bytes, _reply: bytes, data: bytes | bytearray, _headers: bytes | None
    ) -> None:
        future = self._futures.pop(bytes(subject).rsplit(b".", 1)[-1], None)
        if future is not None and not future.done():
            future.set_result(bytes(data))


class AtomicBatchSender:
    """Sends one session's batches over the connection and awaits their commit acks.

    The first message of each batch carries ``Nats-Expected-Last-Subject-Sequence``,
    so of several attempts of the same batch at most one can ever commit: a re-send
    after a lost commit ack fails the check, and the caller then reads the subject
    back to learn whether the stored batch is its own. Inside the duplicate window
    the server may instead reject such a re-send as a whole because it repeats
    stored msg ids (10201); the caller treats both the same.
    """

    def __init__(
        self,
        conn: Connection,
        subject: str,
        producer_id: str,
        options: PublisherOptions,
        position_header: str,
        producer_header: str,
    ) -> None:
        self.conn = conn
        self.subject = subject
        self._subject_bytes = check_subject(subject)
        self.producer_id = producer_id
        self.options = options
        self._pos_header = position_header
        self._producer_header = producer_header
        self._replies = Replies(conn)
        self.attempts = 0

    async def start(self) -> None:
        """Subscribe to the commit-ack inbox."""
        await self._replies.start()

    async def close(self) -> None:
        """Unsubscribe; outstanding waits fail."""
        await self._replies.close()

    def _frames(self, records: list[BatchRecord], expected_seq: int, reply: bytes) -> bytes:
        headers: list[HeaderValues | None] = []
        for position, _data, extra in records:
            own = {self._pos_header: str(position), self._producer_header: self.producer_id}
            headers.append({**extra, **own} if extra else own)
        stream = self.options.stream
        return batch_frames(
            secrets.token_hex(16),
            [self._subject_bytes] * len(records),
            [data for _position, data, _extra in records],
            [f"{self.producer_id}:{position}" for position, _data, _extra in records],
            headers,
            reply,
            expect={EXPECTED_STREAM: stream} if stream is not None else {},
            first={EXPECTED_LAST_SUBJECT_SEQ: str(expected_seq)},
        )

    async def send(self, records: list[BatchRecord], expected_seq: int) -> int:
        """Store ``records`` atomically after ``expected_seq``; return the last stream sequence.

        An attempt without a commit ack, or answered "no responders" (503: the
        stream has no leader), is sent again after the backoff, up to
        ``max_attempts``; a 503 waits out the ack timeout first, as a lost ack
        would, so an election gets the whole retry horizon. The sequence check
        keeps every re-send safe (see the class docstring).

        Raises:
            WrongLastSequence: the subject's last message is not ``expected_seq``
                (another writer, or an earlier attempt of this batch committed).
            JetStreamError: err_code 10201, the batch repeats stored msg ids (same
                two causes, inside the duplicate window).
            JetStreamError: any other rejection.
            StreamNotFound: answered 503 and the server lists no stream that
                captures the subject (or the target stream does not, or is gone).
            PublishFailed: no commit ack after ``max_attempts`` attempts (its
                ``__cause__`` a transient :class:`NoResponders` when the last was
                answered 503 by a stream that exists or may exist).
        """
        opts = self.options
        attempt = 0
        # Whose leader did not answer the last attempt, when a 503 did (empty: a timeout).
        unheard: list[str] = []

        async def once() -> int:
            nonlocal attempt
            attempt += 1
            self.attempts += 1
            unheard.clear()
            reply, future = self._replies.expect()
            payload = self._frames(records, expected_seq, reply)
            try:
                await self.conn.send_frames(payload, what=f"batch publish to {self.subject!r}")
            except Exception:
                self._replies.forget(reply)
                raise
            try:
                async with asyncio.timeout(opts.ack_timeout):
                    data = await future
            except TimeoutError:
                self._replies.forget(reply)
                log.debug("no commit ack for a batch on %s (attempt %d)", self.subject, attempt)
                raise _NoCommitAck from None
            if not data:  # 503: this attempt reached no stream, so it committed nothing
                unheard.append(await self._no_responders(attempt))
                raise _NoCommitAck
            seq, count = commit_result(data, self.subject)
            if count != len(records):
                raise JetStreamError(f"batch commit stored {count} of {len(records)}")
            return seq

        with contextlib.suppress(_NoCommitAck):
            return await retrying(
                once,
                budget=None,
                what=f"batch publish to {self.subject!r}",
                attempts=opts.max_attempts,
                retry_if=lambda exc: isinstance(exc, _NoCommitAck),
                delay=lambda retry: opts.backoff(retry + 2),  # before attempt 2, 3 ...
                log_retries=False,
            )
        first, last = records[0][0], records[-1][0]
        why = f', the last answered "no responders": {unheard[0]}' if unheard else ""
        error = PublishFailed(
            f"no commit ack for positions {first}..{last} on {self.subject!r} after "
            f"{opts.max_attempts} attempts{why}; restart the session (start() reads what is "
            "stored)",
            msg_id=f"{self.producer_id}:{last}",
            attempts=opts.max_attempts,
        )
        if unheard:
            raise error from no_leader_cause(self.subject, opts.max_attempts)
        raise error

    async def _no_responders(self, attempt: int) -> str:
        """After attempt ``attempt`` was answered 503: wait to send again, or say why not.

        At the first attempt and the last the server is asked which stream captures
        the subject; the others wait out the ack timeout (an election takes seconds).

        Returns:
            At the last attempt, whose leader did not answer (else "").

        Raises:
            StreamNotFound: no stream (the target, when streams cannot be listed)
                captures the subject.
        """
        opts = self.options
        if attempt == 1 or attempt >= opts.max_attempts:
            found = await look_up(self.conn, self.subject, opts.stream, opts.ack_timeout)
            if found.missing:
                raise found.not_found(attempt)
            if attempt >= opts.max_attempts:
                return found.leaderless()
        await asyncio.sleep(opts.ack_timeout)
        return ""
