"""PySpark integration: the ``jetstream`` data source (source and sink).

Example::

    import oncestream.spark

    oncestream.spark.register(spark)
    df = (spark.readStream.format("jetstream")
          .option("servers", "nats://127.0.0.1:4222")
          .option("stream", "ORDERS")
          .load())
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ._lag import lag
from ._register import register
from ._session import local_session

__all__ = [
    "delta",
    "iceberg",
    "instrument_query",
    "lag",
    "local_session",
    "register",
    "transactional",
]


if _TYPE_CHECKING:
    from ._delta import delta
    from ._foreach_batch import transactional
    from ._iceberg import iceberg
    from ._metrics import instrument_query


def __getattr__(name: str) -> object:
    # Lazy, so importing oncestream.spark stays cheap (no pyspark / psycopg).
    if name == "transactional":
        from ._foreach_batch import transactional

        return transactional
    if name == "delta":
        from ._delta import delta

        return delta
    if name == "iceberg":
        from ._iceberg import iceberg

        return iceberg
    if name == "instrument_query":
        from ._metrics import instrument_query

        return instrument_query
    raise AttributeError(f"module 'oncestream.spark' has no attribute {name!r}")
