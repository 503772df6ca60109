"""What differs between the supported PySpark releases (4.0 to 4.3), in one place.

Two things changed for Python data sources after 4.0:

- **Admission control** (PySpark 4.2): Spark hands a streaming reader the batch's
  start and a read limit (``latestOffset(start, limit)``, ``getDefaultReadLimit``)
  and supports ``Trigger.AvailableNow`` (``prepareForTriggerAvailableNow``).
  Before 4.2 Spark calls ``latestOffset()`` with no arguments, and before it knows
  where the batch starts: on a new query before ``initialOffset()``, and for
  ``Trigger.AvailableNow`` (Spark's own wrapper, which asks once and reads up to
  that end in one batch) before anything else. A read limit cannot be honoured
  then, so ``maxMessagesPerTrigger``, ``maxBytesPerTrigger`` and
  ``minOffsetsPerTrigger`` are refused on 4.0/4.1 (:func:`refuse_read_limits`),
  by the data source's ``schema()``, which Spark calls when the DataFrame is
  defined (classic ``load()``; under Connect the command that first analyses it,
  such as ``start()``): the stream reader itself is made only once the query runs,
  in its own thread, where the refusal would surface late, inside the query's
  failure. ``schema()`` cannot tell ``spark.read`` from ``spark.readStream``, so
  a batch read is refused the options too there (they mean nothing to it).
  The reader still keeps the start Spark told it last (:class:`SeenOffset`:
  ``partitions(start, end)`` per batch, and ``partitions(x, x)`` at a restart,
  Spark's ``setLatestSeenOffset`` with the checkpoint's latest offset), so the
  checks against a deleted and re-created stream run as on 4.2.
- **Arrow stream writers** (PySpark 4.1): ``DataSourceStreamArrowWriter``. On 4.0
  a stream writer that is also a ``DataSourceArrowWriter`` gets Arrow batches from
  the same worker code, which :data:`StreamArrowWriter` builds.

Everything else oncestream uses (``DataSourceStreamReader``, Arrow batches from
``read``, ``DataSourceArrowWriter``, ``DataFrame.toArrow``, Spark Connect) is in
4.0. Tests: tests/spark/test_compat.py runs on the newest and the oldest release
(``make test`` runs the latter in a second venv).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyspark
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter

from .._errors import ConfigError

__all__ = [
    "ADMISSION_CONTROL",
    "SPARK_VERSION",
    "ReadAllAvailable",
    "ReadLimit",
    "ReadMaxBytes",
    "ReadMaxRows",
    "ReadMinRows",
    "SeenOffset",
    "StreamArrowWriter",
    "SupportsTriggerAvailableNow",
    "read_limit_options",
    "refuse_read_limits",
    "spark_version",
]


def spark_version(text: str) -> tuple[int, int]:
    """``(major, minor)`` of a PySpark version string such as ``4.0.1`` or ``4.2.0.dev1``."""
    parts = text.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        raise ConfigError(f"cannot read the PySpark version {text!r}") from None


#: The installed PySpark's (major, minor).
SPARK_VERSION = spark_version(pyspark.__version__)

#: Spark passes the start and a read limit to ``latestOffset`` and supports AvailableNow.
ADMISSION_CONTROL = SPARK_VERSION >= (4, 2)

if TYPE_CHECKING or ADMISSION_CONTROL:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxBytes,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )
else:  # PySpark 4.0/4.1: the same shapes, used by the reader's own budget code

    class ReadLimit:
        """How much a micro-batch may read (PySpark 4.2's class of that name)."""

    @dataclass
    class ReadAllAvailable(ReadLimit):
        """No limit."""

    @dataclass
    class ReadMinRows(ReadLimit):
        """Skip a trigger until ``min_rows`` are available."""

        min_rows: int

    @dataclass
    class ReadMaxRows(ReadLimit):
        """At most ``max_rows`` rows."""

        max_rows: int

    @dataclass
    class ReadMaxBytes(ReadLimit):
        """At most ``max_bytes`` bytes."""

        max_bytes: int

    class SupportsTriggerAvailableNow:
        """Nothing: Spark 4.0/4.1 wrap a Python source for AvailableNow themselves."""


if TYPE_CHECKING or SPARK_VERSION >= (4, 1):
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as StreamArrowWriter
else:

    class StreamArrowWriter(DataSourceStreamWriter, DataSourceArrowWriter):  # type: ignore[misc]
        """PySpark 4.0: a stream writer that its write worker feeds Arrow batches."""


@dataclass
class SeenOffset:
    """The latest offset Spark told a streaming reader about (PySpark < 4.2 only).

    Updated from ``initialOffset()`` and from ``partitions(start, end)``; the
    next micro-batch starts there. None until Spark said anything (a new query's
    first batch, or an AvailableNow run).
    """

    offset: dict[str, Any] | None = None

    def saw(self, offset: dict[str, Any]) -> None:
        self.offset = dict(offset)


#: The read limit options, each as messages name it and its spellings (Spark's
#: options ignore case; Kafka's ``maxOffsetsPerTrigger`` is ``maxMessagesPerTrigger``).
_READ_LIMITS = (
    ("maxMessagesPerTrigger (or maxOffsetsPerTrigger)",
     ("maxmessagespertrigger", "maxoffsetspertrigger")),
    ("maxBytesPerTrigger", ("maxbytespertrigger",)),
    ("minOffsetsPerTrigger", ("minoffsetspertrigger",)),
)  # fmt: skip


def read_limit_options(options: Mapping[str, str]) -> list[str]:
    """The read limit options set (non-empty) in Spark's string ``options``, named for messages."""
    lowered = {str(k).lower(): v for k, v in options.items()}
    return [name for name, keys in _READ_LIMITS if any(lowered.get(k) for k in keys)]


def refuse_read_limits(options: list[str]) -> None:
    """Refuse read limit options on a PySpark without admission control (< 4.2).

    Args:
        options: the read limit options the query set (their Spark names).

    Raises:
        ConfigError: some are set and this PySpark cannot honour them.
    """
    if options and not ADMISSION_CONTROL:
        raise ConfigError(
            f"option {', '.join(options)} needs PySpark 4.2 or newer (admission control for "
            f"Python data sources); this is PySpark {pyspark.__version__}, where Spark asks "
            "for a micro-batch's end before it tells the source the start: drop the option "
            "(each micro-batch then reads what is available) or upgrade PySpark"
        )
