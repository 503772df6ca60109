"""oncestream's Message: ack subjects (v1 and v2) parsed once into MessageMetadata."""

from __future__ import annotations

from typing import Any

import pytest

from oncestream import JetStreamError, Message, MessageMetadata, OperationTimeout
from oncestream._message import ACK_V1, ACK_V2, ack_layout, parse_metadata

TS = 1_700_000_000_123_456_789

GOOD = [
    (
        f"$JS.ACK.ORDERS.billing.1.42.40.{TS}.7",
        MessageMetadata("ORDERS", "billing", 1, 42, 40, TS, 7),
    ),
    (
        f"$JS.ACK.hub.ACCHASH.ORDERS.billing.3.42.40.{TS}.0",
        MessageMetadata("ORDERS", "billing", 3, 42, 40, TS, 0, "hub", "ACCHASH"),
    ),
    (
        f"$JS.ACK._.ACCHASH.ORDERS.billing.1.42.40.{TS}.0.RANDOM",
        MessageMetadata("ORDERS", "billing", 1, 42, 40, TS, 0, None, "ACCHASH"),
    ),
    (
        f"$JS.ACK.S-1.c_2.1.1.1.{TS}.0",
        MessageMetadata("S-1", "c_2", 1, 1, 1, TS, 0),
    ),
]

BAD = [
    "",
    "_INBOX.abc",
    "$JS.ACK.ORDERS.billing.1.42.40",  # too short
    f"$JS.ACK.ORDERS.billing.1.x.40.{TS}.7",  # not a number
    f"$JS.NAK.ORDERS.billing.1.42.40.{TS}.7",
    f"JS.ACK.ORDERS.billing.1.42.40.{TS}.7",
    f"$JS.ACK.d.h.ORDERS.billing.1.42.40.{TS}.0.tok.extra",  # 13 tokens
    "$JS.ACK.a.b.c.d.e.f.g.h",  # 10 tokens
]


@pytest.mark.parametrize(("reply", "expected"), GOOD)
def test_parse_v1_and_v2_ack_subjects(reply: str, expected: MessageMetadata) -> None:
    assert parse_metadata(reply) == expected
    assert Message("s", reply, b"", None).seq == expected.stream_seq  # the fast path agrees
    assert ack_layout(len(reply.split("."))) in (ACK_V1, ACK_V2)


@pytest.mark.parametrize("reply", BAD)
def test_non_ack_subjects_are_refused(reply: str) -> None:
    with pytest.raises(JetStreamError, match="not a JetStream message") as info:
        parse_metadata(reply)
    assert repr(reply) in str(info.value)
    with pytest.raises(JetStreamError):
        _ = Message("s", reply, b"", None).metadata
    with pytest.raises(JetStreamError):
        _ = Message("s", reply, b"", None).seq


def test_timestamp_is_utc() -> None:
    md = parse_metadata(GOOD[0][0])
    assert md.timestamp.tzinfo is not None
    assert md.timestamp.timestamp() == pytest.approx(TS / 1e9)


def test_metadata_is_parsed_once_and_kept() -> None:
    msg = Message("orders.x", GOOD[1][0], b"data", {"Nats-Msg-Id": "id-1"})
    first = msg.metadata
    assert msg.metadata is first and msg.seq == 42 and msg.msg_id == "id-1"
    assert Message("s", GOOD[0][0], b"", None).msg_id is None
    assert "data" not in repr(msg) and "orders.x" in repr(msg)


class _Transport:
    def __init__(self, fail: BaseException | None = None) -> None:
        self.sent: list[tuple[str, bytes]] = []
        self.fail = fail

    async def publish(self, subject: str, payload: bytes = b"") -> None:
        self.sent.append((subject, payload))

    async def request(self, subject: str, payload: bytes = b"", timeout: float = 1.0) -> Any:
        if self.fail is not None:
            raise self.fail
        self.sent.append((subject, payload))
        return None


async def test_acks_go_to_the_reply_subject() -> None:
    transport = _Transport()
    reply = GOOD[0][0]
    msg = Message("s", reply, b"", None, transport)
    await msg.ack()
    await msg.nak()
    await msg.nak(delay=1.5)
    await msg.term()
    await msg.term("poison")
    await msg.in_progress()
    await msg.ack_sync()
    assert [p for _, p in transport.sent] == [
        b"+ACK",
        b"-NAK",
        b'-NAK {"delay": 1500000000}',
        b"+TERM",
        b"+TERM poison",
        b"+WPI",
        b"+ACK",
    ]
    assert {s for s, _ in transport.sent} == {reply}


async def test_ack_errors_are_oncestream_errors() -> None:
    with pytest.raises(OperationTimeout, match="not confirmed"):
        await Message("s", GOOD[0][0], b"", None, _Transport(TimeoutError())).ack_sync()
    with pytest.raises(JetStreamError, match="failed"):
        await Message("s", GOOD[0][0], b"", None, _Transport(RuntimeError("x"))).ack_sync()
    with pytest.raises(JetStreamError, match="no connection"):
        await Message("s", GOOD[0][0], b"", None).ack()


def test_raw_header_block_is_parsed_on_first_use() -> None:
    block = b"NATS/1.0\r\nNats-Msg-Id: id-7\r\nX-Trace: a b\r\n\r\n"
    msg = Message("orders.x", GOOD[1][0], b"data", None, None, block)
    assert msg.headers == {"Nats-Msg-Id": "id-7", "X-Trace": "a b"}
    assert msg.msg_id == "id-7"
    assert msg.headers is msg.headers  # parsed once, then kept
    msg.headers = {"Nats-Msg-Id": "other"}
    assert msg.msg_id == "other"
    assert Message("s", GOOD[0][0], b"", None, None, None).headers is None
