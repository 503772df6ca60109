"""One duration parser: every option taking a time accepts the same forms."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from oncestream import ConfigError, ConnectOptions, ProcessorOptions, PublisherOptions, PullOptions
from oncestream._options import parse_duration
from oncestream.spark._source_options import SourceOptions
from oncestream.streams import StreamSpec

GOOD = [
    (2, 2.0),
    (2.5, 2.5),
    ("2", 2.0),
    ("2.5", 2.5),
    ("500ms", 0.5),
    ("2s", 2.0),
    ("1m", 60.0),
    ("1.5m", 90.0),
    ("1h", 3600.0),
    (" 3 s ", 3.0),
    (".5s", 0.5),
    ("0", 0.0),
]
BAD: list[Any] = [
    "",
    "soon",
    "2 days",
    "-1",
    "-1s",
    "1d",
    "1e3",
    "nan",
    True,
    None,
    float("nan"),
    float("inf"),
    -1,
    "5 mins",
]


@pytest.mark.parametrize(("value", "seconds"), GOOD)
def test_good_durations(value: str | float, seconds: float) -> None:
    assert parse_duration("x", value) == seconds


@pytest.mark.parametrize("value", BAD)
def test_bad_durations_name_the_option_and_the_forms(value: Any) -> None:
    with pytest.raises(ConfigError, match="ack_timeout") as info:
        parse_duration("ack_timeout", value)
    assert repr(value) in str(info.value)


def _spec(**kw: Any) -> StreamSpec:
    return StreamSpec(name="S", subjects=("s",), **kw)


def _source(**kw: Any) -> SourceOptions:
    options = {"servers": "nats://h:1", "stream": "S", **{"retryTimeout": kw["retry_timeout"]}}
    return SourceOptions.from_spark_options(options)


#: (class or factory, field): every option that takes a time.
FIELDS: list[tuple[Callable[..., Any], str]] = [
    (ConnectOptions, "connect_timeout"),
    (ConnectOptions, "request_timeout"),
    (ConnectOptions, "reconnect_wait"),
    (PublisherOptions, "ack_timeout"),
    (_spec, "duplicate_window"),
    (_spec, "max_age"),
    (ProcessorOptions, "ack_wait"),
    (ProcessorOptions, "expires"),
    (ProcessorOptions, "double_ack_timeout"),
    (ProcessorOptions, "prune_interval"),
    (PullOptions, "expires"),
    (_source, "retry_timeout"),
]
ENTRY_POINTS = [
    (f"{factory.__name__}.{name}", (lambda f, n: lambda v: f(**{n: v}))(factory, name), name)
    for factory, name in FIELDS
]


@pytest.mark.parametrize(("what", "build", "read"), ENTRY_POINTS, ids=[e[0] for e in ENTRY_POINTS])
@pytest.mark.parametrize(
    ("value", "seconds"), [(90, 90.0), ("90s", 90.0), ("1.5m", 90.0), ("90000ms", 90.0)]
)
def test_every_duration_option_accepts_every_form(
    what: str, build: Callable[[Any], Any], read: str, value: Any, seconds: float
) -> None:
    assert getattr(build(value), read) == seconds, what


def test_backoff_lists_take_durations_too() -> None:
    assert PublisherOptions(retry_backoff=("50ms", 1, "1m")).retry_backoff == (0.05, 1.0, 60.0)
    assert PublisherOptions(retry_backoff="50ms,1s").retry_backoff == (0.05, 1.0)  # type: ignore[arg-type]
    assert ProcessorOptions(backoff=("1s", 5)).backoff == (1.0, 5.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(("what", "build", "read"), ENTRY_POINTS, ids=[e[0] for e in ENTRY_POINTS])
def test_every_duration_option_refuses_the_same_values(
    what: str, build: Callable[[Any], Any], read: str
) -> None:
    for value in ("soon", "-1s", True):
        with pytest.raises(ConfigError):
            build(value)
