"""Pure-logic parts of `oncestream publish`: connect flags, subject templates, record parsing."""

from __future__ import annotations

import io

import pytest

from oncestream import ConfigError
from oncestream.cli._connect_flags import connect_options
from oncestream.load._input import (
    InputFormat,
    Record,
    RecordError,
    SubjectTemplate,
    content_id,
    detect_format,
    read_records,
)


def test_connect_options_from_flags() -> None:
    opts = connect_options(server=["nats://a:4222,nats://b:4222", "c:4222"], domain="hub")
    assert opts.servers == ("nats://a:4222", "nats://b:4222", "nats://c:4222")
    assert opts.js_prefix == "$JS.hub.API"
    assert connect_options().servers == ("nats://127.0.0.1:4222",)
    secret = connect_options(user="u", password="s3cret")
    assert "s3cret" not in repr(secret)
    with pytest.raises(ConfigError, match="together"):
        connect_options(user="u")
    with pytest.raises(ConfigError, match="mutually exclusive"):
        connect_options(domain="d", api_prefix="JS.x.API")


def test_subject_template() -> None:
    template = SubjectTemplate("orders.{region}.{kind}")
    assert template.render(Record(3, {"region": "eu", "kind": 7}, b"")) == "orders.eu.7"
    with pytest.raises(RecordError, match=r"line 3: field 'kind'"):
        template.render(Record(3, {"region": "eu"}, b""))
    with pytest.raises(RecordError, match="subject token"):
        template.render(Record(4, {"region": "e.u", "kind": "x"}, b""))
    assert SubjectTemplate("plain.subject").render(Record(1, {}, b"")) == "plain.subject"
    for bad in ("orders.*", "orders.{region!r}", "orders.{}", "a b"):
        with pytest.raises(ConfigError):
            SubjectTemplate(bad)


def test_detect_format() -> None:
    assert detect_format("x.csv", b"{") is InputFormat.csv
    assert detect_format("x.ndjson", b"a,b") is InputFormat.jsonl
    assert detect_format("-", b'  {"a": 1}') is InputFormat.jsonl
    assert detect_format("-", b"a,b") is InputFormat.csv


def test_jsonl_records_and_errors() -> None:
    data = b'{"a": 1}\n\n{bad\n[1]\n{"a": 2}\n'
    items = list(read_records(io.BytesIO(data), InputFormat.jsonl))
    assert [type(i).__name__ for i in items] == ["Record", "RecordError", "RecordError", "Record"]
    assert [i.line for i in items] == [1, 3, 4, 5]
    assert isinstance(items[0], Record) and items[0].data == b'{"a": 1}'


def test_csv_records_and_errors() -> None:
    data = b'id,region\n1,eu\n2\n"3",us\n'
    items = list(read_records(io.BytesIO(data), InputFormat.csv))
    assert isinstance(items[0], Record) and items[0].fields == {"id": "1", "region": "eu"}
    assert isinstance(items[1], RecordError) and items[1].line == 3
    assert isinstance(items[2], Record) and items[2].line == 4
    with pytest.raises(ConfigError, match="unique"):
        list(read_records(io.BytesIO(b"a,a\n1,2\n"), InputFormat.csv))


def test_content_id_is_stable_across_key_order() -> None:
    one = Record(1, {"a": 1, "b": "x"}, b"")
    two = Record(9, {"b": "x", "a": 1}, b"")
    assert content_id(one) == content_id(two)
    assert content_id(one) != content_id(Record(1, {"a": 2, "b": "x"}, b""))
    assert len(content_id(one)) == 64
