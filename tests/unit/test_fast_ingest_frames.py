"""Frames of the fast-ingest path (pure byte handling; the behaviour runs against a real
server in tests/integration/test_publisher_fast_ingest.py)."""

from __future__ import annotations

from oncestream.publish._fast_ingest import fast_template, op_of, parse_reply, rereply
from oncestream.publish._frames import id_only_frame

EXPECT = b"Nats-Expected-Stream: ORDERS\r\n"


def _frame(expected_stream: str | None, msg_id: bytes = b"id-1", data: bytes = b"xyz") -> bytes:
    template, fixed = id_only_frame(expected_stream)
    hdr_len = fixed + len(msg_id)
    return fast_template(template) % (b"orders.eu", b"_INBOX.abc.F.b1.500.ok.", 7, op_of(7),
                                      hdr_len, hdr_len + len(data), msg_id, data)  # fmt: skip


def _lengths_match(frame: bytes) -> bool:
    head, _, rest = frame.partition(b"\r\n")
    parts = head.split(b" ")
    hdr_len, total = int(parts[3]), int(parts[4])
    return rest[:hdr_len].endswith(b"\r\n\r\n") and len(rest) == total + 2


def test_a_bare_batch_frame_gets_the_expected_stream_header_back_on_re_send() -> None:
    bare = _frame(None)
    assert EXPECT not in bare and _lengths_match(bare)
    again = rereply(bare, b"_INBOX.abc.42", EXPECT)
    head, _, rest = again.partition(b"\r\n")
    assert head.split(b" ")[2] == b"_INBOX.abc.42"
    assert b"_INBOX.abc.F.b1.500.ok.7.1.$FI" in bare  # message 7 of batch b1: op append
    assert rest.startswith(b"NATS/1.0\r\nNats-Msg-Id: id-1\r\n" + EXPECT + b"\r\nxyz")
    assert _lengths_match(again)


def test_a_frame_that_has_the_header_is_not_given_a_second_one() -> None:
    full = _frame("ORDERS")
    again = rereply(full, b"_INBOX.abc.43", EXPECT)
    assert again.count(EXPECT) == 1 and _lengths_match(again)
    assert rereply(full, b"_INBOX.abc.43") == again  # no target stream: only the reply


def test_a_msg_id_ending_like_the_header_does_not_stand_in_for_it() -> None:
    """Found by tests/unit/test_publisher_frames.py: the re-send went out without the header."""
    bare = _frame(None, msg_id=b"xNats-Expected-Stream: ORDERS")
    again = rereply(bare, b"_INBOX.abc.44", EXPECT)
    head = again.partition(b"\r\n")[2].partition(b"\r\n\r\n")[0] + b"\r\n"
    assert head.split(b"\r\n")[1:] == [
        b"Nats-Msg-Id: xNats-Expected-Stream: ORDERS",
        EXPECT[:-2],
        b"",
    ]
    assert _lengths_match(again)


def test_reply_subjects_of_other_shapes_are_not_taken_for_ours() -> None:
    assert parse_reply(b"b1.500.ok.7.1.$FI") == (b"b1", 7)
    assert parse_reply(b"b1.500.ok.x.1.$FI") is None
    assert parse_reply(b"b1.500.ok.7.1") is None


def test_the_first_message_of_a_batch_starts_it() -> None:
    assert (op_of(1), op_of(2), op_of(500)) == (b"0", b"1", b"1")
