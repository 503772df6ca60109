"""Atomic batches for producer sessions (JetStream atomic batch publish, nats-server >= 2.12).

A batch is up to 1000 messages sent back to back; only the last one
(``Nats-Batch-Commit: 1``) carries a reply subject, and the server stores
all of them or none. The first message carries
``Nats-Expected-Last-Subject-Sequence``, so of several attempts of the same
batch at most one can ever commit: a re-send after a lost commit ack fails
the check, and the caller then reads the subject back to learn whether the
stored batch is its own. Inside the duplicate window the server may instead
reject such a re-send as a whole because it repeats stored msg ids
(err_code 10201, seen on nats-server 2.15); the caller treats both the same.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Mapping

import orjson

from .._connection import Connection
from .._errors import JetStreamError, NoResponders, PublishFailed, jetstream_error
from .._headers import (
    BATCH_COMMIT,
    BATCH_ID,
    BATCH_SEQ,
    EXPECTED_LAST_SUBJECT_SEQ,
    EXPECTED_STREAM,
    build_block,
)
from .._nats import FrameSubscription
from ._frames import check_subject
from ._options import PublisherOptions

__all__ = ["ERR_BATCH_DUPLICATE_MSG_ID", "MAX_BATCH", "AtomicBatchSender", "BatchRecord"]

log = logging.getLogger("oncestream.producer")

MAX_BATCH = 1000
# "atomic publish batch contains duplicate message id"
ERR_BATCH_DUPLICATE_MSG_ID = 10201

BatchRecord = tuple[int, bytes, "Mapping[str, str] | None"]


class AtomicBatchSender:
    """Sends one session's batches over the connection and awaits their commit acks."""

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
        self._inbox = ""
        self._sub: FrameSubscription | None = None
        self._futures: dict[str, asyncio.Future[bytes]] = {}
        self._token = 0
        self.attempts = 0

    async def start(self) -> None:
        """Subscribe to the commit-ack inbox."""
        if self._sub is not None:
            return
        self._inbox = self.conn.new_inbox()
        self._sub = await self.conn.subscribe_frames(self._inbox + ".*", self._on_reply)

    async def close(self) -> None:
        """Unsubscribe; outstanding waits fail."""
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None

    def _on_reply(
        self, subject: bytes, _reply: bytes, data: bytes | bytearray, _headers: bytes | None
    ) -> None:
        future = self._futures.pop(bytes(subject).rsplit(b".", 1)[-1].decode(), None)
        if future is not None and not future.done():
            future.set_result(bytes(data))

    def _frames(self, records: list[BatchRecord], expected_seq: int, reply: str) -> bytes:
        batch_id = secrets.token_hex(16)
        frames = []
        last = len(records)
        for index, (position, data, headers) in enumerate(records, start=1):
            expect = {BATCH_ID: batch_id, BATCH_SEQ: str(index)}
            if self.options.stream is not None:
                expect[EXPECTED_STREAM] = self.options.stream
            if index == 1:
                expect[EXPECTED_LAST_SUBJECT_SEQ] = str(expected_seq)
            if index == last:
                expect[BATCH_COMMIT] = "1"
            extra = {self._pos_header: str(position), self._producer_header: self.producer_id}
            if headers:
                extra = {**headers, **extra}
            hdr = build_block(f"{self.producer_id}:{position}", extra, expect)
            target = b"%b %b" % (self._subject_bytes, reply.encode()) if index == last else None
            frames.append(
                b"HPUB %b %d %d\r\n%b%b\r\n"
                % (target or self._subject_bytes, len(hdr), len(hdr) + len(data), hdr, data)
            )
        return b"".join(frames)

    async def send(self, records: list[BatchRecord], expected_seq: int) -> int:
        """Store ``records`` atomically after ``expected_seq``; return the last stream sequence.

        Raises:
            WrongLastSequence: the subject's last message is not ``expected_seq``
                (another writer, or an earlier attempt of this batch committed).
            JetStreamError: err_code 10201, the batch repeats stored msg ids (same
                two causes, inside the duplicate window).
            JetStreamError: any other rejection.
            PublishFailed: no commit ack after ``max_attempts`` attempts.
        """
        opts = self.options
        for attempt in range(1, opts.max_attempts + 1):
            if attempt > 1:
                await asyncio.sleep(opts.backoff(attempt))
            self.attempts += 1
            self._token += 1
            token = str(self._token)
            future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
            self._futures[token] = future
            payload = self._frames(records, expected_seq, f"{self._inbox}.{token}")
            try:
                await self.conn.send_frames(payload, what=f"batch publish to {self.subject!r}")
            except Exception:
                self._futures.pop(token, None)
                raise
            try:
                async with asyncio.timeout(opts.ack_timeout):
                    data = await future
            except TimeoutError:
                self._futures.pop(token, None)
                log.debug("no commit ack for a batch on %s (attempt %d)", self.subject, attempt)
                continue
            if not data:
                # Only the 503 no-responders status comes without a JSON body.
                raise NoResponders(f"no stream listens on subject {self.subject!r}")
            try:
                response = orjson.loads(data)
            except orjson.JSONDecodeError as exc:
                raise JetStreamError(f"malformed batch commit ack: {data!r}") from exc
            if "error" in response:
                raise jetstream_error(response["error"])
            if int(response.get("count", -1)) != len(records):
                raise JetStreamError(
                    f"batch commit stored {response.get('count')} of {len(records)}"
                )
            return int(response["seq"])
        first, last = records[0][0], records[-1][0]
        raise PublishFailed(
            f"no commit ack for positions {first}..{last} on {self.subject!r} after "
            f"{opts.max_attempts} attempts; restart the session (start() reads what is stored)",
            msg_id=f"{self.producer_id}:{last}",
            attempts=opts.max_attempts,
        )
