"""Pure logic of the sink: option parsing, schema checks and the id formats (no SparkSession)."""

from __future__ import annotations

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from oncestream import ConfigError
from oncestream.spark._sink import _layout
from oncestream.spark._sink_options import SinkOptions, lineage_id, position_id, writer_scope

URL = "nats://127.0.0.1:4222"


def test_options_parse_publisher_and_sink_keys() -> None:
    opts = SinkOptions.from_spark_options(
        {
            "servers": URL,
            "stream": "OUT",
            "maxInflight": "100",
            "ackTimeout": "250ms",
            "idPrefix": "q1:",
            "checkpointLocation": "/chk",
            "taskMaxFailures": "8",
        }
    )
    assert opts.stream == "OUT" and opts.publisher.max_inflight == 100
    assert opts.publisher.ack_timeout == 0.25
    assert (opts.id_prefix, opts.checkpoint, opts.task_max_failures) == ("q1:", "/chk", 8)
    with pytest.raises(ConfigError, match="servers"):
        SinkOptions.from_spark_options({"stream": "OUT"})
    with pytest.raises(ConfigError, match="maxInflight"):
        SinkOptions.from_spark_options({"servers": URL, "maxInflight": "0"})
    with pytest.raises(ConfigError, match="subject"):
        SinkOptions.from_spark_options({"servers": URL, "subject": "a b"})


@pytest.mark.parametrize("ingest", ["auto", "fast", "acks"])
def test_ingest_publisher_paths_go_to_the_publisher(ingest: str) -> None:
    opts = SinkOptions.from_spark_options({"servers": URL, "stream": "OUT", "ingest": ingest})
    assert (opts.ingest, opts.publisher.ingest, opts.publisher.check_window) == (
        ingest,
        ingest,
        True,
    )


def test_ingest_atomic_and_its_batch_size() -> None:
    opts = SinkOptions.from_spark_options({"servers": URL, "stream": "OUT", "ingest": "atomic"})
    assert (opts.ingest, opts.atomic_batch_size) == ("atomic", 1000)
    # The task's Publisher only writes attempt markers: no window guard, no fast batches.
    assert (opts.publisher.ingest, opts.publisher.check_window) == ("acks", False)
    sized = SinkOptions.from_spark_options(
        {"servers": URL, "stream": "OUT", "INGEST": "atomic", "ATOMICBATCHSIZE": "250"}
    )
    assert sized.atomic_batch_size == 250
    hash(sized)  # options stay usable as a cache key
    assert (
        SinkOptions(
            connect=opts.connect, publisher=opts.publisher, ingest="atomic", atomic_batch_size=1
        ).atomic_batch_size
        == 1
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"ingest": "bulk"},
            "option 'ingest' must be 'auto', 'fast', 'acks' or 'atomic', got 'bulk'",
        ),
        ({"ingest": "ATOMIC"}, "got 'ATOMIC'"),
        (
            {"ingest": "atomic", "atomicBatchSize": "1001"},
            r"'atomicBatchSize' must be 1\.\.1000.*got 1001",
        ),
        (
            {"ingest": "atomic", "atomicBatchSize": "0"},
            "atomicBatchSize must be an integer > 0, got '0'",
        ),
        (
            {"ingest": "atomic", "atomicBatchSize": "ten"},
            "atomicBatchSize must be an integer, got 'ten'",
        ),
        (
            {"atomicBatchSize": "100"},
            "'atomicBatchSize' only applies with ingest=atomic, got ingest='auto'",
        ),
        ({"ingest": "atomic", "stream": ""}, "ingest=atomic needs option 'stream'"),
        ({"ingest": "atomic", "atomicBatchSise": "9"}, "did you mean 'atomicBatchSize'"),
    ],
)
def test_bad_ingest_options_name_the_value(extra: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SinkOptions.from_spark_options({"servers": URL, "stream": "OUT", **extra})


def test_atomic_batch_size_is_checked_on_the_dataclass_too() -> None:
    base = SinkOptions.from_spark_options({"servers": URL, "stream": "OUT"})
    for bad in (0, 1001, True, 2.5):
        with pytest.raises(ConfigError, match=rf"'atomicBatchSize' must be 1\.\.1000.*got {bad!r}"):
            SinkOptions(connect=base.connect, publisher=base.publisher, atomic_batch_size=bad)  # type: ignore[arg-type]


def test_ids_are_deterministic_and_scoped_by_checkpoint() -> None:
    assert lineage_id("ORDERS", 17) == "ORDERS:17"
    assert writer_scope("q-id", "/chk/a") == writer_scope(None, "/chk/a")
    assert writer_scope("q-id", "/chk/a") != writer_scope("q-id", "/chk/b")
    assert position_id("s", 3, 1, 42) == "s:3:1:42"


def _schema(*fields: tuple[str, object]) -> StructType:
    return StructType([StructField(name, kind, True) for name, kind in fields])  # type: ignore[arg-type]


def test_layout_names_every_problem() -> None:
    opts = SinkOptions.from_spark_options({"servers": URL})
    with pytest.raises(ConfigError) as err:
        _layout(_schema(("data", LongType()), ("headers", StringType())), opts)
    text = str(err.value)
    assert "column 'data' must be binary or string" in text
    assert "missing column 'subject'" in text
    assert "column 'headers' must be map" in text


def test_layout_detects_lineage_and_header_kinds() -> None:
    opts = SinkOptions.from_spark_options({"servers": URL})
    layout = _layout(
        _schema(
            ("subject", StringType()),
            ("data", BinaryType()),
            ("headers", MapType(StringType(), ArrayType(StringType()))),
            ("stream", StringType()),
            ("sequence", LongType()),
        ),
        opts,
    )
    assert layout.lineage and layout.headers == "array" and layout.data_binary
    with_id = _layout(
        _schema(
            ("subject", StringType()),
            ("data", StringType()),
            ("msg_id", StringType()),
            ("stream", StringType()),
            ("sequence", LongType()),
        ),
        opts,
    )
    assert with_id.msg_id and not with_id.lineage  # an explicit msg_id wins over lineage
