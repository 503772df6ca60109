"""Options of the ``jetstream`` sink and the deterministic message ids it assigns.

Pure Python (no pyspark import) so the audit and unit tests can share the id
formats with the executors.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .._errors import ConfigError
from .._names import check_publish_subject, check_stream_name
from .._options import ConnectOptions, parse_bool, parse_duration, parse_positive_int
from ..publish import PublisherOptions
from ..publish._internal import MAX_BATCH
from ..streams import StreamSpec, lineage_id
from ._commits import COMMITS_STREAM
from ._options import (
    CONNECT_OPTIONS,
    PUBLISHER_OPTIONS,
    check_known,
    connect_options,
    publisher_options,
)

__all__ = [
    "INGEST",
    "SINK_OPTIONS",
    "SinkOptions",
    "id_scope",
    "lineage_id",
    "position_id",
    "row_digest",
    "writer_scope",
]


#: Every option of the sink (canonical spelling; keys are case-insensitive).
SINK_OPTIONS = (
    *CONNECT_OPTIONS,
    *PUBLISHER_OPTIONS,
    "subject",
    "atomicBatchSize",
    "idPrefix",
    "taskMaxFailures",
    "commitsStream",
    "createStream",
    "createStreamSubjects",
    "createStreamStorage",
    "createStreamReplicas",
    "createStreamDuplicateWindow",
    "createStreamAllowBatched",
    "createStreamAllowAtomic",
)

#: The sink's ``ingest`` values: the Publisher's three, and atomic chunks.
INGEST = ("auto", "fast", "acks", "atomic")
Ingest = Literal["auto", "fast", "acks", "atomic"]


def writer_scope(query_id: str | None, checkpoint: str | None) -> str:
    """A short, stable identifier of one streaming query (or batch write).

    The checkpoint location is what survives a restart, so it wins over the
    query id (which Spark also keeps in the checkpoint's metadata file).
    """
    basis = checkpoint or query_id or "batch"
    return hashlib.sha1(basis.encode()).hexdigest()[:12]


def id_scope(query_id: str | None, checkpoint: str | None) -> str:
    """The scope of position ids: checkpoint *and* query id.

    Spark keeps the query id in the checkpoint, so it is stable across
    restarts, while a new query started on a reused checkpoint path gets a new
    one and so cannot produce the ids of the old query's batches.
    """
    return hashlib.sha1(f"{checkpoint}|{query_id}".encode()).hexdigest()[:12]


def position_id(scope: str, batch_id: int, partition_id: int, row_index: int) -> str:
    """The message id of a row identified only by its position in a micro-batch.

    Deterministic only when a replay of ``batch_id`` produces the same rows in
    the same partitions in the same order (see docs/spark-sink.md).
    """
    return f"{scope}:{batch_id}:{partition_id}:{row_index}"


@dataclass(frozen=True, kw_only=True)
class SinkOptions:
    """Validated options of ``df.write[Stream].format("jetstream")``.

    Args:
        connect: where to connect (``servers``, auth, ``domain`` / ``apiPrefix``).
        publisher: Publisher settings (``maxInflight``, ``ackTimeout``,
            ``maxAttempts``, ``retryBackoff``, ``stream``, ``checkWindow``).
            ``stream`` is the expected target: every publish carries it, and the
            server rejects a publish that would land in another stream.
        subject: fixed subject when the DataFrame has no ``subject`` column.
        ingest: ``auto`` / ``fast`` / ``acks``: the Publisher's paths
            (``PublisherOptions.ingest``); ``atomic``: each task publishes its
            rows as atomic batches of ``atomic_batch_size``
            (:class:`~oncestream.publish.AtomicPublisher`; the target needs
            ``allow_atomic``). The Publisher then only writes attempt markers, and
            the window guard does not apply (``publisher.check_window`` is off).
        atomic_batch_size: rows per atomic batch, 1..1000 (``ingest=atomic`` only).
        id_prefix: prepended to every generated message id (lets two queries
            that read the same input write the same output stream).
        task_max_failures: Spark's ``spark.task.maxFailures`` as the sink should
            assume it (the window check multiplies the Publisher's retry horizon by it).
        commits_stream: stream holding the committed-batch records.
        checkpoint: the query's ``checkpointLocation`` (Spark passes it along).
        create_stream: the target stream to create when it is missing
            (``createStream=true`` with ``createStreamSubjects``, ``createStreamStorage``,
            ``createStreamReplicas``, ``createStreamDuplicateWindow``,
            ``createStreamAllowBatched``, ``createStreamAllowAtomic``); an existing
            stream is never changed.

    Raises:
        ConfigError: naming the bad option.
    """

    connect: ConnectOptions
    publisher: PublisherOptions = field(default_factory=PublisherOptions)
    subject: str | None = None
    ingest: Ingest = "auto"
    atomic_batch_size: int = MAX_BATCH
    id_prefix: str = ""
    task_max_failures: int = 4
    commits_stream: str = COMMITS_STREAM
    checkpoint: str | None = None
    create_stream: StreamSpec | None = field(default=None, hash=False)  # StreamSpec: unhashable

    def __post_init__(self) -> None:
        if self.ingest not in INGEST:
            raise ConfigError(
                f"option 'ingest' must be {', '.join(map(repr, INGEST[:-1]))} or "
                f"{INGEST[-1]!r}, got {self.ingest!r}"
            )
        size = self.atomic_batch_size
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_BATCH:
            raise ConfigError(
                f"option 'atomicBatchSize' must be 1..{MAX_BATCH} (rows per atomic batch; "
                f"{MAX_BATCH} is the server's largest), got {size!r}"
            )
        if self.ingest == "atomic":
            if self.stream is None:
                raise ConfigError(
                    "ingest=atomic needs option 'stream': the target that stores each "
                    "atomic batch, and where a lost commit ack is looked up"
                )
            if self.publisher.ingest != "acks" or self.publisher.check_window:
                # The task's Publisher only writes attempt markers; no re-send of a row
                # depends on the window, so its guard does not apply.
                pub = replace(self.publisher, ingest="acks", check_window=False)
                object.__setattr__(self, "publisher", pub)
        elif self.publisher.ingest != self.ingest:
            object.__setattr__(self, "publisher", replace(self.publisher, ingest=self.ingest))
        if self.create_stream is not None and self.create_stream.name != self.stream:
            raise ConfigError(
                f"createStream creates the target stream: option 'stream' must be "
                f"{self.create_stream.name!r}, got {self.stream!r}"
            )
        if self.subject is not None:
            check_publish_subject(self.subject, "option 'subject'")
        if any(c in self.id_prefix for c in " \r\n"):
            raise ConfigError(f"option 'idPrefix' must not contain whitespace: {self.id_prefix!r}")
        check_stream_name(self.commits_stream, "option 'commitsStream'")

    @property
    def stream(self) -> str | None:
        """The expected target stream, if given."""
        return self.publisher.stream

    @classmethod
    def from_spark_options(cls, options: Mapping[str, str]) -> SinkOptions:
        """Parse Spark's string options (keys case-insensitive; unknown keys are refused).

        Raises:
            ConfigError: an unknown option (with what to use instead) or a bad value.

        Example::

            SinkOptions.from_spark_options({"servers": url, "stream": "OUT", "maxInflight": "2000"})
        """
        check_known(options, SINK_OPTIONS, "sink")
        lowered = {k.lower(): v for k, v in options.items()}
        ingest = lowered.get("ingest", "auto")
        kwargs: dict[str, Any] = {
            "connect": connect_options(options, name="oncestream-spark-sink"),
            # The sink validates ingest itself: it takes one value more than the Publisher.
            "publisher": publisher_options({k: v for k, v in lowered.items() if k != "ingest"}),
            "ingest": ingest,
        }
        if "atomicbatchsize" in lowered:
            if ingest != "atomic":
                raise ConfigError(
                    "option 'atomicBatchSize' only applies with ingest=atomic, got "
                    f"ingest={ingest!r}"
                )
            kwargs["atomic_batch_size"] = parse_positive_int(
                "atomicBatchSize", lowered["atomicbatchsize"]
            )
        if lowered.get("subject"):
            kwargs["subject"] = lowered["subject"]
        if "idprefix" in lowered:
            kwargs["id_prefix"] = lowered["idprefix"]
        if "taskmaxfailures" in lowered:
            kwargs["task_max_failures"] = parse_positive_int(
                "taskMaxFailures", lowered["taskmaxfailures"]
            )
        if lowered.get("commitsstream"):
            kwargs["commits_stream"] = lowered["commitsstream"]
        if lowered.get("checkpointlocation"):
            kwargs["checkpoint"] = lowered["checkpointlocation"]
        kwargs["create_stream"] = _create_stream_spec(lowered, kwargs["publisher"].stream)
        return cls(**kwargs)


_CREATE_KEYS = {
    "createstreamsubjects": "createStreamSubjects",
    "createstreamstorage": "createStreamStorage",
    "createstreamreplicas": "createStreamReplicas",
    "createstreamduplicatewindow": "createStreamDuplicateWindow",
    "createstreamallowbatched": "createStreamAllowBatched",
    "createstreamallowatomic": "createStreamAllowAtomic",
}


def _create_stream_spec(lowered: Mapping[str, str], stream: str | None) -> StreamSpec | None:
    """The ``createStream*`` options as a :class:`StreamSpec`, validated up front."""
    create = parse_bool("createStream", lowered.get("createstream", "false"))
    given = [name for key, name in _CREATE_KEYS.items() if key in lowered]
    if not create:
        if given:
            raise ConfigError(
                f"option {given[0]!r} only applies with createStream=true "
                "(the sink creates its target stream only when asked)"
            )
        return None
    if not stream:
        raise ConfigError("createStream=true needs option 'stream' (the stream to create)")
    subjects = tuple(
        part.strip() for part in lowered.get("createstreamsubjects", "").split(",") if part.strip()
    )
    if not subjects:
        raise ConfigError(
            f"createStream=true needs createStreamSubjects: the subjects stream {stream!r} "
            "captures, comma-separated (e.g. 'enriched.>'), covering every subject written"
        )
    storage = lowered.get("createstreamstorage", "file").strip().lower()
    if storage not in ("file", "memory"):
        raise ConfigError(f"createStreamStorage must be 'file' or 'memory', got {storage!r}")
    replicas = parse_positive_int("createStreamReplicas", lowered.get("createstreamreplicas", "1"))
    if replicas not in (1, 3, 5):
        raise ConfigError(f"createStreamReplicas must be 1, 3 or 5, got {replicas}")
    window = parse_duration(
        "createStreamDuplicateWindow", lowered.get("createstreamduplicatewindow", "2m")
    )
    batched_opt = lowered.get("createstreamallowbatched")  # unset: where the server takes them
    batched = None if batched_opt is None else parse_bool("createStreamAllowBatched", batched_opt)
    atomic = parse_bool("createStreamAllowAtomic", lowered.get("createstreamallowatomic", "false"))
    return StreamSpec(
        name=stream,
        subjects=subjects,
        storage="memory" if storage == "memory" else "file",
        replicas=replicas,
        duplicate_window=window,
        allow_batched=batched,
        allow_atomic=atomic,
    )


def row_digest(subject: str | None, data: Any) -> str:
    """A short hash of a row's subject and data (part of batch-write msg ids)."""
    raw = data if isinstance(data, bytes) else str(data).encode()
    return hashlib.blake2b((subject or "").encode() + b"\0" + raw, digest_size=8).hexdigest()
