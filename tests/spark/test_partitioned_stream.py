"""The jetstream source and sink, and the audit, on partitioned streams.

What they show: the subjects as stored, ``<partition>.<subject>``; the source's
``subjects`` option filters stored subjects (``*.pin.*`` every partition, ``3.pin.*``
one); the sink writes rows with the subjects producers know and the server maps
them; lineage ids and the audit do not depend on subjects.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from pyspark.sql import functions as F

from harness import make_streams
from oncestream import Connection
from oncestream.server import NatsServer
from oncestream.streams import Partitioning, StreamSpec
from tests.integration._cli import with_conn
from tests.spark._helpers import publish, source_options
from tests.spark._sink_helpers import run_audit, stream_state

pytestmark = pytest.mark.timeout(180)

LAYOUT = Partitioning(subjects="pin.*", partitions=4, key=(1,))


def test_read_write_and_audit_a_partitioned_stream(spark: Any, nats_server: NatsServer) -> None:
    url = nats_server.url
    make_streams(
        url,
        StreamSpec(name="PIN", subjects=("pin.*",), partitions=4, partition_key=(1,)),
        StreamSpec(name="POUT", subjects=("pout.*",), partitions=4, partition_key=(1,)),
    )

    async def fill(conn: Connection) -> None:
        for key in range(12):
            await publish(conn, f"pin.k{key}", 10, start=key * 10, headers=True)

    with_conn(url, fill)
    read = spark.read.format("jetstream").options(**source_options(url, "PIN")).load()
    rows = read.collect()
    assert len(rows) == 120
    assert {r.subject for r in rows} == {LAYOUT.stored_subject(f"pin.k{k}") for k in range(12)}
    every = spark.read.format("jetstream").options(**source_options(url, "PIN", subjects="*.pin.*"))
    assert every.load().count() == 120
    one = spark.read.format("jetstream").options(**source_options(url, "PIN", subjects="3.pin.*"))
    expected = sum(10 for k in range(12) if LAYOUT.partition_of(f"pin.k{k}") == 3)
    assert one.load().count() == expected
    # The sink: rows on the subjects producers know, lineage ids from stream and sequence.
    out = read.select(
        F.col("stream"),
        F.col("sequence"),
        F.regexp_replace(F.col("subject"), r"^\d+\.pin\.", "pout.").alias("subject"),
        F.col("data"),
    )
    for _ in range(2):  # written twice: stored once (msg ids)
        out.write.format("jetstream").option("servers", url).option("stream", "POUT").mode(
            "append"
        ).save()
    assert stream_state(url, "POUT")["messages"] == 120
    stored = spark.read.format("jetstream").options(**source_options(url, "POUT")).load()
    by_subject = Counter(r.subject for r in stored.collect())
    assert by_subject == {
        Partitioning(subjects="pout.*", partitions=4, key=(1,)).stored_subject(f"pout.k{k}"): 10
        for k in range(12)
    }
    report = run_audit(url, "PIN", "stream:POUT", key="lineage")
    assert report.ok, report.to_dict()
    assert report.outputs[0].found == 120
