"""The demo's PySpark Structured Streaming pipeline: ORDERS -> enrich -> two outputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._workload import REGIONS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["Pipeline"]

ORDER_SCHEMA = (
    "order_id string, customer string, region string, "
    "items array<struct<sku: string, qty: int, price: double>>, "
    "amount decimal(12,2), ts long"
)


@dataclass
class Pipeline:
    """Two streaming queries over ``ORDERS``, each with its own checkpoint.

    ``enriched``: parse and enrich every order, write it to ``ORDERS_ENRICHED``
    through the jetstream sink (lineage msg ids, committed-batch records).
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

    @property
    def revenue_path(self) -> str:
        return f"{self.data_dir}/region_revenue.parquet"

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
        enriched = orders.select(
            "stream",
            "sequence",
            F.concat(F.lit("enriched.orders."), F.col("region")).alias("subject"),
            F.to_json(
                F.struct(
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
                    F.col("sequence").alias("source_seq"),
                )
            ).alias("data"),
        )
        return (
            enriched.writeStream.format("jetstream")
            .queryName("enriched")
            .option("servers", self.url)
            .option("stream", self.output_stream)
            .option("checkpointLocation", f"{self.data_dir}/checkpoints/enriched")
            .trigger(processingTime="500 milliseconds")
            .start()
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
