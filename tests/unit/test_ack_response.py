"""The one reader of a publish ack (publish/_batch.ack_response) and its two users."""

from __future__ import annotations

import pytest

from oncestream import JetStreamError, NoResponders, WrongLastSequence
from oncestream.publish._atomic import _puback
from oncestream.publish._batch import commit_result


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
