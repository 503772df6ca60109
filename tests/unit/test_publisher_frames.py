"""The Publisher's per-message paths write the same frames and leave the same retries.

``publish`` on both ingest lanes, ``publish_many`` (``_publish_many_acks``,
``_publish_many_fast``) and ``publish_columns`` (Arrow frames built by pyarrow)
are hand-inlined copies of one frame format, kept inline for speed (issue 24).
Here every path publishes the same rows through a started Publisher on a fake
connection that keeps every byte written and answers a fast batch's first
message with its flow ack (the server's part is in
tests/integration/test_publisher_fast_ingest.py and test_publish_columns.py).
For each row table and lane:

- the frames written are the reference frames below, byte for byte: subject,
  reply subject (inbox + token, or the batch's ``F.<id>.500.ok.<seq>.<op>.$FI``),
  the header block in its order (``Nats-Msg-Id`` first, user headers, trace
  context, ``Nats-Expected-*``), the payload, and a batch's end-of-batch message;
- the unconfirmed messages are the same (where they wait, msg id, subject), and a
  reconnect re-sends the same bytes: what a retry sends, on the ack path, with
  ``Nats-Expected-Stream`` (a batch leaves it out once its first message is
  stored, see ``FastBatch.go_bare``).

The reference is written from the wire format, not from the Publisher's
templates, so a change shared by every path fails too.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pytest

from oncestream import MessageTooLarge
from oncestream.publish import AckTally, Publisher, PublisherOptions
from oncestream.publish import _publisher as publisher_module
from oncestream.publish._frames import frame_msg_id, frame_subject
from tests._tracing import span_exporter

STREAM = "ORDERS"
MAX_PAYLOAD = 1 << 20  # nats-server's default
INBOX = b"_INBOX.frames."
ACK_TIMEOUT = 600.0  # no ack timeout and no ping within a test
TRACEPARENT = re.compile(rb"traceparent: 00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}\r\n")
SOME_TRACEPARENT = b"traceparent: 00-" + b"t" * 32 + b"-" + b"s" * 16 + b"-01\r\n"
BATCH_ID = re.compile(rb"\.F\.([0-9a-f]{16})\.")


# --------------------------------------------------------------------------- rows


@dataclass(frozen=True)
class Row:
    """One message and everything ``publish()`` may say about it."""

    subject: str
    data: bytes
    msg_id: str
    headers: dict[str, str | list[str]] | None = None
    expected_stream: str | None = None
    last_seq: int | None = None
    last_subject_seq: int | None = None
    last_msg_id: str | None = None

    @property
    def plain(self) -> bool:
        """Only a msg id: every path can publish it."""
        return self.headers is None and self.expected_stream is None and not self.expects_last

    @property
    def expects_last(self) -> bool:
        return (self.last_seq, self.last_subject_seq, self.last_msg_id) != (None, None, None)


def _rows(ids: Sequence[str], datas: Sequence[bytes] | None = None) -> list[Row]:
    datas = datas if datas is not None else [b"d-%d" % i for i in range(len(ids))]
    return [Row("orders.eu", data, msg_id) for msg_id, data in zip(ids, datas, strict=True)]


def _near_max(sizes: Sequence[int], *, traced: bool = False) -> list[Row]:
    """Rows of ``MAX_PAYLOAD - n`` bytes, headers (id-only with the stream) and data together."""
    header = len(b"NATS/1.0\r\nNats-Msg-Id: \r\nNats-Expected-Stream: ORDERS\r\n\r\n")
    header += len(SOME_TRACEPARENT) if traced else 0
    rows = []
    for i, short in enumerate(sizes):
        msg_id = f"big-{i}"
        size = MAX_PAYLOAD - short - header - len(msg_id)
        rows.append(Row("orders.big", bytes([65 + i]) * size, msg_id))
    return rows


ODD_IDS = [
    "é-ü-ß",
    "日本語-2",
    "🚀-3",
    "%b%d%%s-4",  # format directives of the frame templates
    "a:b;c=d,e/f\\g",
    "in side spaces",
    "~!@#$^&*()[]{}<>?|`'\"",
    "Nats-Msg-Id: not-me",  # looks like the header line it is put on
    "xNats-Expected-Stream: ORDERS",  # ends like the line a re-send adds
    "x" * 300,
]

#: name -> groups of rows (the open fast batch is ended after each group, as flush does).
CASES: dict[str, list[list[Row]]] = {
    "one message": [_rows(["a-1"])],
    "a run of messages": [_rows([f"run-{i}" for i in range(12)])],
    "several subjects": [
        [Row(f"orders.{r}", b"%d" % i, f"s-{i}") for i, r in enumerate("abcabd")],
    ],
    "msg ids of odd characters": [_rows(ODD_IDS)],
    "empty payloads": [_rows(["e-1", "e-2", "e-3"], [b"", b"", b"x"])],
    "payloads with protocol bytes": [_rows(["p-1", "p-2"], [b"\r\n\r\nPUB x 1\r\n", b"%b%d%%"])],
    "payloads at and near max_payload": [_near_max([0, 1, 0, 7, 0, 0])],
    "payloads at and near max_payload, traced": [_near_max([0, 3, 0], traced=True)],
    "the first and last messages of fast batches": [
        _rows(["b1-first", "b1-mid", "b1-last"]),
        _rows(["b2-first", "b2-last"]),
        _rows(["b3-only"]),
    ],
    "user headers, multi-valued": [
        [
            Row("orders.eu", b"h1", "h-1", {"X-One": "1"}),
            Row("orders.eu", b"h2", "h-2", {"X-Multi": ["a", "b", "a"], "X-After": "%b%d"}),
            Row("orders.eu", b"", "h-3", {"X-Odd": "välue: with colon"}),
            Row("orders.eu", b"h4", "h-4", {}),
            Row("orders.eu", b"p", "h-5"),
        ]
    ],
    "expected_stream": [
        [
            Row("orders.eu", b"1", "x-1", expected_stream=STREAM),
            Row("orders.eu", b"2", "x-2"),
            Row("orders.eu", b"3", "x-3", expected_stream="OTHER"),
            Row("orders.eu", b"4", "x-4", {"X-H": "v"}, expected_stream="OTHER"),
        ]
    ],
    "expected last sequence, subject sequence and msg id": [
        [
            Row("orders.eu", b"1", "c-1", last_seq=0),
            Row("orders.eu", b"2", "c-2"),
            Row("orders.eu", b"3", "c-3", last_subject_seq=7),
            Row("orders.eu", b"4", "c-4", {"X-H": ["1", "2"]}, last_msg_id="é:c-3"),
            Row("orders.eu", b"5", "c-5"),
            Row("orders.eu", b"6", "c-6", last_seq=4, last_subject_seq=2, last_msg_id="c-5"),
        ]
    ],
}


# --------------------------------------------------------------------------- lanes


@dataclass(frozen=True)
class Lane:
    """A Publisher configuration, and how its frames look."""

    stream: str | None = STREAM
    fast: bool = False
    paused: bool = False  # fast batches paused (after a reconnect): the ack path's fallbacks
    traced: bool = False

    def options(self) -> PublisherOptions:
        return PublisherOptions(
            stream=self.stream,
            ingest="fast" if self.fast else "acks",
            ack_timeout=ACK_TIMEOUT,
            tracing=self.traced,
            check_window=self.stream is not None,
        )

    def batches(self, row: Row) -> bool:
        """Whether the row's first attempt goes into a fast batch."""
        return (
            self.fast
            and not self.paused
            and row.expected_stream in (None, self.stream)
            and not row.expects_last
        )


LANES = {
    "acks": Lane(),
    "fast": Lane(fast=True),
    "fast, paused": Lane(fast=True, paused=True),
    "acks, no stream": Lane(stream=None),
    "acks, traced": Lane(traced=True),
    "fast, traced": Lane(fast=True, traced=True),
}


# --------------------------------------------------------------------------- reference


def _frame(row: Row, reply: bytes, *, expect: str | None, traced: bool) -> bytes:
    """The HPUB frame of ``row`` as the NATS protocol and oncestream's header order have it."""
    lines = [f"Nats-Msg-Id: {row.msg_id}"]
    for name, value in (row.headers or {}).items():
        lines += [f"{name}: {item}" for item in ([value] if isinstance(value, str) else value)]
    block = "NATS/1.0\r\n" + "".join(line + "\r\n" for line in lines)
    tail = ""
    if expect is not None:
        tail += f"Nats-Expected-Stream: {expect}\r\n"
    if row.last_seq is not None:
        tail += f"Nats-Expected-Last-Sequence: {row.last_seq}\r\n"
    if row.last_subject_seq is not None:
        tail += f"Nats-Expected-Last-Subject-Sequence: {row.last_subject_seq}\r\n"
    if row.last_msg_id is not None:
        tail += f"Nats-Expected-Last-Msg-Id: {row.last_msg_id}\r\n"
    header = block.encode() + (SOME_TRACEPARENT if traced else b"") + tail.encode() + b"\r\n"
    return b"HPUB %b %b %d %d\r\n%b%b\r\n" % (
        row.subject.encode(),
        reply,
        len(header),
        len(header) + len(row.data),
        header,
        row.data,
    )


@dataclass
class Wire:
    """What a Publisher wrote and left unconfirmed (batch ids as <b1>, <b2>... in order)."""

    frames: list[bytes] = field(default_factory=list)
    #: place ("acks <token>" or "<batch> <seq>") -> (msg id, subject, attempts)
    pending: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    retries: list[bytes] = field(default_factory=list)


def _expected(lane: Lane, groups: list[list[Row]]) -> Wire:
    """The reference: what ``lane`` must write for ``groups``, whichever path publishes them."""
    wire = Wire()
    token = batches = 0
    acks: list[tuple[int, Row]] = []
    unconfirmed: list[Row] = []  # batch messages after each batch's first (the fake acks that)
    expect = lane.stream
    for group in groups:
        seq, first_subject = 0, b""
        for row in group:
            stream = row.expected_stream or expect
            if lane.batches(row):
                seq += 1
                if seq == 1:
                    batches += 1
                    first_subject = row.subject.encode()
                prefix = INBOX + b"F.<b%d>.500.ok." % batches
                reply = prefix + b"%d.%b.$FI" % (seq, b"0" if seq == 1 else b"1")
                bare = seq > 1 and row.headers is None and not lane.traced
                wire.frames.append(
                    _frame(row, reply, expect=None if bare else stream, traced=lane.traced)
                )
                if seq > 1:
                    wire.pending[f"<b{batches}> {seq}"] = (row.msg_id, row.subject, 1)
                    unconfirmed.append(row)
            else:
                token += 1
                wire.frames.append(
                    _frame(row, INBOX + b"%d" % token, expect=stream, traced=lane.traced)
                )
                wire.pending[f"acks {token}"] = (row.msg_id, row.subject, 1)
                acks.append((token, row))
        if seq:  # the batch ends: an empty end-of-batch message (op 3) to its first subject
            wire.frames.append(
                b"PUB %b %bF.<b%d>.500.ok.%d.3.$FI 0\r\n\r\n"
                % (first_subject, INBOX, batches, seq + 1)
            )
    # A reconnect re-sends every unconfirmed message on the ack path with the same msg id:
    # a batch's messages get the next tokens; all go out in token order (so on the fast
    # lane the messages that took the ack path, Nats-Expected-Last-*, go before the batch's).
    for row in unconfirmed:
        token += 1
        acks.append((token, row))
    for token, row in sorted(acks, key=lambda pair: pair[0]):
        stream = row.expected_stream or expect
        wire.retries.append(_frame(row, INBOX + b"%d" % token, expect=stream, traced=lane.traced))
    return wire


# --------------------------------------------------------------------------- fake connection


class _Subscription:
    async def unsubscribe(self) -> None:
        return None


class FakeConnection:
    """The part of :class:`~oncestream.Connection` a started Publisher uses, without a server.

    Keeps every frame written; answers the first message of a fast batch with its
    flow ack (window 500) as the server does, and nothing else.
    """

    def __init__(self, *, allow_batched: bool) -> None:
        self.allow_batched = allow_batched
        self.max_payload = MAX_PAYLOAD
        self.multi_value_headers = True
        self.nc = None  # no INFO: no version gate, no known-bug check
        self.written: list[bytes] = []
        self._target: Callable[..., None] | None = None
        self._reconnect: list[Callable[[], Awaitable[None]]] = []

    async def stream_info(self, stream: str) -> dict[str, Any]:
        window = 10 * 24 * 3600 * 10**9
        return {"config": {"duplicate_window": window, "allow_batched": self.allow_batched}}

    def new_inbox(self) -> str:
        return INBOX.decode()[:-1]

    async def subscribe_frames(self, subject: str, target: Callable[..., None]) -> _Subscription:
        self._target = target
        return _Subscription()

    async def flush(self, timeout: float | None = None) -> None:
        return None

    def subscription_denial(self, subject: str) -> str | None:
        return None

    def on_reconnect(self, callback: Callable[[], Awaitable[None]]) -> None:
        self._reconnect.append(callback)

    def remove_reconnect_listener(self, callback: Callable[[], Awaitable[None]]) -> None:
        self._reconnect.remove(callback)

    def on_permission_denied(self, listener: object) -> None:
        return None

    def remove_permission_listener(self, listener: object) -> None:
        return None

    def write_now(self, frames: list[bytes]) -> None:
        loop = asyncio.get_running_loop()
        for frame in frames:
            self.written.append(frame)
            reply = frame.split(b" ", 3)[2]
            if reply.endswith(b".ok.1.0.$FI"):
                ack = b'{"type":"ack","seq":1,"msgs":500}'
                loop.call_soon(self._target, reply, b"", ack, None)  # type: ignore[arg-type]

    async def reconnect(self) -> None:
        """What the connection does after a reconnect: tell the listeners."""
        for callback in list(self._reconnect):
            await callback()


# --------------------------------------------------------------------------- paths


Path = Callable[[Publisher, list[Row]], Awaitable[None]]


async def _publish(pub: Publisher, rows: list[Row]) -> None:
    for row in rows:
        await pub.publish(
            row.subject,
            row.data,
            msg_id=row.msg_id,
            headers=row.headers,
            expected_stream=row.expected_stream,
            expected_last_seq=row.last_seq,
            expected_last_subject_seq=row.last_subject_seq,
            expected_last_msg_id=row.last_msg_id,
        )


async def _publish_many(pub: Publisher, rows: list[Row]) -> None:
    futures = await pub.publish_many(
        [r.subject for r in rows], [r.data for r in rows], [r.msg_id for r in rows]
    )
    assert len(futures) == len(rows)


async def _publish_many_tally(pub: Publisher, rows: list[Row]) -> None:
    await pub.publish_many(
        [r.subject for r in rows],
        [r.data for r in rows],
        [r.msg_id for r in rows],
        tally=AckTally(),
    )


def _columns(data_type: pa.DataType, id_type: pa.DataType) -> Path:
    async def publish_columns(pub: Publisher, rows: list[Row]) -> None:
        datas: list[Any] = [r.data for r in rows]
        if pa.types.is_string(data_type) or pa.types.is_large_string(data_type):
            datas = [d.decode() for d in datas]
        await pub.publish_columns(
            rows[0].subject,
            pa.array(datas, data_type),
            pa.array([r.msg_id for r in rows], id_type),
            tally=AckTally(),
        )

    return publish_columns


PATHS: dict[str, Path] = {
    "publish": _publish,
    "publish_many": _publish_many,
    "publish_many(tally)": _publish_many_tally,
    "publish_columns(binary, string)": _columns(pa.binary(), pa.string()),
    "publish_columns(large_binary, large_string)": _columns(pa.large_binary(), pa.large_string()),
    "publish_columns(string, large_string)": _columns(pa.string(), pa.large_string()),
}


def _applies(path: str, groups: list[list[Row]]) -> bool:
    rows = [r for g in groups for r in g]
    if path == "publish":
        return True
    if not all(r.plain for r in rows):
        return False  # only publish() takes headers and expectations
    if path.startswith("publish_columns"):
        if any(len({r.subject for r in g}) > 1 for g in groups):
            return False  # one subject per call
        if "(string" in path:
            try:
                [r.data.decode() for r in rows]
            except UnicodeDecodeError:
                return False
    return True


# --------------------------------------------------------------------------- running


@pytest.fixture(autouse=True)
def _no_linger(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches end where a test says (as flush() ends them), never by the linger timer."""
    monkeypatch.setattr(publisher_module, "LINGER", 3600.0)


async def _started(lane: Lane) -> tuple[Publisher, FakeConnection]:
    if lane.traced:
        span_exporter()  # the SDK's tracer provider: real trace context in the headers
    conn = FakeConnection(allow_batched=lane.fast)
    pub = Publisher(conn, lane.options())  # type: ignore[arg-type]
    await pub.start()
    assert pub.ingest == ("fast" if lane.fast else "acks")
    if lane.paused:
        await conn.reconnect()  # batches pause for an ack timeout after a reconnect
    return pub, conn


async def _stop(pub: Publisher) -> None:
    """Stop the ticker and the linger timer; the unconfirmed messages are simply left."""
    if pub._linger is not None:
        pub._linger.cancel()
    ticker = pub._ticker
    assert ticker is not None
    ticker.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await ticker


def _normal(frames: list[bytes], ids: dict[bytes, bytes]) -> list[bytes]:
    """Batch ids as <b1>, <b2>... (in order of first use) and one fixed traceparent."""
    out = []
    for frame in frames:
        for found in BATCH_ID.findall(frame):
            ids.setdefault(found, b"<b%d>" % (len(ids) + 1))
        frame = BATCH_ID.sub(lambda m: b".F." + ids[m.group(1)] + b".", frame)
        out.append(TRACEPARENT.sub(SOME_TRACEPARENT, frame))
    return out


def _unconfirmed(pub: Publisher, ids: dict[bytes, bytes]) -> dict[str, tuple[str, str, int]]:
    """Every message waiting for confirmation, by where it waits."""
    found = {f"acks {t}": (e.msg_id, e.subject, e.attempts) for t, e in pub._table.pending.items()}
    assert not pub._table.waiting
    for batch in pub._fast.batches.values():
        for seq, entry in batch.entries.items():
            if isinstance(entry, bytes):  # a frame of a run (publish_columns)
                kept = (frame_msg_id(entry), frame_subject(entry), 1)
            else:
                kept = (entry.msg_id, entry.subject, entry.attempts)
            found[f"{ids[batch.id].decode()} {seq}"] = kept
    return found


async def _run(lane: Lane, path: Path, groups: list[list[Row]]) -> Wire:
    pub, conn = await _started(lane)
    try:
        start = len(conn.written)
        for rows in groups:
            await path(pub, rows)
            if pub._fast.open is not None:
                pub._fast.end(pub._fast.open)  # as flush() (or the linger timer) ends it
            pub._write_out()  # what the write scheduled with call_soon does
            await asyncio.sleep(0)  # the loop delivers the replies to what was written
        ids: dict[bytes, bytes] = {}
        wire = Wire(frames=_normal(conn.written[start:], ids))
        wire.pending = _unconfirmed(pub, ids)
        sent = len(conn.written)
        await conn.reconnect()
        wire.retries = _normal(conn.written[sent:], ids)
        assert all(e.attempts == 2 for e in pub._table.pending.values())
        return wire
    finally:
        await _stop(pub)


def _lanes_and_cases() -> list[Any]:
    """Every lane with every case (the traced lanes get their own max_payload rows)."""
    return [
        pytest.param(lane, case, id=f"{lane}-{case}")
        for lane in LANES
        for case in CASES
        if case.startswith("payloads at and near")
        <= (LANES[lane].traced == case.endswith("traced"))
    ]


@pytest.mark.parametrize(("lane", "case"), _lanes_and_cases())
async def test_every_path_writes_the_reference_frames_and_re_sends_the_same(
    lane: str, case: str
) -> None:
    groups = CASES[case]
    want = _expected(LANES[lane], groups)
    got = {
        path: await _run(LANES[lane], PATHS[path], groups)
        for path in PATHS
        if _applies(path, groups)
    }
    wrong = {
        path: [
            part
            for part in ("frames", "pending", "retries")
            if part_of(wire, part) != part_of(want, part)
        ]
        for path, wire in got.items()
    }
    wrong = {path: parts for path, parts in wrong.items() if parts}
    for path, parts in wrong.items():  # the first difference in bytes, naming every path off
        assert part_of(got[path], parts[0]) == part_of(want, parts[0]), (
            f"off the reference: {wrong}"
        )


def part_of(wire: Wire, part: str) -> Any:
    """frames (first attempts and end-of-batch), pending (unconfirmed) or retries (re-sends)."""
    return getattr(wire, part)


def _by_id(frames: list[bytes]) -> dict[str, bytes]:
    """Re-sent frames by msg id, the token in the reply left out."""
    return {frame_msg_id(f): re.sub(rb"^(HPUB \S+ )\S+", rb"\1<reply>", f) for f in frames}


@pytest.mark.parametrize(
    "case", [c for c in CASES if sum(map(LANES["fast"].batches, CASES[c][0])) > 1]
)
async def test_both_lanes_re_send_the_same_bytes(case: str) -> None:
    """A message unconfirmed on both lanes is re-sent byte for byte alike (token aside)."""
    groups = CASES[case]
    acks = _by_id((await _run(LANES["acks"], _publish, groups)).retries)
    fast = _by_id((await _run(LANES["fast"], _publish, groups)).retries)
    assert fast  # the fake confirms a batch's first message only
    assert {k: acks[k] for k in fast} == fast


@pytest.mark.parametrize("lane", ["acks", "fast", "fast, paused"])
@pytest.mark.parametrize("path", list(PATHS))
async def test_every_path_refuses_one_byte_above_max_payload_alike(lane: str, path: str) -> None:
    (row,) = _near_max([-1])
    pub, conn = await _started(LANES[lane])
    try:
        with pytest.raises(MessageTooLarge) as refused:
            await PATHS[path](pub, [row])
        pub._write_out()
        assert str(refused.value) == (
            f"message 'big-0' to 'orders.big' is {MAX_PAYLOAD + 1} bytes with headers, above "
            f"the server's max_payload of {MAX_PAYLOAD} bytes"
        )
        assert _unconfirmed(pub, {}) == {} and pub.inflight == 0
        assert [f for f in conn.written if f.startswith(b"HPUB")] == []
    finally:
        await _stop(pub)
