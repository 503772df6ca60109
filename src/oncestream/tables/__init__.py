"""Which table a lakehouse writer or reader means: the Iceberg catalogs.

Nothing here is public: the Spark writers (``oncestream.spark.iceberg``), the audit's
``iceberg:`` outputs and the demo reach it through the internal face
(``oncestream.tables._internal``); see docs/architecture.md.
"""

__all__: list[str] = []
