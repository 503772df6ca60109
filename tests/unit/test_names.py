"""Stream, consumer and subject names follow nats-server's rules, checked in one place."""

from __future__ import annotations

import pytest

from oncestream import ConfigError
from oncestream._names import (
    check_consumer_name,
    check_publish_subject,
    check_stream_name,
    check_subject_filter,
    is_valid_name,
    is_valid_subject,
)

GOOD_NAMES = ["ORDERS", "orders-v2", "a_b", "x", "ÜNICODE", "a" * 255, "$SYS", "with:colon", "a@b"]
BAD_NAMES = [
    "",
    "a.b",
    "bad name",
    "tab\tname",
    "line\nbreak",
    "cr\rname",
    "ff\fname",
    "star*",
    "gt>",
    "path/sep",
    "back\\slash",
    "a" * 256,
    "é" * 128,  # 256 bytes in UTF-8
]


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_good_names(name: str) -> None:
    assert is_valid_name(name)
    assert check_stream_name(name) == name
    assert check_consumer_name(name) == name


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_names_name_the_option_value_and_rule(name: str) -> None:
    assert not is_valid_name(name)
    with pytest.raises(ConfigError) as info:
        check_stream_name(name, "--stream")
    message = str(info.value)
    assert message.startswith("--stream: ") and repr(name) in message
    assert "not a valid stream name" in message and "255 bytes" in message
    with pytest.raises(ConfigError, match="not a valid consumer name"):
        check_consumer_name(name, "--consumer")


@pytest.mark.parametrize("value", [None, 5, b"ORDERS"])
def test_non_strings_are_refused(value: object) -> None:
    with pytest.raises(ConfigError, match="not a valid stream name"):
        check_stream_name(value)
    assert not is_valid_subject(value)


LITERAL = ["a", "orders.eu.1", "a*b.c>d", "$JS.API.INFO", "_INBOX.x", "ü.ñ", "a-b_c:d"]
FILTERS = ["*", ">", "orders.*", "orders.>", "orders.*.x", "*.*", "a.*.>"]
BAD_SUBJECTS = ["", ".", "a.", ".a", "a..b", "a b", "a.b c", "a\tb", "a\nb", ">.a", "a.>.b"]


@pytest.mark.parametrize("subject", LITERAL)
def test_literal_subjects(subject: str) -> None:
    assert check_publish_subject(subject) == subject
    assert check_subject_filter(subject) == subject


@pytest.mark.parametrize("subject", FILTERS)
def test_filters_are_not_publish_subjects(subject: str) -> None:
    assert check_subject_filter(subject, "option 'subjects'") == subject
    with pytest.raises(ConfigError, match=r"'subject'.*not a valid subject to publish to"):
        check_publish_subject(subject, "option 'subject'")


@pytest.mark.parametrize("subject", BAD_SUBJECTS)
def test_bad_subjects(subject: str) -> None:
    with pytest.raises(ConfigError, match="not a valid subject") as info:
        check_subject_filter(subject, "--filter-subject")
    assert repr(subject) in str(info.value) and "--filter-subject" in str(info.value)
    with pytest.raises(ConfigError):
        check_publish_subject(subject)


def test_every_entry_point_uses_the_same_rules() -> None:
    """The four former checks (stream spec, publisher, Spark source, sink) now agree."""
    from oncestream.publish import PublisherOptions
    from oncestream.spark._sink_options import SinkOptions
    from oncestream.spark._source_options import SourceOptions
    from oncestream.streams import StreamSpec

    url = "nats://127.0.0.1:4222"
    for bad in ("a.b", "bad name", "x/y", ""):
        with pytest.raises(ConfigError, match="not a valid stream name"):
            StreamSpec(name=bad, subjects=("s",))
        with pytest.raises(ConfigError, match="not a valid stream name"):
            PublisherOptions(stream=bad)
        if bad:  # an empty entry of the comma list is skipped
            with pytest.raises(ConfigError, match="not a valid stream name"):
                SourceOptions.from_spark_options({"servers": url, "stream": f"OK,{bad}"})
        with pytest.raises(ConfigError, match="not a valid stream name"):
            SinkOptions.from_spark_options({"servers": url, "commitsStream": bad or " "})


def test_processor_and_pull_check_their_names() -> None:
    from oncestream import (
        ConnectOptions,
        Processor,
        ProcessorOptions,
        SQLiteLedger,
    )

    with pytest.raises(ConfigError, match=r"dead_letter_stream: 'D\.L'"):
        ProcessorOptions(dead_letter_stream="D.L")
    with pytest.raises(ConfigError, match=r"dead_letter_subject: 'dl\.>'"):
        ProcessorOptions(dead_letter_stream="DL", dead_letter_subject="dl.>")
    with pytest.raises(ConfigError, match=r"filter_subject: 'a\.\.b'"):
        ProcessorOptions(filter_subject="a..b")
    assert ProcessorOptions(filter_subject="orders.*.eu").filter_subject == "orders.*.eu"
    ledger = SQLiteLedger(":memory:")
    for stream, consumer in (("a.b", "c"), ("S", "bad name")):
        with pytest.raises(ConfigError, match="is not a valid"):
            Processor(ConnectOptions(), stream, consumer, lambda m, tx: None, ledger=ledger)
