"""Driver-side planning of the ``jetstream`` source: positions, ranges, partitions."""

from __future__ import annotations

import math
import os
from datetime import UTC, datetime
from typing import Any

from pyspark.sql.datasource import InputPartition

from .._connection import Connection
from .._errors import ConfigError, StreamNotFound
from .._names import subjects_overlap
from .._retry import leader_stream_info, retrying
from ..streams import Partitioning
from ..streams._internal import seq_at_time
from ._offsets import created_of
from ._reader import check_retention
from ._source_options import EARLIEST, LATEST, RETRY_BUDGET, SourceOptions

__all__ = [
    "MAX_PARTITION_SEQUENCES",
    "MIN_AUTO_SPLIT",
    "JetStreamPartition",
    "first_last",
    "plan_partitions",
    "plan_ranges",
    "planning_cores",
    "resolve_end",
    "resolve_start",
    "sequence_at",
    "share",
    "stream_filters",
    "stream_infos",
    "subjects_overlap",
]

#: Default of ``maxRecordsPerPartition``: the largest sequence range one task reads.
MAX_PARTITION_SEQUENCES = 1_000_000

#: Without ``minPartitions``, a read is split over the cores only down to this size.
#: A task costs 40-80 ms before its first row in local mode (measured in
#: docs/benchmarks.md), the time to read 10,000-20,000 messages; a split is worth it
#: only for a range several times that.
MIN_AUTO_SPLIT = 50_000


def planning_cores() -> int:
    """The cores of the host planning the read (the driver's): the default spread."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class JetStreamPartition(InputPartition):
    """One task's work: sequences ``[first, last]`` of ``stream`` (both inclusive).

    ``replicated`` marks a stream with replicas: a consumer or direct get may be
    served by a follower that has not applied the newest messages yet, so the
    reader confirms with the leader before it ends a range early. ``created`` is
    the creation time of the stream the range was planned in: a task finding a
    re-created stream reads nothing of it (or fails, with ``failOnDataLoss``).
    """

    def __init__(
        self,
        stream: str,
        first: int,
        last: int,
        direct: bool,
        subjects: tuple[str, ...] = (),
        *,
        replicated: bool = False,
        created: str | None = None,
    ) -> None:
        super().__init__((stream, first, last))
        self.stream, self.first, self.last, self.direct = stream, first, last, direct
        self.subjects = subjects
        self.replicated = replicated
        self.created = created

    def __repr__(self) -> str:
        return f"JetStreamPartition({self.stream!r}, {self.first}..{self.last})"


def plan_ranges(
    ranges: dict[str, tuple[int, int]],
    direct: dict[str, bool],
    min_partitions: int | None,
    max_size: int | None = None,
    filters: dict[str, tuple[str, ...]] | None = None,
    replicated: dict[str, bool] | None = None,
    created: dict[str, str] | None = None,
    cores: int | None = None,
) -> list[JetStreamPartition]:
    """Split per-stream inclusive ranges into partitions.

    Each stream gets a share of ``min_partitions`` proportional to its range
    size (at least one split), and no split is larger than ``max_size``
    sequences (default :data:`MAX_PARTITION_SEQUENCES`), as Kafka's
    ``minPartitions`` and ``maxRecordsPerPartition``. Without ``min_partitions``
    the read is spread over ``cores`` (default: :func:`planning_cores`), but
    never into splits smaller than :data:`MIN_AUTO_SPLIT` sequences in total.
    """
    sizes = {s: last - first + 1 for s, (first, last) in ranges.items() if last >= first}
    total = sum(sizes.values())
    if min_partitions is None:
        spread = cores if cores is not None else planning_cores()
        min_partitions = max(1, min(spread, total // MIN_AUTO_SPLIT))
    max_size = max_size or MAX_PARTITION_SEQUENCES
    out: list[JetStreamPartition] = []
    for stream, size in sizes.items():
        first = ranges[stream][0]
        wanted = math.ceil(min_partitions * size / total)
        pieces = max(1, wanted, math.ceil(size / max_size))
        pieces = min(pieces, size)
        step, extra = divmod(size, pieces)
        start = first
        for i in range(pieces):
            length = step + (1 if i < extra else 0)
            out.append(
                JetStreamPartition(
                    stream,
                    start,
                    start + length - 1,
                    direct[stream],
                    (filters or {}).get(stream, ()),
                    replicated=(replicated or {}).get(stream, False),
                    created=(created or {}).get(stream),
                )
            )
            start += length
    return out


async def stream_infos(conn: Connection, options: SourceOptions) -> dict[str, dict[str, Any]]:
    """``STREAM.INFO`` of every configured stream, from its leader.

    Transient errors (a leader election) are retried for ``options.retry_timeout``.

    Raises:
        StreamNotFound: naming the missing stream, the servers and the API prefix.
    """
    infos: dict[str, dict[str, Any]] = {}
    for stream in options.streams:
        try:
            infos[stream] = await retrying(
                lambda stream=stream: leader_stream_info(conn, stream),  # type: ignore[misc]
                budget=options.retry_timeout,
                budget_source=RETRY_BUDGET,
                what=f"STREAM.INFO {stream!r}",
            )
        except StreamNotFound as exc:
            raise StreamNotFound(
                f"option 'stream': stream {stream!r} does not exist on "
                f"{', '.join(options.connect.safe_servers)} (JetStream API {conn.prefix})",
                code=exc.code,
                err_code=exc.err_code,
            ) from exc
    return infos


def first_last(info: dict[str, Any]) -> tuple[int, int]:
    """The stream's first and last sequence from its ``STREAM.INFO``."""
    state = info["state"]
    return int(state.get("first_seq", 0)), int(state.get("last_seq", 0))


async def sequence_at(conn: Connection, stream: str, when: float, options: SourceOptions) -> int:
    """The first sequence of ``stream`` stored at or after ``when`` (epoch seconds); when
    none was, the sequence the next message will get (its last sequence + 1).

    :func:`oncestream.streams._internal.seq_at_time` (which checks nats-server 2.15.1's answer
    for a time past the last message), with transient errors retried for
    ``options.retry_timeout``.
    """
    moment = datetime.fromtimestamp(when, UTC)
    return await retrying(
        lambda: seq_at_time(conn, stream, moment),
        budget=options.retry_timeout,
        budget_source=RETRY_BUDGET,
        what=f"STREAM.MSG.GET {stream!r} by start time",
    )


async def resolve_start(
    conn: Connection, options: SourceOptions, infos: dict[str, dict[str, Any]], *, streaming: bool
) -> dict[str, int]:
    """Initial ``{stream: last_sequence_read}`` from startingOffsets/startingTimestamp.

    Raises:
        ConfigError: ``startingOffsets`` names a sequence past a stream's end (its
            last sequence + 1, where ``latest`` starts): named as the option's
            value, not as a checkpoint that would later fail to match the stream.
    """
    out: dict[str, int] = {}
    for stream, info in infos.items():
        first_seq, last_seq = first_last(info)
        if options.starting_timestamp is not None:
            # None stored at or after it: the stream's end, messages stored since included.
            out[stream] = await sequence_at(conn, stream, options.starting_timestamp, options) - 1
            continue
        default = LATEST if streaming else EARLIEST
        spec = options.starting.get(stream, default)
        if spec == EARLIEST:
            out[stream] = max(first_seq, 1) - 1
        elif spec == LATEST:
            out[stream] = last_seq
        else:
            if spec > last_seq + 1:
                raise ConfigError(
                    f"option 'startingOffsets' starts stream {stream!r} at sequence {spec}, "
                    f"past its end: it holds sequences up to {last_seq} (first {first_seq}), "
                    f"so the next message stored is {last_seq + 1}; give a sequence up to "
                    f"{last_seq + 1}, 'earliest' or 'latest'"
                )
            out[stream] = spec - 1
    return out


async def resolve_end(
    conn: Connection, options: SourceOptions, infos: dict[str, dict[str, Any]]
) -> dict[str, int]:
    """A batch read's last sequence per stream, from endingOffsets/endingTimestamp.

    As in Kafka, ``endingTimestamp`` ends each stream before its first message
    stored at or after that time, or at its end when there is none.
    """
    out: dict[str, int] = {}
    for stream, info in infos.items():
        last_seq = first_last(info)[1]
        if options.ending_timestamp is not None:
            seq = await sequence_at(conn, stream, options.ending_timestamp, options)
            out[stream] = min(seq - 1, last_seq)
            continue
        spec = options.ending_for(stream)
        out[stream] = last_seq if spec == LATEST else spec - 1
    return out


async def plan_partitions(
    conn: Connection,
    options: SourceOptions,
    infos: dict[str, dict[str, Any]],
    start: dict[str, int],
    end: dict[str, int],
    created: dict[str, str] | None = None,
) -> list[JetStreamPartition]:
    """Partitions for the per-stream offset ranges ``(start, end]``, checking retention first.

    ``created`` holds the creation time of the stream each range was planned in
    (default: the streams' current ones); a range of a stream re-created since
    is not read.

    Raises:
        DataLossError: when ``failOnDataLoss`` and a range begins before the stream
            does, or its stream was re-created.
    """
    if created is None:
        created = {s: c for s, i in infos.items() if (c := created_of(i))}
    ranges: dict[str, tuple[int, int]] = {}
    filters: dict[str, tuple[str, ...]] = {}
    for stream in options.streams:
        first, last = start[stream] + 1, end[stream]
        if first > last:
            continue
        if options.subjects:
            filters[stream] = stream_filters(options.subjects, infos[stream])
            if not filters[stream]:
                continue  # no filter can match this stream: nothing to read
        first = await check_retention(
            conn,
            stream,
            first,
            last,
            fail_on_data_loss=options.fail_on_data_loss,
            retry_timeout=options.retry_timeout,
            created=created.get(stream),
        )
        if first <= last:
            ranges[stream] = (first, last)
    # Direct get needs allow_direct; the consumer path works everywhere and measured
    # faster (no per-message metadata headers to ship and parse), so it is the default.
    wants_direct = options.read_method == "direct"
    direct = {s: wants_direct and bool(i["config"].get("allow_direct")) for s, i in infos.items()}
    replicated = {s: int(i["config"].get("num_replicas") or 1) > 1 for s, i in infos.items()}
    return plan_ranges(
        ranges,
        direct,
        options.min_partitions,
        options.max_records_per_partition,
        filters=filters,
        replicated=replicated,
        created=created,
    )


def stream_filters(subjects: tuple[str, ...], info: dict[str, Any]) -> tuple[str, ...]:
    """The filters of ``subjects`` that can match messages of the stream described by ``info``.

    A consumer rejects a filter outside its stream's subjects, and with several
    streams one ``subjects`` option usually names subjects of only some of them.
    Streams without subjects of their own (mirrors, sourcing streams) keep them all.
    A partitioned stream stores ``<p>.<subject>``: filters are matched against that.
    """
    config = info.get("config") or {}
    own = config.get("subjects") or []
    partitioning = Partitioning.from_config(config)
    if partitioning is not None:
        own = [*own, f"*.{partitioning.subjects}"]
    if not own:
        return subjects
    return tuple(f for f in subjects if any(subjects_overlap(f, s) for s in own))


def share(avail: dict[str, int], budget: int) -> dict[str, int]:
    """Split ``budget`` sequences over streams in proportion to what each has available."""
    total = sum(avail.values())
    shares = {s: min(a, budget * a // total) for s, a in avail.items()}
    if not any(shares.values()):
        biggest = max(avail, key=lambda s: avail[s])
        shares[biggest] = min(avail[biggest], max(1, budget))
    return shares
