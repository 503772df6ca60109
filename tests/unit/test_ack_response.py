"""The one reader of a publish ack (publish/_batch.ack_response), its two users, and the
reader of a settle probe's reply (publish/_batch.settles)."""

from __future__ import annotations

import pytest

from oncestream import JetStreamError, NoResponders, WrongLastSequence
from oncestream.publish._atomic import _puback
from oncestream.publish._batch import commit_result, settles


def test_a_refusal_is_the_typed_error_with_its_code() -> None:
    refused = b'{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"}}'
    for read in (_puback, commit_result):
        with pytest.raises(WrongLastSequence) as caught:
            read(refused, "orders.1")
        assert caught.value.err_code == 10071


def test_no_body_is_no_responders_naming_the_subject() -> None:
    for read in (_puback, commit_result):
        with pytest.raises(NoResponders, match=r"'orders\.1'"):
            read(b"", "orders.1")


def test_a_malformed_ack_names_which_ack() -> None:
    with pytest.raises(JetStreamError, match=r"^malformed PubAck: b'nope'$"):
        _puback(b"nope", "orders.1")
    with pytest.raises(JetStreamError, match=r"^malformed PubAck: "):
        _puback(b'{"stream":"ORDERS"}', "orders.1")
    with pytest.raises(JetStreamError, match=r"^malformed batch commit ack: b'nope'$"):
        commit_result(b"nope", "orders.1")


def test_the_acks_read() -> None:
    assert _puback(b'{"stream":"ORDERS","seq":7,"duplicate":true}', "orders.1") == (7, True)
    assert commit_result(b'{"stream":"ORDERS","seq":9,"count":3}', "orders.1") == (9, 3)


def test_only_the_streams_ingest_loop_settles_a_probe() -> None:
    refused = (
        b'{"error":{"code":400,"err_code":10060,"description":"expected stream does not match"}}'
    )
    assert settles(refused)  # processed after everything the connection sent before
    dropped = b'{"error":{"code":429,"err_code":10167,"description":"too many requests"}}'
    assert not settles(dropped)
    # 503, no body: the probe reached no stream. A stream without a leader answers so too,
    # and its old leader may have committed the batch: that settles nothing.
    assert not settles(b"")
