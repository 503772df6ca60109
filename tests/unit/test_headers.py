"""The one header parser and the msg-id rule (pure logic; the server's side: test_msg_ids)."""

from __future__ import annotations

import itertools

import pytest

from oncestream import ConfigError
from oncestream._headers import (
    SERVER_STAMPED,
    build_block,
    check_msg_id,
    check_user_headers,
    direct_value,
    header_value,
    is_clean_msg_id,
    msg_id_key,
    msg_id_of,
    parse_block,
    split_status,
    writable_headers,
)

BLOCK = (
    b"NATS/1.0\r\nX-A: 1\r\nNats-Msg-Id:   id-1 \r\nnats-msg-id: lower\r\n"
    b"Nats-Msg-Id: second\r\nX-A:  2\t\r\nNats-Expected-Stream: S\r\nNats-Batch-Id: b\r\n\r\n"
)


def test_header_value_reads_as_nats_server_does() -> None:
    # The first exact-case line; spaces after the colon skipped; trailing ones kept.
    assert header_value(BLOCK, b"Nats-Msg-Id") == b"id-1 "
    assert header_value(b"NATS/1.0\r\nNats-Msg-Id:\r\n\r\n", b"Nats-Msg-Id") == b""
    assert header_value(b"NATS/1.0\r\nNats-Msg-Id: a\rb\r\n\r\n", b"Nats-Msg-Id") == b"a\rb"
    # A name inside another header's value is not a header line.
    assert header_value(b"NATS/1.0\r\nX: Nats-Msg-Id: no\r\n\r\n", b"Nats-Msg-Id") is None
    assert msg_id_of(b"NATS/1.0\r\nNats-Msg-Id:    \r\n\r\n") is None  # empty: no id


def test_parse_block_keeps_order_and_case_and_hides_control_headers() -> None:
    assert parse_block(BLOCK) == {
        "X-A": ["1", "2"],
        "Nats-Msg-Id": ["id-1", "second"],
        "nats-msg-id": ["lower"],
    }
    assert parse_block(BLOCK, control=True)["Nats-Expected-Stream"] == ["S"]
    assert parse_block(b"NATS/1.0 404 No Messages\r\n\r\n") == {}
    assert split_status(b"NATS/1.0 409 Consumer Deleted\r\n\r\n") == ("409", "Consumer Deleted")
    assert split_status(b"NATS/1.0\r\nX: y\r\n\r\n") == (None, "")


def test_direct_get_tail_is_the_servers_even_when_a_writer_used_the_names() -> None:
    block = (
        b"NATS/1.0\r\nNats-Sequence: 99\r\nX: y\r\nNats-Stream: S\r\nNats-Subject: a.b\r\n"
        b"Nats-Sequence: 7\r\nNats-Time-Stamp: 2026-01-01T00:00:00Z\r\n\r\n"
    )
    assert direct_value(block, "Nats-Sequence") == b"7"
    assert parse_block(block, direct=True) == {"Nats-Sequence": ["99"], "X": ["y"]}


@pytest.mark.parametrize(
    "msg_id",
    ["a", "order-17", "é", "e\u0301", "a b", "a\u200b", "\u200b", "\ufffd", "日本", "a:b/c#d?e@f"],
)
def test_clean_ids_are_accepted(msg_id: str) -> None:
    assert is_clean_msg_id(msg_id)
    assert check_msg_id(msg_id) == msg_id


@pytest.mark.parametrize(
    ("msg_id", "reason"),
    [
        ("", "empty"),
        ("   ", "empty"),
        (" a", "starts with whitespace"),
        ("a ", "ends with whitespace"),
        ("\ta", "starts with whitespace"),
        ("a\u3000", "ends with whitespace"),
        ("\xa0a", "starts with whitespace"),
        ("a\nb", "control character"),
        ("a\r\nb", "control character"),
        ("a\x00b", "control character"),
        ("a\x85b", "control character"),
        ("a\ud800", "not valid Unicode"),
        (17, "must be a str"),
    ],
)
def test_unclean_ids_are_refused_naming_why(msg_id: object, reason: str) -> None:
    if isinstance(msg_id, str):
        assert not is_clean_msg_id(msg_id)
    with pytest.raises(ConfigError, match=reason):
        check_msg_id(msg_id)


def test_msg_id_keys_tell_apart_every_id_the_server_tells_apart() -> None:
    raws = [b"a", b"a ", b"a\t", b"a\x01", b"\xff", b"\xfe", b"\x01b64:YQ==", b"YQ==", b"a\rb"]
    keys = [msg_id_key(b"NATS/1.0\r\nNats-Msg-Id: " + raw + b"\r\n\r\n") for raw in raws]
    assert len(set(keys)) == len(raws)
    assert keys[0] == "a"  # a clean id is its own key
    for key, raw in itertools.zip_longest(keys, raws):
        assert key is not None and "\x00" not in key, raw


def test_user_headers_may_not_carry_control_or_server_names() -> None:
    check_user_headers({"X-Trace": "t", "Nats-TTL": "5s", "Oncestream-Pos": ["1", "2"]})
    for name in ("Nats-Msg-Id", "nats-msg-id", "Nats-Expected-Stream", "NATS-BATCH-ID"):
        with pytest.raises(ConfigError, match="not accepted"):
            check_user_headers({name: "x"})
    for name in ("Nats-Sequence", "Nats-Stream", "Nats-Time-Stamp"):
        with pytest.raises(ConfigError, match="added by the server"):
            check_user_headers({name: "1"})
    with pytest.raises(ConfigError, match="header name"):
        check_user_headers({"bad name": "v"})


def test_headers_the_server_stamps_are_read_but_never_written() -> None:
    """nats-server refuses them from a client (10227, 10212): a read's rows write as they are."""
    assert SERVER_STAMPED == (
        "Nats-Stream-Source",
        "Nats-Scheduler",
        "Nats-Schedule-Next",
        "Nats-Counter-Sources",
        "Nats-Marker-Reason",
    )
    stored = (
        b"NATS/1.0\r\nNats-Msg-Id: a\r\nX-A: 1\r\nNats-Stream-Source: test 7 > > test.x\r\n"
        b"Nats-Scheduler: s.1\r\nNats-Schedule-Next: purge\r\n\r\n"
    )
    read = parse_block(stored)
    assert read.pop("Nats-Msg-Id") == ["a"]
    assert read["Nats-Stream-Source"] == ["test 7 > > test.x"]  # readable
    check_user_headers(read)  # accepted...
    block = build_block("a", read, {})
    assert block == b"NATS/1.0\r\nNats-Msg-Id: a\r\nX-A: 1\r\n\r\n"  # ...and left out
    assert writable_headers({"nats-stream-source": "x", "NATS-MARKER-REASON": "y", "X": "z"}) == {
        "X": "z"
    }
    # Added to a pinned client's deliveries: copied into a dead letter and replayed, a
    # stale pin id made a group member step down (tests/integration/test_dlq_partitioned.py).
    assert writable_headers({"Nats-Pin-Id": "p", "X": "z"}) == {"X": "z"}
