"""The reply fast path: acks split across reads in any way are parsed exactly once, in order."""

from __future__ import annotations

import random

import pytest
from nats.protocol.parser import Parser

from oncestream import ConfigError
from oncestream._nats._parser import install
from oncestream.publish._frames import conditional_headers


class _FakeClient:
    """Just enough of nats-py's client for its Parser: records the slow-path messages."""

    def __init__(self) -> None:
        self.slow: list[tuple[int, bytes, bytes, bytes | None]] = []
        self.pings = 0
        self._ps = Parser(self)

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        self.slow.append((sid, bytes(subject), bytes(data), headers))

    async def _process_ping(self) -> None:
        self.pings += 1


def _frames() -> tuple[bytes, list[tuple[bytes, bytes, bytes | None]], int]:
    stream = bytearray()
    expected: list[tuple[bytes, bytes, bytes | None]] = []
    pings = 0
    for i in range(300):
        subject = b"_INBOX.abc.%d" % i
        if i % 50 == 7:
            header = b"NATS/1.0 503\r\n\r\n"
            stream += b"HMSG %b 7 %d %d\r\n%b\r\n" % (subject, len(header), len(header), header)
            expected.append((subject, b"", header))
        elif i % 60 == 11:
            stream += b"PING\r\n"
            pings += 1
            stream += b"MSG other.subject 9 2\r\nhi\r\n"
        else:
            body = b'{"stream":"S","seq":%d}' % i
            stream += b"MSG %b 7 %d\r\n%b\r\n" % (subject, len(body), body)
            expected.append((subject, body, None))
    return bytes(stream), expected, pings


@pytest.mark.parametrize("seed", range(6))
async def test_fast_parse_handles_any_split(seed: int) -> None:
    data, expected, pings = _frames()
    client = _FakeClient()
    got: list[tuple[bytes, bytes, bytes | None]] = []
    install(client)[7] = lambda s, _r, d, h: got.append((bytes(s), bytes(d), h and bytes(h)))
    rng = random.Random(seed)
    pos = 0
    while pos < len(data):
        step = rng.choice([1, 2, 5, 17, 64, 500, 4096])
        await client._ps.parse(data[pos : pos + step])
        pos += step
    assert got == expected
    assert client.slow == [(9, b"other.subject", b"hi", None)] * pings
    assert client.pings == pings
    assert not client._ps.buf


def test_conditional_headers_rejects_bad_names_and_values() -> None:
    block = conditional_headers("id-1", {"X-Trace": "t"}, expected_stream="S")
    assert block == (
        b"NATS/1.0\r\nNats-Msg-Id: id-1\r\nX-Trace: t\r\nNats-Expected-Stream: S\r\n\r\n"
    )
    with pytest.raises(ConfigError, match="header name"):
        conditional_headers("id", {"bad name": "v"})
    with pytest.raises(ConfigError, match="msg id"):
        conditional_headers("id", {"nats-msg-id": "other"})
    with pytest.raises(ConfigError, match="write-time checks"):
        conditional_headers("id", {"Nats-Expected-Stream": "OTHER"})
    with pytest.raises(ConfigError, match="single line"):
        conditional_headers("id", {"X": "a\r\nb"})
    with pytest.raises(ConfigError, match="whitespace"):
        conditional_headers(" id", None)
