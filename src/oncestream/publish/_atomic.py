"""Rows in atomic batches, pipelined, each stored exactly once without the duplicate window.

The Spark sink's ``ingest=atomic``. What the server does with atomic batches,
and why a publish sent after a batch on the same connection is processed
after it, is in :mod:`oncestream.publish._batch`. See :class:`AtomicPublisher`.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from .._connection import Connection
from .._errors import ConfigError, JetStreamError, PublishFailed
from .._headers import (
    EXPECTED_STREAM,
    HeaderValues,
    check_msg_id,
    check_user_headers,
    is_clean_msg_id,
)
from ..read import stored_ids
from ._batch import (
    ERR_BATCH_DUPLICATE_MSG_ID,
    MAX_BATCH,
    Replies,
    batch_frames,
    check_atomic,
    commit_result,
    probe_frame,
    settles,
)
from ._fast_ingest import ERR_TOO_MANY_REQUESTS
from ._frames import check_single_values, check_subject
from ._options import PublisherOptions

__all__ = ["MAX_INFLIGHT_BATCHES", "AtomicPublisher", "AtomicStats"]

log = logging.getLogger("oncestream.publisher")

#: Batches one AtomicPublisher keeps awaiting their commit acks. The server stages at
#: most 50 per stream, shared by every writer (two tasks x 8 leaves room for others).
MAX_INFLIGHT_BATCHES = 8

#: "duplicate message id is in process" (clustered: an id proposed, not yet applied).
ERR_DUPLICATE_IN_PROCESS = 10158
#: "atomic publish batch is incomplete": not stored (a gap, abandoned after the batch
#: timeout, or its first message dropped because too many batches were in flight).
ERR_BATCH_INCOMPLETE = 10176
ERR_BATCH_TOO_LARGE = 10199
ERR_ATOMIC_TOO_MANY_INFLIGHT = 10210
#: Refusals that say the batch was not stored: sending it again is safe.
_NOT_STORED = frozenset(
    {
        ERR_BATCH_INCOMPLETE,
        ERR_ATOMIC_TOO_MANY_INFLIGHT,
        ERR_TOO_MANY_REQUESTS,
        ERR_DUPLICATE_IN_PROCESS,
    }
)


@dataclass
class AtomicStats:
    """What an :class:`AtomicPublisher` did; rows unless named otherwise.

    Attributes:
        stored: rows its batches stored (acknowledged, or found after a lost ack).
        duplicates: rows the stream already held (10201) and kept once.
        max_seq: the highest stream sequence a commit ack named.
        batches: commit acks received.
        lost_acks: batches without a commit ack within ``ack_timeout``.
        read_backs: reads of the stream's msg ids after a lost ack or a 10201.
        resent: batches sent again (refused as not stored, or read back as absent).
    """

    stored: int = 0
    duplicates: int = 0
    max_seq: int = 0
    batches: int = 0
    lost_acks: int = 0
    read_backs: int = 0
    resent: int = 0


class _Chunk:
    """Rows that go out as one atomic batch, and the stream sequence they land after."""

    __slots__ = ("datas", "floor", "headers", "ids", "subjects")

    def __init__(
        self,
        subjects: Sequence[bytes],
        datas: Sequence[bytes],
        ids: Sequence[str],
        headers: Sequence[HeaderValues | None] | None,
        floor: int = 0,
    ) -> None:
        self.subjects, self.datas, self.ids, self.headers = subjects, datas, ids, headers
        #: The stream's last sequence known before the chunk was first sent: whatever of
        #: it the stream stores lies after it.
        self.floor = floor

    def __len__(self) -> int:
        return len(self.ids)

    def without(self, found: set[str]) -> _Chunk:
        """The rows whose msg id is not in ``found``."""
        keep = [i for i, msg_id in enumerate(self.ids) if msg_id not in found]
        heads = self.headers
        return _Chunk(
            [self.subjects[i] for i in keep],
            [self.datas[i] for i in keep],
            [self.ids[i] for i in keep],
            None if heads is None else [heads[i] for i in keep],
            self.floor,
        )

    def singles(self) -> list[_Chunk]:
        """One chunk per row."""
        heads = self.headers
        return [
            _Chunk(
                self.subjects[i : i + 1],
                self.datas[i : i + 1],
                self.ids[i : i + 1],
                None if heads is None else heads[i : i + 1],
                self.floor,
            )
            for i in range(len(self.ids))
        ]


class AtomicPublisher:
    """Publishes rows as atomic batches ("chunks"), several in flight; each stored exactly once.

    Every row keeps its msg id; the first row of each chunk carries
    ``Nats-Expected-Stream`` (a chunk commits only in the stream that staged
    all its rows, so that check covers every row). A chunk is stored whole or
    not at all, so its fate is one fact, and no chunk is sent again while that
    fact is unknown:

    - a commit ack with the chunk's count: stored (another count fails with
      :class:`JetStreamError`);
    - no commit ack within ``ack_timeout``: a *settle probe* (a publish to the
      chunk's last subject that every stream refuses, 10060) goes out on the same
      connection. The stream answers it only after processing everything sent
      before it, the chunk's commit message included, and sends replies in order:
      a commit ack that exists has arrived by then. Without one (lost with a
      connection, or the batch never reached the server), the chunk's msg ids are
      read back from the stream after the chunk's floor (its last sequence known
      before the chunk was sent): found, the chunk was stored; absent, it was not
      and never will be, and it is sent again as a new batch. Nothing here
      depends on the stream's duplicate window;
    - 10201 (a msg id the stream already holds): the ids are read back; rows found
      after the floor count as duplicates, the rest is sent again. When none is
      found (the repeated ids are older than the floor: another writer, inside the
      window), the rows go one per batch, where a 10201 names its row;
    - 10176 (incomplete: abandoned, too many batches in flight), 10210, 10167,
      10158: not stored; sent again after the backoff;
    - any other refusal fails with its typed error.

    Args:
        conn: an open connection.
        options: ``stream`` (required: the target), ``ack_timeout``,
            ``max_attempts`` (sends per chunk, and settle probes per lost ack) and
            ``retry_backoff``; the other fields do not apply.
        chunk_size: rows per batch, 1..1000 (a server's
            ``jetstream.limits.max_batch_size`` may allow fewer: 10199).
        max_inflight: batches awaiting their commit ack at once, 1..8 (the server
            stages at most 50 per stream for all its writers).

    Raises:
        ConfigError: no ``stream``, or a bad ``chunk_size`` / ``max_inflight``.

    Example::

        async with AtomicPublisher(conn, PublisherOptions(stream="OUT")) as pub:
            await pub.publish(["out.a", "out.b"], [b"1", b"2"], ["id-1", "id-2"])
        print(pub.stats.stored)  # after the with block: flushed
    """

    def __init__(
        self,
        conn: Connection,
        options: PublisherOptions,
        *,
        chunk_size: int = MAX_BATCH,
        max_inflight: int = 4,
    ) -> None:
        if options.stream is None:
            raise ConfigError("an AtomicPublisher needs options.stream (the target stream)")
        if isinstance(chunk_size, bool) or not 1 <= chunk_size <= MAX_BATCH:
            raise ConfigError(f"chunk_size must be 1..{MAX_BATCH}, got {chunk_size!r}")
        if isinstance(max_inflight, bool) or not 1 <= max_inflight <= MAX_INFLIGHT_BATCHES:
            raise ConfigError(
                f"max_inflight must be 1..{MAX_INFLIGHT_BATCHES}, got {max_inflight!r}"
            )
        self.conn = conn
        self.options = options
        self.stream: str = options.stream
        self.chunk_size = chunk_size
        self.stats = AtomicStats()
        # On the first message only: a batch commits only in the stream that staged all its
        # messages, message 1 included, and the commit checks message 1's header there.
        # (Stored with every message, the header cost 29 more bytes per row in the store.)
        self._first = {EXPECTED_STREAM: options.stream}
        self._replies = Replies(conn)
        self._slots = asyncio.Semaphore(max_inflight)
        self._tasks: set[asyncio.Task[None]] = set()
        self._subjects: dict[str, bytes] = {}
        self._error: BaseException | None = None
        self._seen = 0  # the highest stream sequence known stored
        self._max_payload = 0
        self._started = False

    async def start(self) -> None:
        """Check the stream allows atomic batches and note its last sequence.

        Raises:
            StreamNotFound: the stream does not exist.
            ConfigError: it does not set ``allow_atomic``, or the server is older than 2.12.
        """
        if self._started:
            return
        info = await self.conn.stream_info(self.stream)
        check_atomic("atomic batches", self.stream, info.get("config") or {}, self.conn)
        self._seen = int(info["state"].get("last_seq", 0))
        self._max_payload = self.conn.max_payload
        await self._replies.start()
        self._started = True

    async def publish(
        self,
        subjects: Sequence[str],
        datas: Sequence[bytes],
        ids: Sequence[str],
        headers: Sequence[HeaderValues | None] | None = None,
    ) -> None:
        """Send the rows in chunks of ``chunk_size``; waits while ``max_inflight`` are open.

        Errors of chunks sent earlier are raised here as soon as they are known,
        and by :meth:`flush`.

        Raises:
            ConfigError: an unclean msg id, a refused header, a bad subject.
            MessageTooLarge: a row above the server's max_payload.
        """
        if not self._started:
            await self.start()
        self._raise_failed()
        size = self.chunk_size
        for start in range(0, len(ids), size):
            end = start + size
            chunk = _Chunk(
                [self._subject(s) for s in subjects[start:end]],
                datas[start:end],
                ids[start:end],
                None if headers is None else headers[start:end],
            )
            self._check(chunk)
            await self._slots.acquire()
            try:
                self._raise_failed()
                chunk.floor = self._seen
                sent = await self._send(chunk)
            except BaseException:
                self._slots.release()
                raise
            task = asyncio.create_task(self._confirm(chunk, sent))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def flush(self) -> AtomicStats:
        """Wait until every chunk is settled; return the counters.

        Raises:
            The first chunk's error: its typed :class:`JetStreamError`, or
            :class:`PublishFailed` when the stream did not answer (the chunk's
            fate is unknown: a later reader must look).
        """
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._raise_failed()
        return self.stats

    async def close(self) -> None:
        """Stop waiting for outstanding chunks (their fate stays unknown) and unsubscribe."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._replies.close()

    async def __aenter__(self) -> AtomicPublisher:
        await self.start()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        try:
            if kind is None:
                await self.flush()
        finally:
            await self.close()

    # -- internals

    def _subject(self, subject: str) -> bytes:
        encoded = self._subjects.get(subject)
        if encoded is None:
            encoded = self._subjects[subject] = check_subject(subject)
        return encoded

    def _check(self, chunk: _Chunk) -> None:
        for msg_id in chunk.ids:
            if not is_clean_msg_id(msg_id):
                check_msg_id(msg_id)
        for extra in chunk.headers or ():
            if extra:
                check_user_headers(extra)
                if not self.conn.multi_value_headers:
                    check_single_values(extra)

    def _raise_failed(self) -> None:
        if self._error is not None:
            raise self._error

    async def _send(self, chunk: _Chunk) -> tuple[bytes, asyncio.Future[bytes]]:
        reply, future = self._replies.expect()
        try:
            frames = batch_frames(
                secrets.token_hex(8),
                chunk.subjects,
                chunk.datas,
                chunk.ids,
                chunk.headers,
                reply,
                expect={},
                first=self._first,
                max_payload=self._max_payload,
            )
            await self.conn.send_frames(frames, what=f"atomic batch to stream {self.stream!r}")
        except BaseException:
            self._replies.forget(reply)
            raise
        return reply, future

    async def _confirm(self, chunk: _Chunk, sent: tuple[bytes, asyncio.Future[bytes]]) -> None:
        try:
            await self._settle_chunk(chunk, sent)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            if self._error is None:
                self._error = exc
        finally:
            self._slots.release()

    async def _settle_chunk(self, chunk: _Chunk, sent: tuple[bytes, asyncio.Future[bytes]]) -> None:
        """Wait for the chunk's commit; on anything else, learn its fate before re-sending."""
        opts = self.options
        attempt = 1
        while True:
            reply, future = sent
            try:
                async with asyncio.timeout(opts.ack_timeout):
                    data = await asyncio.shield(future)
            except TimeoutError:
                self.stats.lost_acks += 1
                log.debug(
                    "no commit ack within %gs for %d rows: settling", opts.ack_timeout, len(chunk)
                )
                await self._settle(chunk)
                self._replies.forget(reply)
                if not future.done():
                    found = await self._read_back(chunk)
                    self.stats.stored += len(found)
                    chunk = chunk.without(found)
                    if not chunk:
                        return
                    attempt = self._next_attempt(chunk, attempt)
                    sent = await self._resend(chunk)
                    continue
                data = future.result()  # the late commit ack, which came before the probe's
            try:
                seq, count = commit_result(data, self.stream)
            except JetStreamError as exc:
                if exc.err_code == ERR_BATCH_DUPLICATE_MSG_ID:
                    rest = await self._duplicates(chunk)
                    if rest is None:
                        return
                    chunk = rest
                elif exc.err_code in _NOT_STORED:
                    await asyncio.sleep(opts.backoff(attempt + 1))
                elif exc.err_code == ERR_BATCH_TOO_LARGE:
                    exc.add_note(
                        f"the server allows fewer than {len(chunk)} messages per atomic "
                        "batch (jetstream.limits.max_batch_size): lower the chunk size"
                    )
                    raise
                else:
                    raise
                attempt = self._next_attempt(chunk, attempt)
                sent = await self._resend(chunk)
                continue
            if count != len(chunk):
                raise JetStreamError(
                    f"atomic batch commit to stream {self.stream!r} stored {count} of "
                    f"{len(chunk)} messages"
                )
            stats = self.stats
            stats.stored += count
            stats.batches += 1
            if seq > stats.max_seq:
                stats.max_seq = seq
            if seq > self._seen:
                self._seen = seq
            return

    def _next_attempt(self, chunk: _Chunk, attempt: int) -> int:
        if attempt >= self.options.max_attempts:
            raise PublishFailed(
                f"{len(chunk)} rows to stream {self.stream!r} (msg ids {chunk.ids[0]!r}.."
                f"{chunk.ids[-1]!r}) were not stored after {attempt} atomic batches",
                msg_id=chunk.ids[0],
                attempts=attempt,
            )
        return attempt + 1

    async def _resend(self, chunk: _Chunk) -> tuple[bytes, asyncio.Future[bytes]]:
        self.stats.resent += 1
        return await self._send(chunk)

    async def _duplicates(self, chunk: _Chunk) -> _Chunk | None:
        """After a 10201: the rows still to send as one batch, or None when done."""
        if len(chunk) == 1:  # refused for its one msg id: the stream holds that row
            self.stats.duplicates += 1
            return None
        found = await self._read_back(chunk)
        self.stats.duplicates += len(found)
        rest = chunk.without(found)
        if not rest:
            return None
        if len(rest) < len(chunk):
            return rest
        # The repeated ids were stored before the floor, by another writer inside the
        # window; without reading the whole window, one row per batch tells which.
        sent = [(one, await self._send(one)) for one in rest.singles()]
        results = await asyncio.gather(
            *(self._settle_chunk(one, pending) for one, pending in sent), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return None

    async def _settle(self, chunk: _Chunk) -> None:
        """Return once the stream has processed everything this connection sent before.

        Raises:
            PublishFailed: no probe was answered within ``max_attempts`` x
                ``ack_timeout`` (the server or stream is not processing: the
                chunk's fate is unknown).
        """
        opts = self.options
        subject = chunk.subjects[-1]
        loop = asyncio.get_running_loop()
        answered: asyncio.Future[bytes] = loop.create_future()
        replies: list[bytes] = []
        try:
            for attempt in range(1, opts.max_attempts + 1):
                if answered.done():  # a probe dropped by a full ingest queue (10167)
                    await asyncio.sleep(opts.backoff(attempt))
                    answered = loop.create_future()
                # Earlier probes resolve the same future: any answer settles.
                reply, _ = self._replies.expect(answered)
                replies.append(reply)
                frame = probe_frame(subject, reply)
                await self.conn.send_frames(frame, what=f"settle probe to {self.stream!r}")
                try:
                    async with asyncio.timeout(opts.ack_timeout):
                        data = await asyncio.shield(answered)
                except TimeoutError:
                    continue
                if settles(data):
                    return
        finally:
            for reply in replies:
                self._replies.forget(reply)
        raise PublishFailed(
            f"stream {self.stream!r} did not process a settle probe within "
            f"{opts.max_attempts} x {opts.ack_timeout:g}s after an atomic batch of "
            f"{len(chunk)} rows got no commit ack: whether the batch is stored is unknown",
            msg_id=chunk.ids[0],
            attempts=opts.max_attempts,
        )

    async def _read_back(self, chunk: _Chunk) -> set[str]:
        """The chunk's msg ids the stream holds after the chunk's floor."""
        self.stats.read_backs += 1
        stored = await stored_ids(self.conn, self.stream, chunk.floor)
        return {msg_id for msg_id in chunk.ids if msg_id in stored}
