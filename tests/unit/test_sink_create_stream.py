"""The sink's createStream* options are validated before any query starts (issue 12)."""

from __future__ import annotations

import pytest

from oncestream import ConfigError
from oncestream.spark._sink_options import SinkOptions

BASE = {"servers": "nats://127.0.0.1:4222", "stream": "OUT"}


def test_off_by_default() -> None:
    assert SinkOptions.from_spark_options(BASE).create_stream is None


def test_full_spec() -> None:
    opts = SinkOptions.from_spark_options(
        {
            **BASE,
            "createStream": "true",
            "createStreamSubjects": "out.a, out.b.>",
            "createStreamStorage": "memory",
            "createStreamReplicas": "3",
            "createStreamDuplicateWindow": "10m",
            "createStreamAllowAtomic": "true",
        }
    )
    spec = opts.create_stream
    assert spec is not None
    assert spec.allow_atomic and spec.to_api()["allow_atomic"] is True and not spec.allow_batched
    assert (spec.name, spec.subjects, spec.storage, spec.replicas, spec.duplicate_window) == (
        "OUT",
        ("out.a", "out.b.>"),
        "memory",
        3,
        600.0,
    )
    hash(opts)  # options stay usable as a cache key


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"createStreamSubjects": "out.>"}, "only applies with createStream=true"),
        ({"createStreamAllowAtomic": "true"}, "only applies with createStream=true"),
        (
            {
                "createStream": "true",
                "createStreamSubjects": "o.>",
                "createStreamAllowAtomic": "maybe",
            },
            "createStreamAllowAtomic must be 'true' or 'false'",
        ),
        ({"createStream": "yes please"}, "createStream must be 'true' or 'false'"),
        ({"createStream": "true"}, "needs createStreamSubjects"),
        ({"createStream": "true", "createStreamSubjects": " , "}, "needs createStreamSubjects"),
        (
            {"createStream": "true", "createStreamSubjects": "o.>", "createStreamStorage": "ssd"},
            "createStreamStorage must be 'file' or 'memory'",
        ),
        (
            {"createStream": "true", "createStreamSubjects": "o.>", "createStreamReplicas": "2"},
            "createStreamReplicas must be 1, 3 or 5",
        ),
        (
            {
                "createStream": "true",
                "createStreamSubjects": "o.>",
                "createStreamDuplicateWindow": "soon",
            },
            "createStreamDuplicateWindow must be a duration",
        ),
    ],
)
def test_bad_values_name_the_option(extra: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SinkOptions.from_spark_options({**BASE, **extra})


def test_needs_a_stream() -> None:
    with pytest.raises(ConfigError, match="needs option 'stream'"):
        SinkOptions.from_spark_options(
            {"servers": "nats://127.0.0.1:4222", "createStream": "true", "subject": "x"}
        )


@pytest.mark.parametrize(
    ("given", "server", "expected"),
    [
        (None, (2, 14, 0), True),  # unset: on where the server takes fast-ingest batches
        (None, (2, 15, 1), True),
        (None, (2, 12, 9), False),
        (None, None, False),  # a server that did not say its release: taken as too old
        ("false", (2, 15, 1), False),
        ("true", (2, 12, 9), True),  # as given (the server then refuses it, naming why)
    ],
)
def test_created_streams_allow_fast_ingest_where_the_server_takes_it(
    given: str | None, server: tuple[int, ...] | None, expected: bool
) -> None:
    options = {**BASE, "createStream": "true", "createStreamSubjects": "out.>"}
    if given is not None:
        options["createStreamAllowBatched"] = given
    spec = SinkOptions.from_spark_options(options).create_stream
    assert spec is not None
    assert spec.batched_on(server) is expected
    assert bool(spec.to_api(server).get("allow_batched")) is expected
    if given is None:
        assert "allow_batched" not in spec.to_api()  # no release given: the default is off
