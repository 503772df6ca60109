"""Fast-ingest batches (ADR-50, nats-server >= 2.14): one flow ack per window, not one PubAck each.

A stream with ``allow_batched: true`` accepts a *fast batch*: ordinary
publishes whose reply subject carries the batch state,
``<inbox>F.<batch id>.<flow>.ok.<batch seq>.<op>.$FI``. The server stores each
message as it arrives (a fast batch is not atomic), applies every header
check and the ``Nats-Msg-Id`` de-duplication to each one on its own, and
answers with ``{"type":"ack","seq":S,"msgs":M}`` every M messages: everything
of the batch up to S is stored. The client keeps at most
``MAX_OUTSTANDING_ACKS`` windows outstanding (the server enforces none) and
ends the batch with an empty end-of-batch message (op 3), answered by a
PubAck with ``batch`` and ``count``.

The Publisher sends a message's *first* attempt in the open batch. Anything
the batch does not confirm (a reported gap, a plain error reply, a batch the
server forgot after a restart or its 10 s inactivity timeout, a reconnect, no
flow ack within ``ack_timeout``) is re-sent with the same msg id on the
pipelined-ack path, where the duplicate window de-duplicates it exactly as
any retry. Gap mode ``ok`` keeps the batch going past a lost or refused
message, so one bad message fails alone with its typed error.

What the server confirms is a range, not a sequence per message: a PubAck
resolved by a flow ack has ``seq`` 0 and ``batch`` set, and ``duplicate`` is
False even for a de-duplicated copy. Callers that need each message's
sequence (the CLI's resume record, producer sessions) use ``ingest="acks"``
or per-message ``Nats-Expected-Last-*`` checks, which always take the
pipelined-ack path.
"""

from __future__ import annotations

import logging
import secrets
import time
from bisect import bisect_right
from collections import deque
from itertools import repeat
from operator import itemgetter
from typing import Any, Protocol

import orjson

from .._errors import ErrCode, JetStreamError, jetstream_error
from ..streams._internal import FAST_INGEST_SINCE
from ._frames import AckTally, Pending, frame_msg_id, frame_subject
from ._lanes import Lanes

__all__ = [
    "BATCH_LEVEL_ERRORS",
    "FAST_INGEST_SINCE",
    "FLOW",
    "LINGER",
    "MAX_OUTSTANDING_ACKS",
    "BatchLanes",
    "BatchTable",
    "Counted",
    "FastBatch",
    "FrameTemplates",
    "choose_ingest",
    "control_frame",
    "fast_template",
    "op_of",
    "parse_reply",
    "rereply",
]

log = logging.getLogger(__name__)
_monotonic = time.monotonic

#: The most messages the server may store between two flow acks (the server's own
#: cap for a stream with one fast batch is 500, and 500 / N with N fast batches open).
FLOW = 500
#: Flow windows the client may have outstanding before it waits. ADR-50 advises 1-2,
#: but at 2 (1000 messages) the Publisher stalled on a local server: 10^6 messages ran
#: at 169k msg/s with 2, 188k/182k with 8, 180k with 16 (acks path: 159k). A full
#: ingest queue drops a message with 10167, which the ack path re-sends.
MAX_OUTSTANDING_ACKS = 8
#: Seconds without a new publish after which the open batch is ended (EOB), so that
#: the tail of a burst is confirmed at once rather than at the next window.
LINGER = 0.002

#: nats-server's error codes for a fast batch as a whole: the stream does not allow
#: batched publishing (any more); the server forgot the batch (restart, or 10 s
#: inactivity); too many batches in flight on the stream or server.
BATCH_LEVEL_ERRORS = frozenset(
    {ErrCode.BATCH_DISABLED, ErrCode.BATCH_UNKNOWN_ID, ErrCode.BATCH_TOO_MANY_INFLIGHT}
)

_OP_START, _OP_APPEND, _OP_EOB, _OP_PING = b"0", b"1", b"3", b"4"

#: ``(full, bare, shrink)``: a batch's id-only frame template with
#: ``Nats-Expected-Stream``, the one without it, and the bytes between the two.
FrameTemplates = tuple[bytes, bytes, int]
#: ``(tally, messages, deadline)``: confirmed frames of one run (see FastBatch.add_frames).
Counted = tuple[AckTally, int, float]
#: ``(first, last, tally, deadline)``: batch sequences of frames kept without a Pending.
_Run = tuple[int, int, AckTally, float]
_first_of = itemgetter(0)
_SUFFIX = b".$FI"


def choose_ingest(
    requested: str, stream: str | None, config: dict[str, Any], version: tuple[int, ...] | None
) -> tuple[str, str]:
    """``("fast" | "acks", why)`` for a Publisher's ``ingest`` option and its target stream.

    Args:
        requested: ``"auto"``, ``"fast"`` or ``"acks"``.
        stream: the target stream (None: no stream option, so no stream config).
        config: the stream's config from its info (``{}`` without a stream).
        version: the connected server's version, None when it did not say.
    """
    if requested == "acks":
        return "acks", "ingest='acks'"
    if stream is None:
        return "acks", "no target stream (the stream option) to check for allow_batched"
    if version is not None and version[:2] < FAST_INGEST_SINCE:
        return "acks", (
            f"nats-server {'.'.join(map(str, version))} is older than "
            f"{FAST_INGEST_SINCE[0]}.{FAST_INGEST_SINCE[1]}"
        )
    if not config.get("allow_batched"):
        return "acks", f"stream {stream!r} does not set allow_batched"
    return "fast", f"stream {stream!r} allows batched publishing"


def fast_template(template: bytes) -> bytes:
    """The batch variant of an ``HPUB subject <inbox><token> ...`` template.

    The reply's ``%b%d`` (inbox, token) becomes ``%b%d.%b.$FI``: batch prefix,
    batch sequence and the op (:func:`op_of`).
    """
    head, sep, rest = template.partition(b"\r\n")
    assert head.count(b"%b%d ") == 1, head
    return head.replace(b"%b%d ", b"%b%d.%b" + _SUFFIX + b" ") + sep + rest


def op_of(seq: int) -> bytes:
    """The op of message ``seq`` of a batch: start (the first), else append."""
    return _OP_APPEND if seq > 1 else _OP_START


def rereply(cmd: bytes, reply: bytes, expect: bytes = b"") -> bytes:
    """The same PUB/HPUB frame with another reply subject (a re-send on the ack path).

    ``expect`` is the ``Nats-Expected-Stream: NAME\r\n`` line: added to an HPUB
    frame's headers when they lack it (a batch's later messages are sent without
    it, see :func:`~oncestream.publish._frames.id_only_frame`'s caller), so no
    re-send can land in another stream. Only a whole header line counts: a msg id
    such as ``xNats-Expected-Stream: NAME`` ends like it.
    """
    head, sep, rest = cmd.partition(b"\r\n")
    parts = head.split(b" ")
    parts[2] = reply
    if expect and parts[0] == b"HPUB":
        hdr_len = int(parts[3])
        if b"\r\n" + expect not in rest[:hdr_len]:
            end = hdr_len - 2  # before the blank line that ends the header block
            rest = rest[:end] + expect + rest[end:]
            parts[3] = b"%d" % (hdr_len + len(expect))
            parts[4] = b"%d" % (int(parts[4]) + len(expect))
    return b" ".join(parts) + sep + rest


def control_frame(subject: bytes, prefix: bytes, seq: int, op: bytes) -> bytes:
    """An empty end-of-batch (op 3) or ping (op 4) message of a batch."""
    return b"PUB %b %b%d.%b%b 0\r\n\r\n" % (subject, prefix, seq, op, _SUFFIX)


def parse_reply(tail: bytes) -> tuple[bytes, int] | None:
    """``(batch id, batch seq)`` of a reply subject after ``<inbox>F.``; None if not ours."""
    parts = tail.split(b".")
    if len(parts) != 6 or parts[5] != b"$FI":
        return None
    try:
        return parts[0], int(parts[3])
    except ValueError:
        return None


class FastBatch:
    """One fast batch: its reply prefix, the messages not yet confirmed, its flow window.

    ``seq`` is the last batch sequence sent; ``window_end`` the last one that
    may be sent before the next flow ack (1 until the server's first reply,
    which ADR-50 requires the client to wait for); ``entries`` the
    unconfirmed messages by batch sequence, in send order: a :class:`Pending`,
    or the bare frame of a message sent by :meth:`add_frames`, whose retry
    state its *run* holds (a Pending per message cost the Spark sink a fifth
    of its Python time). The ``take*`` methods hand out Pendings either way.
    """

    __slots__ = (
        "_bare_shrink",
        "_bare_template",
        "acked",
        "ending",
        "entries",
        "id",
        "prefix",
        "runs",
        "seq",
        "shrink",
        "subject",
        "tallies",
        "template",
        "window_end",
    )

    def __init__(self, inbox: bytes, templates: FrameTemplates = (b"", b"", 0)) -> None:
        self.id = secrets.token_hex(8).encode()
        self.prefix = b"%bF.%b.%d.ok." % (inbox, self.id, FLOW)
        self.seq = 0
        self.window_end = 1
        #: The id-only frame template of the next message and the bytes it leaves out
        #: of the full header (:class:`FrameTemplates`). Later messages may leave out
        #: Nats-Expected-Stream only after the first flow ack past message 1, which
        #: (carrying the header) was then stored in the batch's stream, so that stream
        #: is ours (:meth:`go_bare`). Until then every message carries it: a batch whose
        #: first message reached another stream lives there, and that stream would
        #: store the rest (a refused message 1 ends the batch, see reply).
        self.template, self.shrink = templates[0], 0
        self._bare_template, self._bare_shrink = templates[1], templates[2]
        #: Entries up to here are confirmed (or were moved to the ack path).
        self.acked = 0
        self.ending = False
        self.entries: dict[int, Pending | bytes] = {}
        #: The runs of frames kept as bytes, by first sequence; no two overlap, and a
        #: run's sequences hold nothing but its frames (added without an await between).
        self.runs: deque[_Run] = deque()
        #: The subject of the first message: end-of-batch and ping go there (the
        #: stream must capture the subject of every message of the batch).
        self.subject = b""
        #: AckTally objects of publish_many calls in this batch (for the final seq).
        self.tallies: list[Any] = []

    def go_bare(self) -> None:
        """Message 1 is confirmed stored here: later messages leave the header out."""
        if self._bare_template:
            self.template, self.shrink = self._bare_template, self._bare_shrink

    def window_sent(self) -> bool:
        """Whether the flow window was sent to its end (the server's flow ack is then due).

        Below it, with fewer messages out than the server's flow-ack interval (a small
        ``max_inflight``), no flow ack may come: only ending the batch confirms them.
        """
        return self.seq >= self.window_end

    def eob(self) -> bytes:
        """The end-of-batch frame; the batch takes no more messages."""
        self.ending = True
        return control_frame(self.subject, self.prefix, self.seq + 1, _OP_EOB)

    def ping(self) -> bytes:
        """A ping: the server answers with its latest flow ack, or reports a gap."""
        return control_frame(self.subject, self.prefix, self.seq, _OP_PING)

    def add_frames(self, first: int, frames: list[bytes], tally: AckTally, deadline: float) -> None:
        """Keep ``frames`` (batch sequences ``first``, ``first + 1``, ...) unconfirmed.

        One retry record for the run instead of a Pending per message: confirmed,
        they are counted in ``tally``; taken one by one (a gap, an error, the
        ack path), each becomes a Pending with ``deadline`` and the msg id and
        subject read back from its frame.
        """
        last = first + len(frames) - 1
        self.entries.update(zip(range(first, last + 1), frames, strict=True))
        self.runs.append((first, last, tally, deadline))

    def _pending(self, seq: int, entry: Pending | bytes) -> Pending:
        if type(entry) is not bytes:
            return entry  # type: ignore[return-value]
        runs = self.runs
        _, _, tally, deadline = runs[bisect_right(runs, seq, key=_first_of) - 1]
        return Pending(entry, tally, frame_msg_id(entry), frame_subject(entry), deadline)

    def take(self, seq: int) -> Pending | None:
        """Remove and return the unconfirmed entry with batch sequence ``seq``, if any."""
        entry = self.entries.pop(seq, None)
        return None if entry is None else self._pending(seq, entry)

    def take_upto(self, seq: int) -> tuple[list[Pending], list[Counted]]:
        """Remove the unconfirmed entries with batch sequence <= ``seq``.

        Returns ``(pendings, counted)``: the Pendings, and per run of frames
        (:meth:`add_frames`) its tally, how many of its messages, its deadline.
        """
        if seq <= self.acked:
            return [], []
        low, self.acked = self.acked + 1, seq
        entries, runs = self.entries, self.runs
        pop = entries.pop
        pendings: list[Pending] = []
        counted: list[Counted] = []
        while low <= seq:
            while runs and runs[0][1] < low:
                runs.popleft()  # its frames were all taken one by one
            if runs and runs[0][0] <= low:
                _, last, tally, deadline = runs[0]
                end = min(last, seq)
                before = len(entries)
                deque(map(pop, range(low, end + 1), repeat(None)), maxlen=0)
                if before > len(entries):
                    counted.append((tally, before - len(entries), deadline))
                if end == last:
                    runs.popleft()
            else:
                end = seq if not runs else min(seq, runs[0][0] - 1)
                for key in range(low, end + 1):
                    entry = pop(key, None)
                    if entry is not None:
                        pendings.append(entry)  # type: ignore[arg-type]
            low = end + 1
        return pendings, counted

    def take_range(self, first: int, end: int) -> list[Pending]:
        """Remove and return the entries with ``first <= batch sequence < end``."""
        pop = self.entries.pop
        return [
            self._pending(key, entry)
            for key in range(first, end)
            if (entry := pop(key, None)) is not None
        ]

    def take_all(self) -> list[Pending]:
        """Remove and return every unconfirmed entry, in send order."""
        entries = self.entries
        taken = [self._pending(key, entries[key]) for key in sorted(entries)]
        entries.clear()
        self.runs.clear()
        return taken

    def take_subject(self, subject: str) -> list[Pending]:
        """Remove and return the entries published to ``subject`` (compared in lower case)."""
        doomed = [
            key
            for key, entry in self.entries.items()
            if (frame_subject(entry) if type(entry) is bytes else entry.subject).lower()  # type: ignore[union-attr]
            == subject
        ]
        return [self._pending(key, self.entries.pop(key)) for key in doomed]

    def oldest_deadline(self) -> float | None:
        """The deadline of the oldest unconfirmed entry (None: none left)."""
        if not self.entries:
            return None
        oldest = min(self.entries)
        return self._pending(oldest, self.entries[oldest]).deadline


class BatchLanes(Lanes, Protocol):
    """The Publisher as its fast-ingest batches see it: the lanes' callbacks, and ``settle``."""

    def settle(self, batch: FastBatch, entries: list[Pending], counted: list[Counted]) -> None:
        """Resolve the entries (and runs of frames) a flow ack or the batch's PubAck confirmed."""
        ...


class BatchTable:
    """A Publisher's fast batches: the open one, those ending, and what their replies mean.

    Args:
        inbox: the Publisher's reply inbox (every batch's reply prefix starts with it).
        ack_timeout: seconds a message may wait for its flow ack before its batch
            is given up (its unconfirmed messages go to the ack path).
        lanes: the Publisher: ``settle`` entries (and runs of frames, see
            :meth:`FastBatch.take_upto`) confirmed as stored, ``fail`` one, re-send
            some ``to_acks``, ``send_now`` a control frame (end-of-batch, ping),
            ``wake`` publishes waiting for a window, ``refuse`` batches from now on.
        stream: the target stream (errors from other streams concern one message).
    """

    def __init__(
        self, inbox: bytes, ack_timeout: float, lanes: BatchLanes, *, stream: str | None = None
    ) -> None:
        self.inbox = inbox
        self.ack_timeout = ack_timeout
        #: The Publisher's target stream: an error answered by any other stream is about
        #: one message that reached it, not about the batch.
        self.stream = stream
        self.batches: dict[bytes, FastBatch] = {}
        self.open: FastBatch | None = None
        #: The id-only frame templates new batches use (set by the Publisher).
        self.templates: FrameTemplates = (b"", b"", 0)
        #: No new batch before this (monotonic): after a batch got no flow ack in
        #: ack_timeout, or a reconnect, the ack path keeps the producer going.
        self.paused_until = 0.0
        self._settle, self._fail, self._to_acks = lanes.settle, lanes.fail, lanes.to_acks
        self._send, self._wake, self._refuse = lanes.send_now, lanes.wake, lanes.refuse

    def new(self, subject: bytes) -> FastBatch | None:
        """Open a batch whose control messages go to ``subject``; None while paused."""
        if self.paused_until > _monotonic():
            return None
        batch = self.open = FastBatch(self.inbox, self.templates)
        batch.subject = subject
        self.batches[batch.id] = batch
        return batch

    def end(self, batch: FastBatch) -> None:
        """Send the end-of-batch message; its PubAck confirms the rest (or names a gap)."""
        if self.open is batch:
            self.open = None
        if batch.ending:
            return
        if batch.seq == 0:
            self.batches.pop(batch.id, None)
            return
        self._send(batch.eob())
        self._wake()

    def drop(self, batch: FastBatch, *, send: bool = True) -> None:
        """Give up on a batch: its unconfirmed messages go to the ack path, same msg ids."""
        self.batches.pop(batch.id, None)
        if self.open is batch:
            self.open = None
        self._to_acks(batch.take_all(), send=send)
        self._wake()

    def drop_all(self) -> None:
        """After a reconnect: every unconfirmed message joins the ack path's re-send."""
        for batch in list(self.batches.values()):
            # The server may still hold the batch: it ends by its inactivity timeout.
            self.drop(batch, send=False)
        self.paused_until = _monotonic() + self.ack_timeout

    def fail_all(self, exc: BaseException) -> None:
        """Fail every unconfirmed message with ``exc`` (the Publisher closes)."""
        for batch in self.batches.values():
            for entry in batch.take_all():
                self._fail(entry, exc)
        self.batches.clear()
        self.open = None

    def reply(self, tail: bytes, data: bytes | bytearray, status: bytes | None) -> None:
        """A reply to ``<inbox>F.<tail>``: a flow ack, gap, error or the batch's PubAck."""
        parsed = parse_reply(tail)
        if parsed is None:
            return
        batch = self.batches.get(parsed[0])
        if batch is None:
            return  # a batch given up on: its messages are on the ack path
        seq = parsed[1]
        try:
            self._reply(batch, seq, data, status)
        finally:
            if seq == 1 and (status is not None or b"error" in data) and batch.id in self.batches:
                # Message 1 was refused: the batch lives in another stream, or in none
                # (no flow ack may ever come). Give it up; the next publish opens another.
                self.drop(batch)

    def _reply(
        self, batch: FastBatch, seq: int, data: bytes | bytearray, status: bytes | None
    ) -> None:
        if status == b"503":  # no responders: retried (and looked up) on the ack path
            entry = batch.take(seq)
            if entry is not None:
                self._to_acks([entry])
            return
        try:
            response = orjson.loads(data)
            kind = response.get("type")
            if kind == "ack":
                acked = int(response["seq"])
                if acked >= 1:
                    batch.go_bare()
                self._settle(batch, *batch.take_upto(acked))
                batch.window_end = acked + max(1, int(response["msgs"])) * MAX_OUTSTANDING_ACKS
                self._wake()
            elif kind == "gap":
                lost = batch.take_range(int(response["last_seq"]), int(response["seq"]))
                log.debug("fast batch gap: re-sending %d messages on the ack path", len(lost))
                self._to_acks(lost)
            elif kind == "err":
                entry = batch.take(int(response["seq"]))
                if entry is not None:
                    self._fail(entry, jetstream_error(response["error"]))
            elif "batch" in response:  # the batch's PubAck: it ended
                self.batches.pop(batch.id, None)
                if self.open is batch:
                    self.open = None
                if "seq" in response:
                    for tally in batch.tallies:
                        tally.saw_seq(int(response["seq"]))
                self._settle(batch, *batch.take_upto(int(response.get("count", 0))))
                self.drop(batch)  # anything after count was not stored
            elif "error" in response:
                if self.stream and response.get("stream") not in (None, self.stream):
                    # Another stream refused one message: it was not stored anywhere, and
                    # the batch is fine. The ack path's re-send, with the header, gets the
                    # typed StreamMismatch.
                    entry = batch.take(seq)
                    if entry is not None:
                        self._to_acks([entry])
                    return
                self._error(batch, seq, jetstream_error(response["error"]))
            else:  # a server that treated $FI as a plain reply stored just this message
                entry = batch.take(seq)
                if entry is not None:
                    self._settle(batch, [entry], [])
        except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError):
            log.debug("malformed fast-batch reply %r", bytes(data[:200]))

    def _error(self, batch: FastBatch, seq: int, exc: JetStreamError) -> None:
        """A plain error reply to message ``seq`` of a batch."""
        if exc.err_code in BATCH_LEVEL_ERRORS:
            if exc.err_code != ErrCode.BATCH_UNKNOWN_ID:  # refused, not forgotten
                self._refuse(exc)
            self.drop(batch)
            return
        entry = batch.take(seq)
        if entry is None:
            return
        if exc.err_code == ErrCode.TOO_MANY_REQUESTS:  # dropped by a full ingest queue
            self._to_acks([entry])
        else:
            self._fail(entry, exc)

    def tick(self, stalled: bool) -> None:
        """Ping a batch without recent flow acks; give up on one past the ack timeout."""
        if not self.batches:
            return
        now = _monotonic()
        for batch in list(self.batches.values()):
            if not batch.entries:
                if batch.ending:
                    self.batches.pop(batch.id, None)  # nothing left to confirm
                continue
            deadline = batch.oldest_deadline()
            assert deadline is not None
            if deadline <= now:
                log.debug("no flow ack within ack_timeout: fast batch given up")
                self.paused_until = now + self.ack_timeout
                self.drop(batch)
            elif stalled and deadline - now < self.ack_timeout * 2 / 3:
                self._send(batch.ping())
