"""Options of the ``jetstream`` Spark source, parsed and validated in the driver."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from .._errors import ConfigError
from .._names import check_stream_name, check_subject_filter
from .._options import (
    ConnectOptions,
    parse_bool,
    parse_duration,
    parse_epoch_millis,
    parse_int,
    parse_positive_int,
    parse_time,
)
from ._options import CONNECT_OPTIONS, check_known, connect_options
from ._options import lowered as _lowered

__all__ = [
    "DEFAULT_MAX_TRIGGER_DELAY",
    "EARLIEST",
    "LATEST",
    "RETRY_BUDGET",
    "SOURCE_OPTIONS",
    "SourceOptions",
    "StartSpec",
]

EARLIEST = -2
LATEST = -1

#: Kafka's default ``maxTriggerDelay``: 15 minutes.
DEFAULT_MAX_TRIGGER_DELAY = 900.0

#: The one partition of a stream in Kafka's per-partition JSON (``{"ORDERS": {"0": 23}}``).
PARTITION = "0"

#: What sets the retry budget of the source's reads and planning (named in timeouts).
RETRY_BUDGET = "option 'retryTimeout'"

#: A start/end position per stream: a sequence (>= 1), EARLIEST or LATEST.
StartSpec = dict[str, int]

#: Every option of the source (canonical spelling; keys are case-insensitive).
SOURCE_OPTIONS = (
    *CONNECT_OPTIONS,
    "stream",
    "subjects",
    "startingOffsets",
    "startingTimestamp",
    "endingOffsets",
    "endingTimestamp",
    "maxMessagesPerTrigger",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "maxBytesPerTrigger",
    "minPartitions",
    "maxRecordsPerPartition",
    "failOnDataLoss",
    "includeHeaders",
    "fetchBatch",
    "readMethod",
    "retryTimeout",
)


def _position(name: str, stream: str, value: Any) -> Any:
    """A stream's position in the JSON of ``name``: flat, or Kafka's ``{"0": position}``.

    A stream is one ordered log, Kafka's single partition ``"0"``; naming other
    partitions is refused.
    """
    if not isinstance(value, dict):
        return value
    if set(value) != {PARTITION}:
        got = ", ".join(repr(k) for k in value) or "none"
        raise ConfigError(
            f"option {name!r}: stream {stream!r} is one ordered log, Kafka's single partition "
            f'"0" ({{"{stream}": {{"0": 23}}}} or {{"{stream}": 23}}), got partitions {got}; '
            "split reads with 'minPartitions'"
        )
    return value[PARTITION]


def _parse_offsets(name: str, value: str, streams: tuple[str, ...], *, ending: bool) -> StartSpec:
    """Parse ``earliest`` / ``latest`` / JSON ``{"STREAM": seq}`` into a per-stream spec.

    Kafka's per-partition form ``{"STREAM": {"0": seq}}`` is accepted too.
    """
    text = value.strip()
    allowed = "'latest' or a JSON object" if ending else "'earliest', 'latest' or a JSON object"
    example = f'{{"{streams[0]}": 1042}}'
    if text.lower() == "latest":
        return dict.fromkeys(streams, LATEST)
    if text.lower() == "earliest" and not ending:
        return dict.fromkeys(streams, EARLIEST)
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise ConfigError(
            f"option {name!r} must be {allowed} like {example}, got {value!r}"
        ) from None
    if not isinstance(parsed, dict) or not parsed:
        raise ConfigError(f"option {name!r} must be {allowed} like {example}, got {value!r}")
    spec: StartSpec = {}
    for key, raw in parsed.items():
        if key not in streams:
            raise ConfigError(
                f"option {name!r} names stream {key!r}, which is not in option 'stream' "
                f"({', '.join(streams)})"
            )
        seq = _position(name, key, raw)
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < -2 or seq == 0:
            raise ConfigError(
                f"option {name!r}: the position of stream {key!r} must be a sequence >= 1, "
                f"-2 (earliest) or -1 (latest), got {seq!r}"
            )
        parse_int(f"option {name!r}: the position of stream {key!r}", seq)
        if ending and seq == EARLIEST:
            raise ConfigError(f"option {name!r}: -2 (earliest) is not allowed as an ending offset")
        spec[key] = seq
    for stream in streams:
        spec.setdefault(stream, LATEST if ending else EARLIEST)
    return spec


def _parse_timestamp(name: str, value: str) -> float:
    """Milliseconds since the epoch (Kafka style) or an ISO-8601 time with a zone -> epoch
    seconds (the time rule of :func:`oncestream._options.parse_time`, which parses it).

    Up to 9999-12-31 (what a datetime holds); a time after every message ends a
    batch read at the stream's end, as in Kafka.
    """
    text = value.strip()
    try:
        int(text)
    except ValueError:
        return parse_time(
            f"option {name!r}", text, ago=False, also="milliseconds since the epoch"
        ).timestamp()
    return parse_epoch_millis(f"option {name!r} (milliseconds since the epoch)", text).timestamp()


def _parse_trigger_delay(value: str) -> float:
    """Kafka's ``maxTriggerDelay`` with a unit; a bare number is ambiguous and refused.

    Kafka reads ``"900"`` as milliseconds, oncestream's durations as seconds.
    """
    text = value.strip()
    try:
        float(text)
    except ValueError:
        return parse_duration("option 'maxTriggerDelay'", text)
    raise ConfigError(
        f"option 'maxTriggerDelay' needs a unit, like '15m', '30s' or '500ms', got {value!r} "
        "(Kafka reads a bare number as milliseconds, oncestream durations as seconds)"
    )


@dataclass(frozen=True, kw_only=True)
class SourceOptions:
    """Validated options of ``spark.read/readStream.format("jetstream")``.

    Positions (see ``docs/spark-source.md``): ``starting`` holds, per stream,
    the first sequence to read (Kafka's inclusive starting offset), or
    ``EARLIEST``/``LATEST``; ``ending`` holds the sequence to stop *before*
    (Kafka's exclusive ending offset), or ``LATEST``. The checkpointed offset
    is ``{stream: last_sequence_read}``.

    Raises:
        ConfigError: naming the option, the bad value and what is allowed.

    Example::

        opts = SourceOptions.from_spark_options({"servers": url, "stream": "ORDERS"})
    """

    connect: ConnectOptions
    streams: tuple[str, ...]
    subjects: tuple[str, ...] = ()
    starting: StartSpec = field(default_factory=dict)
    starting_timestamp: float | None = None
    ending: StartSpec = field(default_factory=dict)
    ending_timestamp: float | None = None
    max_messages_per_trigger: int | None = None
    min_messages_per_trigger: int | None = None
    max_trigger_delay: float | None = None
    max_bytes_per_trigger: int | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    fetch_batch: int = 8192
    read_method: str = "consumer"
    retry_timeout: float = 30.0

    def __post_init__(self) -> None:
        if not self.streams:
            raise ConfigError("option 'stream' must name at least one stream")
        if len(set(self.streams)) != len(self.streams):
            raise ConfigError(f"option 'stream' names a stream twice: {','.join(self.streams)}")
        for stream in self.streams:
            check_stream_name(stream, "option 'stream'")
        for subject in self.subjects:
            check_subject_filter(subject, "option 'subjects'")
        if self.read_method not in ("consumer", "direct"):
            raise ConfigError(
                f"option 'readMethod' must be 'consumer' or 'direct', got {self.read_method!r}"
            )
        if self.starting and self.starting_timestamp is not None:
            raise ConfigError("give either 'startingOffsets' or 'startingTimestamp', not both")
        if self.ending and self.ending_timestamp is not None:
            raise ConfigError("give either 'endingOffsets' or 'endingTimestamp', not both")
        if (
            self.starting_timestamp is not None
            and self.ending_timestamp is not None
            and self.ending_timestamp < self.starting_timestamp
        ):
            raise ConfigError(
                f"option 'endingTimestamp' ({self.ending_timestamp * 1000:.0f} ms) is before "
                f"'startingTimestamp' ({self.starting_timestamp * 1000:.0f} ms): the ending "
                "timestamp must be >= the starting one"
            )
        if self.max_trigger_delay is not None:
            if self.min_messages_per_trigger is None:
                raise ConfigError(
                    "option 'maxTriggerDelay' applies only with 'minOffsetsPerTrigger' (how long "
                    "a micro-batch may wait for that minimum); set both, or neither"
                )
            if isinstance(self.max_trigger_delay, bool) or not self.max_trigger_delay >= 0:
                raise ConfigError(
                    "option 'maxTriggerDelay' must be a duration >= 0s like '15m', "
                    f"got {self.max_trigger_delay!r}"
                )
        for stream, end in self.ending.items():
            start = self.starting.get(stream, EARLIEST)
            if start > 0 and end > 0 and end < start:
                raise ConfigError(
                    f"option 'endingOffsets' ends stream {stream!r} at sequence {end}, before "
                    f"its start {start} in 'startingOffsets': the ending offset is exclusive "
                    f'and must be >= the starting offset (e.g. {{"{stream}": {start + 100}}})'
                )
        if (
            self.min_messages_per_trigger is not None
            and self.max_messages_per_trigger is not None
            and self.min_messages_per_trigger > self.max_messages_per_trigger
        ):
            # Kafka's source refuses it too (KafkaSourceProvider.validateStreamOptions): a
            # trigger would wait for more messages than a batch may read.
            raise ConfigError(
                f"option 'minOffsetsPerTrigger' ({self.min_messages_per_trigger}) is higher "
                f"than 'maxOffsetsPerTrigger' / 'maxMessagesPerTrigger' "
                f"({self.max_messages_per_trigger}): the minimum must be <= the maximum"
            )
        for name, value in (
            ("maxMessagesPerTrigger", self.max_messages_per_trigger),
            ("minOffsetsPerTrigger", self.min_messages_per_trigger),
            ("maxBytesPerTrigger", self.max_bytes_per_trigger),
            ("minPartitions", self.min_partitions),
            ("maxRecordsPerPartition", self.max_records_per_partition),
            ("fetchBatch", self.fetch_batch),
        ):
            if value is not None and value <= 0:
                raise ConfigError(f"option {name!r} must be an integer > 0, got {value!r}")
        if isinstance(self.retry_timeout, bool) or not 0 <= self.retry_timeout <= 3600:
            raise ConfigError(
                "option 'retryTimeout' must be a duration from 0s (no retries) to 1h, "
                f"got {self.retry_timeout!r}"
            )

    @property
    def trigger_delay(self) -> float:
        """Seconds a micro-batch waits for ``minOffsetsPerTrigger`` (Kafka's default: 15 min)."""
        if self.max_trigger_delay is None:
            return DEFAULT_MAX_TRIGGER_DELAY
        return self.max_trigger_delay

    def starting_for(self, stream: str) -> int:
        """The configured start of ``stream``: a sequence, EARLIEST or LATEST."""
        return self.starting.get(stream, EARLIEST)

    def ending_for(self, stream: str) -> int:
        """The configured (exclusive) end of ``stream`` for batch reads: a sequence or LATEST."""
        return self.ending.get(stream, LATEST)

    @classmethod
    def from_spark_options(cls, options: Mapping[str, str]) -> SourceOptions:
        """Parse Spark's string options (keys are case-insensitive).

        Raises:
            ConfigError: on a missing, unknown or invalid option.
        """
        check_known(options, SOURCE_OPTIONS, "source")
        connect = connect_options(options)
        lowered = _lowered(options)
        raw_streams = lowered.get("stream", "")
        streams = tuple(s.strip() for s in raw_streams.split(",") if s.strip())
        if not streams:
            raise ConfigError(
                "option 'stream' is required: one stream name or a comma list, "
                "e.g. .option('stream', 'ORDERS')"
            )
        subjects = tuple(s.strip() for s in lowered.get("subjects", "").split(",") if s.strip())
        kwargs: dict[str, Any] = {"connect": connect, "streams": streams, "subjects": subjects}
        if lowered.get("readmethod"):
            kwargs["read_method"] = lowered["readmethod"].strip().lower()
        if lowered.get("startingoffsets"):
            kwargs["starting"] = _parse_offsets(
                "startingOffsets", lowered["startingoffsets"], streams, ending=False
            )
        if lowered.get("startingtimestamp"):
            kwargs["starting_timestamp"] = _parse_timestamp(
                "startingTimestamp", lowered["startingtimestamp"]
            )
        if lowered.get("endingoffsets"):
            kwargs["ending"] = _parse_offsets(
                "endingOffsets", lowered["endingoffsets"], streams, ending=True
            )
        if lowered.get("endingtimestamp"):
            kwargs["ending_timestamp"] = _parse_timestamp(
                "endingTimestamp", lowered["endingtimestamp"]
            )
        if lowered.get("maxtriggerdelay"):
            kwargs["max_trigger_delay"] = _parse_trigger_delay(lowered["maxtriggerdelay"])
        given = [
            k for k in ("maxOffsetsPerTrigger", "maxMessagesPerTrigger") if lowered.get(k.lower())
        ]
        if len(given) == 2:
            raise ConfigError(
                "give either 'maxOffsetsPerTrigger' (Kafka's name) or 'maxMessagesPerTrigger', "
                "not both: they are the same limit"
            )
        for key, attr in (
            ("maxMessagesPerTrigger", "max_messages_per_trigger"),
            ("maxOffsetsPerTrigger", "max_messages_per_trigger"),
            ("minOffsetsPerTrigger", "min_messages_per_trigger"),
            ("maxBytesPerTrigger", "max_bytes_per_trigger"),
            ("minPartitions", "min_partitions"),
            ("maxRecordsPerPartition", "max_records_per_partition"),
            ("fetchBatch", "fetch_batch"),
        ):
            raw = lowered.get(key.lower())
            if raw is not None and raw != "":
                kwargs[attr] = parse_positive_int(f"option {key!r}", raw)
        raw = lowered.get("retrytimeout")
        if raw is not None and raw != "":
            kwargs["retry_timeout"] = parse_duration("option 'retryTimeout'", raw)
        for key, attr in (
            ("failOnDataLoss", "fail_on_data_loss"),
            ("includeHeaders", "include_headers"),
        ):
            raw = lowered.get(key.lower())
            if raw is not None and raw != "":
                kwargs[attr] = parse_bool(f"option {key!r}", raw)
        return cls(**kwargs)
