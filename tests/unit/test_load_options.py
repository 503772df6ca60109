"""The loader's pure parts: LoadOptions validation, labels, and how sources are read."""

from __future__ import annotations

import asyncio
import io
import threading
from pathlib import Path
from typing import Any

import pytest

from oncestream import ConfigError
from oncestream.load import InputFormat, LoadOptions
from oncestream.load._input import (
    Record,
    RecordError,
    open_source,
    read_items,
    read_off_loop,
    record_of,
)
from oncestream.publish import PublisherOptions

BASE: dict[str, Any] = {"stream": "ORDERS", "subject": "orders.{region}", "id_field": "id"}


def test_defaults_and_what_the_publisher_gets() -> None:
    options = LoadOptions(**BASE)
    assert (options.format, options.on_error, options.resume, options.fresh) == (
        "auto",
        "stop",
        True,
        False,
    )
    assert options.ids == "field:id"
    assert options.template.fields == ["region"]
    assert options.needed_columns == {"region": "LoadOptions.subject", "id": "LoadOptions.id_field"}
    pub = options.publisher_options()
    assert (pub.stream, pub.ingest) == ("ORDERS", "acks")
    content = LoadOptions(stream="S", subject="s.x", id_from_content=True)
    assert content.ids == "content" and content.needed_columns == {}


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"stream": "a.b"}, "stream"),
        ({"progress_stream": "a b"}, "progress_stream"),
        ({"id_field": None}, "give exactly one of id_field"),
        ({"id_from_content": True}, "not both"),
        ({"id_field": " "}, "id_field must name a record field"),
        ({"format": "xml"}, "format must be 'auto', 'jsonl' or 'csv'"),
        ({"on_error": "ignore"}, "on_error must be 'stop' or 'skip'"),
        ({"resume": "yes"}, "resume must be True or False"),
        ({"fresh": True, "resume": False}, "contradict"),
        ({"rate": 0}, "rate must be a number per second from 0.001"),
        ({"rate": float("inf")}, "rate must be a number per second from 0.001"),
        ({"rate": 1e-9}, "rate must be a number per second from 0.001"),
        ({"rate": True}, "rate must be a number per second, got True"),
        ({"subject": "orders.{region"}, "LoadOptions.subject 'orders.{region': unbalanced"),
        ({"subject": "orders.*"}, "not a valid subject to publish to"),
        ({"publisher": {"max_inflight": 1}}, "publisher must be a PublisherOptions"),
        ({"publisher": PublisherOptions(stream="OTHER")}, "publisher.stream 'OTHER'"),
        ({"publisher": PublisherOptions(ingest="fast")}, "fast-ingest batches do not report"),
        ({"labels": {"stream": "--stream", "colour": "x"}}, "labels: unknown keys ['colour']"),
        ({"labels": None}, "labels must map option names to labels, got None"),
        ({"labels": {"stream": 5}}, "labels must map option names to labels"),
        ({"subject": None}, "subject must be a subject or a template"),
    ],
)
def test_bad_options_are_refused_by_name(changes: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError) as refused:
        LoadOptions(**{**BASE, **changes})
    assert fragment in str(refused.value)


def test_labels_name_the_options_in_messages() -> None:
    flags = LoadOptions(**BASE, labels={"subject": "--subject", "id_field": "--id-field"})
    assert flags.label("subject") == "--subject" and flags.label("fresh") == "fresh=True"
    assert flags.needed_columns == {"region": "--subject", "id": "--id-field"}
    with pytest.raises(RecordError, match=r"\(used by --subject\)"):
        flags.template.render(Record(1, {}, b"{}"))
    with pytest.raises(ConfigError, match=r"--subject 'x\.\{'"):
        LoadOptions(**{**BASE, "subject": "x.{"}, labels={"subject": "--subject"})


def test_records_of_an_iterable() -> None:
    record = record_of(3, {"id": 7, "n": 123456789012345678901234567890})
    assert isinstance(record, Record) and record.line == 3
    assert record.data == b'{"id":7,"n":123456789012345678901234567890}'
    refused = record_of(4, ["not", "a", "mapping"])
    assert isinstance(refused, RecordError) and "expected a mapping" in str(refused)
    unserializable = record_of(5, {"id": object()})
    assert isinstance(unserializable, RecordError) and "not JSON-serializable" in str(
        unserializable
    )


def test_sources_load_cannot_read_are_refused(tmp_path: Path) -> None:
    options = LoadOptions(**BASE)
    for source in (b'{"id": 1}\n', io.StringIO('{"id": 1}\n'), 42):
        with pytest.raises(ConfigError, match="source: give a path"):
            open_source(source, options)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="fresh=True needs a regular file"):
        open_source([{"id": 1}], LoadOptions(**BASE, fresh=True))
    stdin = io.BufferedReader(io.BytesIO(b"\x00\x01"))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="input '-' is a binary file"):
        open_source(stdin, options)


def test_an_open_regular_file_is_identified_and_a_stream_is_not(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("id,region\n1,eu\n")
    options = LoadOptions(**BASE)
    with path.open("rb") as handle:
        opened = open_source(handle, options)
        try:
            assert opened.facts is not None and opened.facts.lines == 2
            assert opened.fmt is InputFormat.csv  # by the name's extension
        finally:
            opened.close()
        assert not handle.closed  # the caller opened it: the caller closes it
    streamed = open_source(io.BytesIO(path.read_bytes()), options)
    assert streamed.facts is None and streamed.fmt is InputFormat.csv  # sniffed


async def test_a_malformed_line_read_off_the_loop_stays_an_item() -> None:
    """Issue 38: streamed input raised its first RecordError instead of yielding it."""
    items = read_items(io.BytesIO(b'{"id": 1}\n{bad\n{"id": 3}\n'), InputFormat.jsonl)
    got = [item async for item in read_off_loop(items)]
    kinds = [type(item).__name__ for item in got if not isinstance(item, int)]
    assert kinds == ["Record", "RecordError", "Record"]


async def test_an_error_of_the_reader_is_raised_on_the_loop() -> None:
    def broken() -> Any:
        yield 1
        raise OSError("the pipe broke")

    with pytest.raises(OSError, match="the pipe broke"):
        async with asyncio.timeout(10):
            async for _ in read_off_loop(broken()):
                pass


async def test_the_reader_thread_stops_when_the_run_stops_reading() -> None:
    """A run that stops early (a malformed line, Ctrl-C) closes the reader; its thread ends
    instead of handing items to a loop that may be shutting down (it raised at exit)."""
    before = set(threading.enumerate())
    reader = read_off_loop(iter(range(100_000)))
    assert await anext(reader) == 0
    (thread,) = [t for t in set(threading.enumerate()) - before if t.name.endswith("-reader")]
    await reader.aclose()
    thread.join(timeout=10)
    assert not thread.is_alive(), "the reader thread still hands items to the loop"
