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
from .._errors import (
    ConfigError,
    ErrCode,
    JetStreamError,
    NoResponders,
    PublishFailed,
)
from .._headers import (
    EXPECTED_STREAM,
    HeaderValues,
    build_block,
    check_msg_id,
    check_user_headers,
    is_clean_msg_id,
)
from ..read import stored_ids
from ._batch import (
    MAX_BATCH,
    Replies,
    ack_response,
    batch_frames,
    check_atomic,
    commit_result,
    probe_frame,
    settles,
)
from ._duplicates import DuplicateFinder
from ._frames import check_single_values, check_subject, too_large
from ._noresponders import look_up, no_leader_cause
from ._options import PublisherOptions

__all__ = ["MAX_INFLIGHT_BATCHES", "AtomicPublisher", "AtomicStats"]

log = logging.getLogger(__name__)

#: Batches one AtomicPublisher keeps awaiting their commit acks. The server stages a
#: connection's batches one at a time (the stream takes its messages in order, and a
#: commit closes a batch before the next one's first message opens one), so these
#: hold one of the 50 it stages per stream (jetstream.limits.batch.max_inflight_per_stream).
MAX_INFLIGHT_BATCHES = 8

#: Refusals that say the batch was not stored: sending it again is safe. Incomplete: a
#: gap, abandoned after the batch timeout, or its first message dropped because too
#: many batches were in flight; a duplicate id in process (clustered: an id proposed,
#: not yet applied).
_NOT_STORED = frozenset(
    {
        ErrCode.ATOMIC_INCOMPLETE_BATCH,
        ErrCode.ATOMIC_TOO_MANY_INFLIGHT,
        ErrCode.TOO_MANY_REQUESTS,
        ErrCode.DUPLICATE_MESSAGE_CONFLICT,
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
        singles: rows sent one by one, as plain publishes with their msg ids, after
            a 10201 the stream's messages did not explain (ids whose messages are
            gone: purged, deleted, taken by a work queue; or stored meanwhile).
    """

    stored: int = 0
    duplicates: int = 0
    max_seq: int = 0
    batches: int = 0
    lost_acks: int = 0
    read_backs: int = 0
    resent: int = 0
    singles: int = 0


def _puback(data: bytes, subject: str) -> tuple[int, bool]:
    """``(seq, duplicate)`` of the PubAck of a plain publish to ``subject``.

    Raises:
        NoResponders: the publish reached no stream (503): it is not stored.
        JetStreamError: the typed refusal (err_code kept), or a malformed ack.
    """
    response = ack_response(data, subject, "PubAck")
    if "seq" not in response:
        raise JetStreamError(f"malformed PubAck: {data!r}")
    return int(response["seq"]), bool(response.get("duplicate"))


class _Chunk:
    """Rows that go out as one atomic batch, and the stream sequence they land after."""

    __slots__ = ("datas", "floor", "headers", "ids", "searched", "subjects")

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
        #: The stream was searched for the chunk's ids after a 10201.
        self.searched = False

    def __len__(self) -> int:
        return len(self.ids)

    def rows(self, keep: Sequence[int]) -> _Chunk:
        """The rows at the positions ``keep``."""
        heads = self.headers
        chunk = _Chunk(
            [self.subjects[i] for i in keep],
            [self.datas[i] for i in keep],
            [self.ids[i] for i in keep],
            None if heads is None else [heads[i] for i in keep],
            self.floor,
        )
        chunk.searched = self.searched
        return chunk

    def without(self, found: set[str]) -> _Chunk:
        """The rows whose msg id is not in ``found``."""
        return self.rows([i for i, msg_id in enumerate(self.ids) if msg_id not in found])

    def first_of_each_id(self) -> _Chunk:
        """The chunk without rows that repeat an earlier row's msg id (itself when none)."""
        if len(set(self.ids)) == len(self.ids):
            return self
        seen: set[str] = set()
        keep: list[int] = []
        for i, msg_id in enumerate(self.ids):
            if msg_id not in seen:
                seen.add(msg_id)
                keep.append(i)
        return self.rows(keep)


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
    - 10201 (a msg id the stream already holds, whoever stored it): the stream is
      searched for the chunk's ids (:class:`~oncestream.publish._duplicates.DuplicateFinder`:
      a re-run reads about one message per row); those found count as duplicates
      and the rest is sent again as one batch. Rows the search cannot explain (a
      chunk refused with none of its ids found, or refused again after its
      search) go out one by one as plain publishes, whose PubAck says
      ``duplicate`` per row;
    - 10176 (incomplete: abandoned, too many batches in flight), 10210, 10167,
      10158: not stored; sent again after the backoff;
    - "no responders" (503: the commit reached no stream, so the chunk is not
      stored): sent again after the ack timeout and the backoff, as long as the
      stream is without a leader, up to ``max_attempts``; then
      :class:`PublishFailed` (its ``__cause__`` a transient
      :class:`NoResponders`), or :class:`StreamNotFound` when the server lists no
      stream that captures the subject. A settle probe answered 503 settles
      nothing (the old leader may have committed the chunk): it is sent again
      until a leader answers it;
    - any other refusal fails with its typed error.

    Args:
        conn: an open connection.
        options: ``stream`` (required: the target), ``ack_timeout``,
            ``max_attempts`` (sends per chunk, and settle probes per lost ack) and
            ``retry_backoff``; the other fields do not apply.
        chunk_size: rows per batch, 1..1000 (a server's
            ``jetstream.limits.max_batch_size`` may allow fewer: 10199).
        max_inflight: batches awaiting their commit ack at once, 1..8 (the server
            stages one of them at a time, see :data:`MAX_INFLIGHT_BATCHES`).

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
        self._finder: DuplicateFinder | None = None
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
        config = info.get("config") or {}
        check_atomic("atomic batches", self.stream, config, self.conn)
        self._seen = int(info["state"].get("last_seq", 0))
        self._finder = DuplicateFinder(
            self.conn,
            self.stream,
            window=int(config.get("duplicate_window") or 0) / 1e9,
            direct=bool(config.get("allow_direct")),
            replicated=int(config.get("num_replicas") or 1) > 1,
            retry_timeout=self.options.ack_timeout,
        )
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
                seq, count = commit_result(data, chunk.subjects[-1].decode())
            except JetStreamError as exc:
                if exc.err_code == ErrCode.ATOMIC_DUPLICATE_MESSAGE:
                    rest = await self._duplicates(chunk)
                    if rest is None:
                        return
                    chunk = rest
                elif isinstance(exc, NoResponders):  # the commit reached no stream
                    await self._unheard(chunk, attempt)
                    await asyncio.sleep(opts.backoff(attempt + 1))
                elif exc.err_code in _NOT_STORED:
                    await asyncio.sleep(opts.backoff(attempt + 1))
                elif exc.err_code == ErrCode.ATOMIC_TOO_LARGE_BATCH:
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

    async def _unheard(self, chunk: _Chunk, attempt: int) -> None:
        """After attempt ``attempt`` of ``chunk`` reached no stream (503): wait, or raise.

        Not stored, so sending it again is safe. The server is asked which stream
        captures the subject at the first attempt and at the last; the others wait
        out the ack timeout (an election takes seconds).

        Raises:
            StreamNotFound: no stream (the target, when streams cannot be listed)
                captures the subject.
            PublishFailed: the last attempt, and a stream that captures it or no answer.
        """
        opts = self.options
        last = attempt >= opts.max_attempts
        if attempt == 1 or last:
            subject = chunk.subjects[-1].decode()
            found = await look_up(self.conn, subject, self.stream, opts.ack_timeout)
            if found.missing:
                raise found.not_found(attempt)
            if last:
                raise PublishFailed(
                    f"{len(chunk)} rows to stream {self.stream!r} (msg ids {chunk.ids[0]!r}.."
                    f"{chunk.ids[-1]!r}) were not stored after {attempt} atomic batches, "
                    f'the last answered "no responders" on {subject!r}: '
                    f"{found.leaderless()}; the stream may be between "
                    "leaders or too few of its servers up. None of these rows is stored: send them "
                    "again",
                    msg_id=chunk.ids[0],
                    attempts=attempt,
                ) from no_leader_cause(subject, attempt)
        await asyncio.sleep(opts.ack_timeout)

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
        """After a 10201: the rows still to send as one batch, or None when settled.

        The refusal does not say which msg id the stream holds (see
        :mod:`oncestream.publish._duplicates`). Rows repeating an id of the chunk
        are dropped (the server refuses those too); then the stream is searched for
        the chunk's ids, whoever stored them: the ids found are duplicates, the
        rest goes out again as one batch. Rows the search cannot explain go out one
        by one (:meth:`_one_by_one`).
        """
        unique = chunk.first_of_each_id()
        if len(unique) < len(chunk):  # the repeats alone may explain the refusal
            self.stats.duplicates += len(chunk) - len(unique)
            return unique
        if len(chunk) == 1:  # refused for its one msg id: the stream holds that row
            self.stats.duplicates += 1
            return None
        if not chunk.searched:
            assert self._finder is not None  # set by start()
            self.stats.read_backs += 1
            found = await self._finder.find(chunk.ids)
            self.stats.duplicates += len(found)
            chunk = chunk.without(found)
            chunk.searched = True
            if found:
                return chunk or None
        await self._one_by_one(chunk)
        return None

    async def _one_by_one(self, chunk: _Chunk) -> None:
        """Publish the chunk's rows as single messages with their msg ids, all at once.

        For ids the stream refuses as stored but no read finds: their messages are
        gone (purged, deleted, taken by a work queue) while the ids stay in the
        window, or another writer stored them just after the search. A PubAck says
        ``duplicate`` per row. Smaller batches could say the same only a batch per
        row, and the server opens a batch store for each (on a file stream, halving
        down to single rows re-ran 10^4 duplicates at 188 rows/s). Every row
        carries ``Nats-Expected-Stream``. An unanswered row is settled like a chunk
        (probe, then read back after the floor), and only a row not found is sent
        again.
        """
        opts = self.options
        stats = self.stats
        expect = {EXPECTED_STREAM: self.stream}
        attempt = 1
        while True:
            stats.singles += len(chunk)
            heads = chunk.headers
            waiting: list[tuple[int, bytes, asyncio.Future[bytes]]] = []
            frames: list[bytes] = []
            try:
                for i, msg_id in enumerate(chunk.ids):
                    reply, future = self._replies.expect()
                    waiting.append((i, reply, future))
                    hdr = build_block(msg_id, heads[i] if heads is not None else None, expect)
                    data = chunk.datas[i]
                    size = len(hdr) + len(data)
                    if self._max_payload and size > self._max_payload:
                        subject = chunk.subjects[i].decode()
                        raise too_large(msg_id, subject, size, self._max_payload)
                    frames.append(
                        b"HPUB %b %b %d %d\r\n%b%b\r\n"
                        % (chunk.subjects[i], reply, len(hdr), size, hdr, data)
                    )
                await self.conn.send_frames(
                    b"".join(frames), what=f"publishes to stream {self.stream!r}"
                )
                futures = [future for _, _, future in waiting]
                done, _ = await asyncio.wait(futures, timeout=opts.ack_timeout)
                if len(done) < len(futures):
                    stats.lost_acks += 1
                    await self._settle(chunk)  # replies sent before the probe's are here now
            finally:
                for _, reply, future in waiting:
                    if not future.done():
                        self._replies.forget(reply)
            again: list[int] = []
            unanswered: list[int] = []
            unheard = False  # a row reached no stream (503: its stream has no leader)
            for i, _, future in waiting:
                if not future.done():
                    unanswered.append(i)
                    continue
                try:
                    seq, duplicate = _puback(future.result(), chunk.subjects[i].decode())
                except NoResponders:  # not stored
                    unheard = True
                    again.append(i)
                    continue
                except JetStreamError as exc:
                    if exc.err_code not in _NOT_STORED:
                        raise
                    again.append(i)
                    continue
                if duplicate:
                    stats.duplicates += 1
                    continue
                stats.stored += 1
                if seq > stats.max_seq:
                    stats.max_seq = seq
                if seq > self._seen:
                    self._seen = seq
            if unanswered:
                lost = chunk.rows(unanswered)
                found = await self._read_back(lost)
                stats.stored += len(found)
                again += [i for i in unanswered if chunk.ids[i] not in found]
            if not again:
                return
            chunk = chunk.rows(sorted(again))
            if unheard:
                await self._unheard(chunk, attempt)
            attempt = self._next_attempt(chunk, attempt)
            await asyncio.sleep(opts.backoff(attempt))

    async def _settle(self, chunk: _Chunk) -> None:
        """Return once the stream has processed everything this connection sent before.

        A probe answered "no responders" (503) reached no stream and settles
        nothing: the stream may have lost its leader after taking the chunk (see
        :mod:`oncestream.publish._batch`). It is sent again an ack timeout later,
        until a leader answers, unless the server lists no stream that captures
        the subject (then none can take the chunk any more: settled).

        Raises:
            PublishFailed: no probe was answered by the stream within ``max_attempts``
                x ``ack_timeout`` (the server or stream is not processing, or has no
                leader: the chunk's fate is unknown).
        """
        opts = self.options
        subject = chunk.subjects[-1]
        loop = asyncio.get_running_loop()
        answered: asyncio.Future[bytes] = loop.create_future()
        replies: list[bytes] = []
        unheard = ""  # whose leader did not answer the last probe, when a 503 did
        asked = False  # the server was asked which stream captures the subject
        try:
            for attempt in range(1, opts.max_attempts + 1):
                if answered.done():  # a probe dropped by a full ingest queue (10167), or a 503
                    await asyncio.sleep(opts.backoff(attempt))
                    answered = loop.create_future()
                # Earlier probes resolve the same future: any answer settles.
                reply, _ = self._replies.expect(answered)
                replies.append(reply)
                frame = probe_frame(subject, reply)
                await self.conn.send_frames(frame, what=f"settle probe to {self.stream!r}")
                unheard = ""
                try:
                    async with asyncio.timeout(opts.ack_timeout):
                        data = await asyncio.shield(answered)
                except TimeoutError:
                    continue
                if settles(data):
                    return
                if data:  # 10167
                    continue
                if not asked or attempt == opts.max_attempts:  # the first 503, the last
                    asked = True
                    found = await look_up(
                        self.conn, subject.decode(), self.stream, opts.ack_timeout
                    )
                    if found.missing:
                        return
                    unheard = found.leaderless()
                if attempt < opts.max_attempts:
                    await asyncio.sleep(opts.ack_timeout)
        finally:
            for reply in replies:
                self._replies.forget(reply)
        error = PublishFailed(
            f"stream {self.stream!r} did not process a settle probe within "
            f"{opts.max_attempts} x {opts.ack_timeout:g}s after an atomic batch of "
            f"{len(chunk)} rows got no commit ack"
            + (f' (the last probe was answered "no responders": {unheard})' if unheard else "")
            + ": whether the batch is stored is unknown",
            msg_id=chunk.ids[0],
            attempts=opts.max_attempts,
        )
        if unheard:
            raise error from no_leader_cause(subject.decode(), opts.max_attempts)
        raise error

    async def _read_back(self, chunk: _Chunk) -> set[str]:
        """The chunk's msg ids the stream holds after the chunk's floor."""
        self.stats.read_backs += 1
        opts = self.options
        # Rides out an election and a replica catching up (both can follow a 503).
        stored = await stored_ids(
            self.conn,
            self.stream,
            chunk.floor,
            retry_timeout=opts.ack_timeout * opts.max_attempts,
            budget_source="PublisherOptions.ack_timeout x max_attempts",
        )
        return {msg_id for msg_id in chunk.ids if msg_id in stored}
