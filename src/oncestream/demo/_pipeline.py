"""The demo's PySpark Structured Streaming pipeline: ORDERS -> enrich -> two outputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._workload import REGIONS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["OUTPUTS", "Pipeline"]

#: Where the enriched orders land: the ORDERS_ENRICHED stream (with the revenue as a
#: Parquet file: the default), or a Delta or Iceberg table.
OUTPUTS = ("parquet", "delta", "iceberg")
#: The Iceberg table of ``--output iceberg``, in the catalog kept in ``<data dir>/lake``.
ICEBERG_TABLE = "demo.orders_enriched"

ORDER_SCHEMA = (
    "order_id string, customer string, region string, "
    "items array<struct<sku: string, qty: int, price: double>>, "
    "amount decimal(12,2), ts long"
)


@dataclass
class Pipeline:
    """Two streaming queries over ``ORDERS``, each with its own checkpoint.

    ``enriched``: parse and enrich every order, write it to ``ORDERS_ENRICHED``
    through the jetstream sink (lineage msg ids, committed-batch records), or with
    ``output`` ``delta`` / ``iceberg`` as rows of a table (:attr:`table_output`)
    through ``oncestream.spark.delta`` / ``iceberg`` (the batch id in the commit).
    ``revenue``: per-region order count and revenue (a stateful aggregation),
    rewritten as a whole Parquet table by each micro-batch (complete mode, so a
    replayed batch rewrites the same table).
    """

    spark: SparkSession
    url: str
    data_dir: str
    input_stream: str = "ORDERS"
    output_stream: str = "ORDERS_ENRICHED"
    max_per_trigger: int = 40000
    output: str = "parquet"

    @property
    def revenue_path(self) -> str:
        return f"{self.data_dir}/region_revenue.parquet"

    @property
    def table_output(self) -> str | None:
        """The audit's spec of the table the enriched orders land in (None: the stream)."""
        if self.output == "delta":
            return f"delta:{self.data_dir}/orders_enriched"
        if self.output == "iceberg":
            return f"iceberg:{self.data_dir}/lake#{ICEBERG_TABLE}"
        return None

    def enriched_rows(self) -> int:
        """Rows in the enriched table so far (-1: none yet, or being committed)."""
        try:
            if self.output == "delta":
                from deltalake import DeltaTable

                actions = DeltaTable(f"{self.data_dir}/orders_enriched").get_add_actions(True)
                return int(sum(actions.column("num_records").to_pylist()))
            from ..tables._internal import catalog_spec

            spec = catalog_spec(None, f"{self.data_dir}/lake", "oncestream")
            snapshot = spec.load().load_table(ICEBERG_TABLE).current_snapshot()
            return int(snapshot.summary["total-records"]) if snapshot else 0
        except Exception:
            return -1

    def _orders(self) -> DataFrame:
        from pyspark.sql import functions as F

        from ..spark._internal import supports_read_limits

        reader = (
            self.spark.readStream.format("jetstream")
            .option("servers", self.url)
            .option("stream", self.input_stream)
            .option("startingOffsets", "earliest")
            .option("minPartitions", 2)
        )
        if supports_read_limits():  # PySpark < 4.2: a batch reads what has arrived
            reader = reader.option("maxMessagesPerTrigger", self.max_per_trigger)
        raw = reader.load()
        return raw.select(
            "stream",
            "sequence",
            F.col("timestamp").alias("stored_at"),
            F.from_json(F.col("data").cast("string"), ORDER_SCHEMA).alias("o"),
        ).select("stream", "sequence", "stored_at", "o.*")

    def start_enriched(self) -> StreamingQuery:
        from pyspark.sql import functions as F

        names = F.create_map(*[F.lit(x) for k, (n, _) in REGIONS.items() for x in (k, n)])
        vat = F.create_map(*[F.lit(x) for k, (_, r) in REGIONS.items() for x in (k, r)])
        orders = self._orders()
        item_count = F.aggregate("items", F.lit(0), lambda acc, it: acc + it["qty"])
        columns: list[Column | str] = [
            "order_id",
            "customer",
            "region",
            names[F.col("region")].alias("region_name"),
            item_count.alias("item_count"),
            F.col("amount").cast("string").alias("amount"),
            F.round(F.col("amount") * vat[F.col("region")].cast("double"), 2).alias("vat"),
            F.when(F.col("amount") >= 300, "large")
            .when(F.col("amount") >= 100, "medium")
            .otherwise("small")
            .alias("band"),
            "ts",
        ]
        checkpoint = f"{self.data_dir}/checkpoints/enriched"
        if self.output != "parquet":
            return (
                orders.select("stream", "sequence", *columns)
                .writeStream.foreachBatch(self._table_writer(checkpoint))
                .queryName("enriched")
                .option("checkpointLocation", checkpoint)
                .trigger(processingTime="500 milliseconds")
                .start()
            )
        enriched = orders.select(
            "stream",
            "sequence",
            F.concat(F.lit("enriched.orders."), F.col("region")).alias("subject"),
            F.to_json(F.struct(*columns, F.col("sequence").alias("source_seq"))).alias("data"),
        )
        return (
            enriched.writeStream.format("jetstream")
            .queryName("enriched")
            .option("servers", self.url)
            .option("stream", self.output_stream)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="500 milliseconds")
            .start()
        )

    def _table_writer(self, checkpoint: str) -> Any:
        from ..spark import delta, iceberg

        if self.output == "delta":
            return delta(f"{self.data_dir}/orders_enriched", checkpoint_location=checkpoint)
        return iceberg(
            ICEBERG_TABLE, warehouse=f"{self.data_dir}/lake", checkpoint_location=checkpoint
        )

    def start_revenue(self) -> StreamingQuery:
        from pyspark.sql import functions as F

        revenue = (
            self._orders()
            .groupBy("region")
            .agg(F.count("*").alias("orders"), F.sum("amount").alias("revenue"))
        )
        path = self.revenue_path

        def write(df: Any, batch_id: int) -> None:
            # Complete mode: each batch holds the whole table; a replay rewrites the same.
            df.coalesce(1).write.mode("overwrite").parquet(path)

        return (
            revenue.writeStream.outputMode("complete")
            .queryName("revenue")
            .foreachBatch(write)
            .option("checkpointLocation", f"{self.data_dir}/checkpoints/revenue")
            .trigger(processingTime="2 seconds")
            .start()
        )
