"""Options of the ``jetstream`` sink and the deterministic message ids it assigns.

Pure Python (no pyspark import) so the audit and unit tests can share the id
formats with the executors.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._errors import ConfigError
from .._options import ConnectOptions, parse_positive_int
from ..publisher import PublisherOptions
from ..reader import lineage_id

__all__ = [
    "SinkOptions",
    "id_scope",
    "lineage_id",
    "position_id",
    "writer_scope",
]


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
        id_prefix: prepended to every generated message id (lets two queries
            that read the same input write the same output stream).
        task_max_failures: Spark's ``spark.task.maxFailures`` as the sink should
            assume it (the window check multiplies the Publisher's retry horizon by it).
        commits_stream: stream holding the committed-batch records.
        checkpoint: the query's ``checkpointLocation`` (Spark passes it along).

    Raises:
        ConfigError: naming the bad option.
    """

    connect: ConnectOptions
    publisher: PublisherOptions = field(default_factory=PublisherOptions)
    subject: str | None = None
    id_prefix: str = ""
    task_max_failures: int = 4
    commits_stream: str = "ONCESTREAM_SINK_COMMITS"
    checkpoint: str | None = None

    def __post_init__(self) -> None:
        if self.subject is not None and (not self.subject or " " in self.subject):
            raise ConfigError(f"option 'subject' is not a valid subject: {self.subject!r}")
        if any(c in self.id_prefix for c in " \r\n"):
            raise ConfigError(f"option 'idPrefix' must not contain whitespace: {self.id_prefix!r}")
        if not self.commits_stream or any(c in self.commits_stream for c in " .*>"):
            raise ConfigError(
                f"option 'commitsStream' is not a stream name: {self.commits_stream!r}"
            )

    @property
    def stream(self) -> str | None:
        """The expected target stream, if given."""
        return self.publisher.stream

    @classmethod
    def from_spark_options(cls, options: Mapping[str, str]) -> SinkOptions:
        """Parse Spark's string options (keys case-insensitive).

        Example::

            SinkOptions.from_spark_options({"servers": url, "stream": "OUT", "maxInflight": "2000"})
        """
        lowered = {k.lower(): v for k, v in options.items()}
        kwargs: dict[str, Any] = {
            "connect": ConnectOptions.from_spark_options(options).replace(
                name="oncestream-spark-sink"
            ),
            "publisher": PublisherOptions.from_spark_options(options),
        }
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
        return cls(**kwargs)
