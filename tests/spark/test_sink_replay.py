"""Every sink against a replayed micro-batch: each input row once in its target.

Apache Paimon's Spark sink committed a replayed batch twice (apache/paimon#9666);
their regression test deletes the checkpoint's last ``commits/<n>`` entry and
restarts the query, so Spark runs batch ``n`` again, as after a driver that died
between the sink's commit and Spark's. The same here for each sink oncestream
has (tests/spark/_replay_jobs.py): the ``jetstream`` sink (its output stream's
duplicate window passed before the restart, so its committed-batch records alone
must catch the replay), ``transactional`` on SQLite and PostgreSQL, ``delta`` and
``iceberg``; on a classic session and through the shared Spark Connect server.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import make_streams, publish_orders
from oncestream.server import NatsServer
from oncestream.streams import StreamSpec
from tests.spark._replay_jobs import SINKS

pytestmark = pytest.mark.timeout(300)

ORDERS = 400


@pytest.mark.parametrize("sink", SINKS)
def test_a_replayed_batch_is_written_once(  # type: ignore[no-untyped-def]
    spark_job, sink: str, nats_server: NatsServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = nats_server.url
    out = StreamSpec(name="OUT", subjects=("out.>",), duplicate_window=0.5)
    make_streams(url, StreamSpec(name="IN", subjects=("in.>",)), out)
    publish_orders(url, "IN", "in.orders", ORDERS)
    target = {
        "jetstream": "",
        "sqlite": str(tmp_path / "out.db"),
        "postgres": request.getfixturevalue("postgres_url") if sink == "postgres" else "",
        "delta": str(tmp_path / "delta"),
        "iceberg": str(tmp_path / "lake"),
    }[sink]
    result = spark_job(
        "replay_sink", sink=sink, url=url, target=target, work=str(tmp_path), batch=ORDERS // 2
    )
    assert (result["first"], result["second"]) == (None, None), result
    assert result["batches"] == [0, 1]
    assert result["commits_after"] == [0, 1]  # the replayed batch ran and was committed again
    keys = result["keys"]
    duplicated = sorted({k for k in keys if keys.count(k) > 1})
    assert (len(keys), duplicated[:5]) == (ORDERS, [])
    assert keys == [f"o{i:06d}" for i in range(ORDERS)]
