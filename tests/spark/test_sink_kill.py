"""A streaming query killed between writing and committing a micro-batch, then restarted.

The driver is killed at the planted point as a machine failure would kill it,
on a classic session and under Spark Connect. Classic: the driver is a
subprocess (tests/spark/_sink_driver_job.py) whose whole session is
SIGKILLed. Connect: the driver is the Connect server, where the sink's commit
runs; each killed run has a server of its own (SIGKILLed with its Python
workers; the client sees its query fail), and the restart runs on the test
session's shared server. After the restart the output stream must hold every
input exactly once, whether or not the replay happens inside the target's
duplicate window. Restarts "after the window" wait for the server to drop the
window's ids (``await_window_passed``), not for a fixed time.

Under Connect the tests run once per kill point and id kind; the ingest paths
(``acks``/``fast``/``atomic``) run in the executors' tasks alike under both, so
they run classic only (a Connect server start is 10-20 s of CI time per kill).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import make_streams, publish_orders
from oncestream.server import NatsServer
from oncestream.spark._session import scratch_root
from oncestream.streams import StreamSpec
from tests.spark._sink_drivers import CLASSIC, DRIVERS, Drivers, ingest_cases
from tests.spark._sink_helpers import (
    raw_headers_of,
    run_audit,
    stream_state,
)


@ingest_cases(soak=(("atomic", "classic"),))  # atomic: test_sink_kill_window
def test_killed_before_commit_inside_dedup_window(
    nats_server: NatsServer, tmp_path: Path, ingest: str, mode: str, drivers: Drivers
) -> None:
    url = nats_server.url
    make_streams(
        url,
        StreamSpec(name="IN", subjects=("in.>",)),
        StreamSpec(
            name="OUT",
            subjects=("out.>",),
            duplicate_window=120.0,
            allow_batched=ingest == "fast",
            allow_atomic=ingest == "atomic",
        ),
    )
    publish_orders(url, "IN", "in.orders", 2000)
    checkpoint = tmp_path / "chk"
    assert drivers.run(url, checkpoint, "lineage", "before:1", ingest=ingest) == -9
    killed = scratch_root() / str(DRIVERS[-1]) if mode == "classic" else None
    if killed is not None:
        # The killed JVM's scratch files are in its driver's folder, not loose in /tmp.
        assert any(p.name.startswith("blockmgr-") for p in killed.iterdir()), list(killed.iterdir())
    # Batch 1 was written, neither the sink nor Spark committed it.
    assert stream_state(url, "OUT")["messages"] == 1000
    log = tmp_path / "spark.log" if mode == "classic" else None
    assert drivers.run(url, checkpoint, "lineage", "none", spark_log=log, ingest=ingest) == 0
    if killed is not None:
        assert not killed.exists(), "the next local_session removes a killed driver's scratch"
    report = run_audit(url, "IN", "stream:OUT", key="lineage")
    assert report.ok, report.to_dict()
    assert stream_state(url, "OUT")["messages"] == 2000
    # The atomic path really ran: stored messages keep their batch headers.
    assert (b"Nats-Batch-Id" in raw_headers_of(url, "OUT", 2000)) is (ingest == "atomic")


# make soak (two drivers, 100-140 s): make test keeps the columns path without a kill
# (test_sink.py::test_batch_write_with_msg_id_column) and the fast path's kills above.
@pytest.mark.soak
@CLASSIC
def test_killed_before_commit_with_a_msg_id_column(
    nats_server: NatsServer, tmp_path: Path, mode: str, drivers: Drivers
) -> None:
    """The sink's columns path (fast ingest, one subject, a msg_id column) through a kill."""
    url = nats_server.url
    make_streams(
        url,
        StreamSpec(name="IN", subjects=("in.>",)),
        StreamSpec(name="OUT", subjects=("out.>",), duplicate_window=120.0, allow_batched=True),
    )
    publish_orders(url, "IN", "in.orders", 2000)
    checkpoint = tmp_path / "chk"
    assert drivers.run(url, checkpoint, "column", "before:1", ingest="fast") == -9
    assert stream_state(url, "OUT")["messages"] == 1000
    assert drivers.run(url, checkpoint, "column", "none", ingest="fast") == 0
    report = run_audit(url, "IN", "stream:OUT", key="field:order_id")
    assert report.ok, report.to_dict()
    assert stream_state(url, "OUT")["messages"] == 2000
