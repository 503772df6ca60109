"""The parser fast path: frames split at any byte boundary reach the right place, in order."""

from __future__ import annotations

import random
from typing import Any

from nats.protocol.parser import Parser

from oncestream._nats import FrameSink
from oncestream._nats._parser import install


class FakeClient:
    """Just what nats-py's Parser calls back into."""

    def __init__(self) -> None:
        self._ps = Parser(self)
        self.slow: list[tuple[int, bytes, bytes, bytes, bytes | None]] = []
        self.pings = 0

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        self.slow.append((sid, subject, reply, data, headers))

    async def _process_ping(self) -> None:
        self.pings += 1

    async def _process_pong(self) -> None:
        pass

    async def _process_info(self, info: Any) -> None:
        pass

    async def _process_err(self, err: Any) -> None:
        pass


def _frames() -> tuple[bytes, list[bytes], int]:
    out = bytearray()
    ours: list[bytes] = []
    foreign = 0
    for i in range(300):
        payload = b"p%d" % i * (i % 7)
        kind = i % 5
        if kind == 0:
            out += b"MSG s.%d 7 $JS.ACK.S.C.1.%d.1.1.0 %d\r\n%s\r\n" % (i, i, len(payload), payload)
            ours.append(payload)
        elif kind == 1:
            hdr = b"NATS/1.0\r\nX: %d\r\n\r\n" % i
            out += b"HMSG s.%d 7 %d %d\r\n%s%s\r\n" % (
                i,
                len(hdr),
                len(hdr) + len(payload),
                hdr,
                payload,
            )
            ours.append(payload)
        elif kind == 2:
            out += b"PING\r\n"
        elif kind == 3:
            out += b"MSG other 9 %d\r\n%s\r\n" % (len(payload), payload)
            foreign += 1
        else:
            out += b"MSG s.x 7 %d\r\n%s\r\n" % (len(payload), payload)
            ours.append(payload)
    status = b"NATS/1.0 404 No Messages\r\n\r\n"
    out += b"HMSG inbox 7 %d %d\r\n%s\r\n" % (len(status), len(status), status)
    return bytes(out), ours, foreign


async def test_fast_path_with_random_splits() -> None:
    stream, ours, foreign = _frames()
    rng = random.Random(7)
    for _ in range(30):
        nc = FakeClient()
        table = install(nc)
        assert install(nc) is table  # idempotent
        ended: list[bool] = []
        sink = FrameSink(10**9, True, lambda ended=ended: ended.append(True))
        table[7] = sink
        pos = 0
        while pos < len(stream):
            step = rng.randint(1, 200)
            await nc._ps.parse(stream[pos : pos + step])
            pos += step
        assert sink.datas == ours
        assert len(sink.replies) == len(ours) and sink.replies[0] == b"$JS.ACK.S.C.1.0.1.1.0"
        assert sink.status is not None and sink.status.startswith(b"NATS/1.0 404")
        assert ended == [True]
        assert len(nc.slow) == foreign and all(frame[0] == 9 for frame in nc.slow)
        assert nc.pings == 60


async def test_limit_ends_collection_and_unregister() -> None:
    nc = FakeClient()
    table = install(nc)
    ended: list[bool] = []
    sink = FrameSink(2, False, lambda: ended.append(True))
    table[3] = sink
    await nc._ps.parse(b"MSG a 3 1\r\nx\r\nMSG a 3 1\r\ny\r\n")
    assert sink.datas == [b"x", b"y"] and ended == [True] and sink.subjects == []
    del table[3]
    await nc._ps.parse(b"MSG a 3 1\r\nz\r\n")
    assert nc.slow == [(3, b"a", b"", b"z", None)]


def _mixed_frames(rng: random.Random, count: int) -> bytes:
    """Frames of sid 7 in every shape a range read meets, with foreign frames between runs."""
    out = bytearray()
    for i in range(count):
        # Payloads that look like protocol: the parser must go by the sizes alone.
        payload = rng.choice([b"", b"x" * rng.randint(1, 300), b"HMSG a 7 1 2\r\nMSG \r\n%d" % i])
        reply = rng.choice([b"", b"$JS.ACK.S.C.1.%d.%d.1700000000000000000.0" % (i, i)])
        shape = rng.randrange(6)
        if shape == 0:
            out += b"MSG s.%d 7 %b%d\r\n%b\r\n" % (
                i,
                reply + b" " if reply else b"",
                len(payload),
                payload,
            )
        elif shape in (1, 2):
            hdr = b"NATS/1.0\r\nNats-Msg-Id: m-%d\r\n\r\n" % i
            total = len(hdr) + len(payload)
            head = b"HMSG s.%d 7 %b%d %d\r\n" % (i, reply + b" " if reply else b"", len(hdr), total)
            out += head + hdr + payload + b"\r\n"
        elif shape == 3:  # an idle heartbeat / flow control: not a message, not the end
            beat = b"NATS/1.0 100 FlowControl Request\r\n\r\n"
            out += b"HMSG inbox 7 $JS.FC.S.x %d %d\r\n%b\r\n" % (len(beat), len(beat), beat)
        elif shape == 4:
            out += b"MSG other 9 %d\r\n%b\r\nPING\r\n" % (len(payload), payload)
        else:
            out += b"HMSG s.big 7 12 %d\r\nNATS/1.0\r\n\r\n%b\r\n" % (12 + 70_000, b"b" * 70_000)
    status = b"NATS/1.0 404 No Messages\r\n\r\n"
    out += b"HMSG inbox 7 %d %d\r\n%b\r\n" % (len(status), len(status), status)
    return bytes(out)


async def _collected(stream: bytes, rng: random.Random, *, fast: bool) -> FrameSink:
    nc = FakeClient()
    sink = FrameSink(10**9, True, lambda: None)
    if fast:
        install(nc)[7] = sink
    pos = 0
    while pos < len(stream):
        step = rng.choice([rng.randint(1, 64), rng.randint(1, 400_000)])
        await nc._ps.parse(stream[pos : pos + step])
        pos += step
    if not fast:  # nats-py's own parser as the reference
        for sid, subject, reply, data, headers in nc.slow:
            if sid == 7:
                sink.add(subject, reply, data, headers)
    return sink


async def test_fast_path_collects_what_nats_py_parses() -> None:
    """Every list of the sink (data, headers, subjects, replies) and the end status match.

    Runs of one sid go through ``_collect``; buffers above the snapshot size, and frames
    behind a foreign one, through the general loop and nats-py's parser.
    """
    for seed in range(12):
        stream = _mixed_frames(random.Random(seed), 120)
        expected = await _collected(stream, random.Random(seed), fast=False)
        got = await _collected(stream, random.Random(seed + 100), fast=True)
        assert len(expected.datas) > 50
        assert got.datas == expected.datas
        assert got.headers == expected.headers
        assert got.subjects == expected.subjects
        assert got.replies == expected.replies
        assert got.status == expected.status and got.status is not None
        assert all(type(d) is bytes for d in got.datas)
