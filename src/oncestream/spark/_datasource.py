"""The ``jetstream`` PySpark data source: one class, read and write sides.

Reader classes live in :mod:`oncestream.spark._source`, writer classes in
:mod:`oncestream.spark._sink`; both are imported lazily so executors only load
what the query uses.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

__all__ = ["JetStreamDataSource"]


class JetStreamDataSource(DataSource):
    """``spark.read/readStream/write/writeStream.format("jetstream")``."""

    @classmethod
    def name(cls) -> str:
        return "jetstream"

    def schema(self) -> StructType | str:
        """The source's fixed schema; on PySpark 4.0/4.1 read limits are refused here.

        Spark asks for the schema when a read is defined (``load()``, or a Connect
        command analysing it), before any query runs: the earliest place to refuse
        an option this PySpark cannot honour (``_compat.py`` says why).

        Raises:
            ConfigError: a read limit option on PySpark < 4.2.
        """
        from ._compat import read_limit_options, refuse_read_limits
        from ._source import SCHEMA

        refuse_read_limits(read_limit_options(dict(self.options)))
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        from ._source import JetStreamBatchReader

        return JetStreamBatchReader(dict(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from ._source import JetStreamStreamReader

        return JetStreamStreamReader(dict(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from ._sink import JetStreamBatchWriter

        return JetStreamBatchWriter(dict(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from ._sink import JetStreamStreamWriter

        return JetStreamStreamWriter(dict(self.options), schema, overwrite)

    def __repr__(self) -> str:
        options: dict[str, Any] = dict(self.options)
        return f"JetStreamDataSource(stream={options.get('stream')!r})"
